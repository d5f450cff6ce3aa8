"""Render a report as JUnit XML for CI systems. Pure: report dict in, str out.

One `<testsuite>` holding one `<testcase>` for the run (reference vs
candidate backend). CI systems (GitLab, Jenkins, GitHub test reporters) show
it as a test that passed, failed or errored, matching the exit code:

- verdict `match` (exit 0): the testcase passes;
- verdict `diverged` (exit 1): a `<failure>` whose message names the op and
  source line and whose body is the text report;
- verdict `failed` (exit 3): an `<error>` saying which run failed.

A passing testcase carries the text report in `<system-out>`. Characters XML 1.0 cannot hold
(terminal escapes in a captured log, say) are dropped, so the file always
parses.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import PurePath
from typing import Any

from tracediff.report.text import render_text

# XML 1.0 allows tab, newline, carriage return and most of the rest of Unicode, not other control characters.
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean(text: Any) -> str:
    return _NOT_XML.sub("", "" if text is None else str(text))


def _names(report: dict[str, Any]) -> tuple[str, str]:
    """(classname, name): `tracediff.<script or trace>` and `<A backend> vs <B backend>`."""
    runs = report.get("runs") or []
    backends = [str(r.get("backend") or label) for r, label in zip([*runs, {}, {}], "AB")]
    traces = report.get("traces") or []
    subject = report.get("script") or (traces[1] if len(traces) > 1 else "trace")
    stem = PurePath(str(subject)).name.split(".")[0] or "trace"
    return f"tracediff.{stem}", f"{backends[0]} vs {backends[1]}"


def _failure_message(first: dict[str, Any]) -> str:
    where = f" at {first['source']}" if first.get("source") else ""
    module = f" in {first['module']}" if first.get("module") else ""
    rel = first.get("rel_diff")
    rel_text = f" (rel diff {rel:.3g})" if isinstance(rel, (int, float)) else ""
    return f"first divergence ({first['kind']}): {first['op']} #{first['index']}{where}{module}{rel_text}"


def _elapsed(report: dict[str, Any]) -> float:
    return round(sum(float(r.get("elapsed_s") or 0) for r in report.get("runs") or []), 3)


def render_junit(report: dict[str, Any], suite_name: str = "tracediff") -> str:
    """The JUnit XML document for one tracediff report."""
    verdict = report["verdict"]
    text = render_text(report)
    classname, name = _names(report)
    failures = int(verdict == "diverged")
    errors = int(verdict == "failed")
    time = f"{_elapsed(report):g}"

    suites = ET.Element("testsuites", name=suite_name, tests="1", failures=str(failures), errors=str(errors),
                        time=time)
    suite = ET.SubElement(suites, "testsuite", name=suite_name, tests="1", failures=str(failures),
                          errors=str(errors), skipped="0", time=time)
    properties = ET.SubElement(suite, "properties")
    props = {"verdict": verdict, "exit_code": report.get("exit_code")}
    for label, path in zip("ab", report.get("traces") or []):
        props[f"trace_{label}"] = path
    first = report.get("first_divergence")
    if first:
        props.update(op=first.get("op"), index=first.get("index"), source=first.get("source"),
                     module=first.get("module"), rel_diff=first.get("rel_diff"))
    for key, value in props.items():
        if value is not None:
            ET.SubElement(properties, "property", name=key, value=_clean(value))

    case = ET.SubElement(suite, "testcase", classname=_clean(classname), name=_clean(name), time=time)
    if verdict == "diverged" and first:
        ET.SubElement(case, "failure", message=_clean(_failure_message(first)), type="divergence").text = _clean(text)
    elif verdict == "diverged":  # e.g. --strict-structure with no value difference
        ET.SubElement(case, "failure", message="diverged", type="divergence").text = _clean(text)
    elif verdict == "failed":
        failed = [f"run {label}: {r['failure']}" for label, r in zip("AB", report.get("runs") or []) if r.get("failure")]
        message = "; ".join(failed) or "; ".join(report.get("notes") or []) or "a run failed"
        ET.SubElement(case, "error", message=_clean(message), type="run_failed").text = _clean(text)
    else:
        ET.SubElement(case, "system-out").text = _clean(text)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
