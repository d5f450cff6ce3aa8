"""Ordinary training and evaluation scripts must `match`: no false alarm, crash or wrong exit code.

Each script in fixtures/clean/ is the kind of program people really run (a
DataLoader with workers, gradient accumulation, autocast, checkpointing, an
LSTM, ...), correct by construction. Under `aot_eager` and `inductor` every one
must come back `match`, exit 0, with the JSON report; anything else is a
tracediff bug (fixtures/clean/README.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FIXTURES, invoke

CLEAN = FIXTURES / "clean"
SCRIPTS = sorted(path.name for path in CLEAN.glob("*.py"))


# Known false alarms not fixed yet, each with the reason; strict: a fix makes the test XPASS and fail.
KNOWN_FALSE_ALARMS: dict[tuple[str, str], str] = {}


def _params(backend: str) -> list:
    return [pytest.param(script, marks=pytest.mark.xfail(reason=KNOWN_FALSE_ALARMS[script, backend], strict=True))
            if (script, backend) in KNOWN_FALSE_ALARMS else script for script in SCRIPTS]


def _run(script: str, backend: str, out_dir: Path) -> None:
    # --no-narrow: a failure should fail fast, not re-run inductor once per fused op.
    result = invoke("run", str(CLEAN / script), "--backends", f"eager,{backend}", "--out-dir", str(out_dir),
                    "--format", "json", "--no-narrow")
    assert result.exit_code == 0, (result.stdout or "") + (result.stderr or "")
    report = result.report
    assert report["verdict"] == "match", report.get("first_divergence")
    assert report["exit_code"] == 0
    assert report["compiled"] is True  # the script reached torch.compile: not two identical eager runs
    assert all(Path(trace).is_file() for trace in report["traces"])


def test_the_set_is_there() -> None:
    assert len(SCRIPTS) >= 12, SCRIPTS


@pytest.mark.parametrize("script", _params("aot_eager"))
def test_matches_under_aot_eager(script: str, tmp_path: Path) -> None:
    _run(script, "aot_eager", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("script", _params("inductor"))
def test_matches_under_inductor(script: str, tmp_path: Path) -> None:
    _run(script, "inductor", tmp_path)
