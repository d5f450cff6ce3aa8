"""`tracediff fix`'s text report: the diagnosis as `run` prints it, then the fix and every change tried."""

from __future__ import annotations

from typing import Any

from tracediff.report.text import render_text


def _ms(value: float | None) -> str:
    return f"{value:.3f} ms" if value is not None else "not timed"


def render_fix(report: dict[str, Any]) -> str:
    lines = [render_text(report).rstrip("\n"), ""]
    attempts = report.get("attempts") or []
    fix = report.get("fix")
    if fix:
        lines.append(f"Fix: {fix['description']}")
        lines.append("  paste into the script (before the first call of the compiled code):")
        lines += [f"    {line}" for line in fix["patch"]]
        cost = f"  cost: {_ms(fix['ms_per_call'])} per compiled call, against {_ms(fix['baseline_ms_per_call'])} as compiled"
        if fix.get("slowdown") is not None:
            cost += f" ({fix['slowdown']:.2f}x)"
        lines.append(cost)
        lines.append(f"  {fix['advice']}")
    elif attempts:
        lines.append(f"No fix: none of the {len(attempts)} changes tried makes the compiled run match eager.")
    if report.get("fix_stopped"):
        lines.append(f"  the search stopped early: {report['fix_stopped']}")
    if attempts:
        lines.append(f"Changes tried ({len(attempts)}), most local first:")
        for number, attempt in enumerate(attempts, 1):
            timed = f", {_ms(attempt['ms_per_call'])} per call" if attempt.get("ms_per_call") is not None else ""
            failure = f" ({attempt['failure']})" if attempt.get("failure") else ""
            lines.append(f"  {number}. {attempt['description']}: {attempt['verdict']}{failure}, "
                         f"{attempt['seconds']:.1f} s{timed}")
    return "\n".join(lines) + "\n"
