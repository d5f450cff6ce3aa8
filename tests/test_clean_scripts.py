"""Ordinary training and evaluation scripts must `match`: no false alarm, crash or wrong exit code.

Each script in fixtures/clean/ is the kind of program people really run (a
DataLoader with workers, gradient accumulation, autocast, checkpointing, an
LSTM, ...), correct by construction. Under `aot_eager` and `inductor` every one
must come back `match`, exit 0, with the JSON report; anything else is a
tracediff bug (fixtures/clean/README.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES

CLEAN = FIXTURES / "clean"
SCRIPTS = sorted(path.name for path in CLEAN.glob("*.py"))


# Known false alarms not fixed yet, each with the reason; strict: a fix makes the test XPASS and fail.
KNOWN_FALSE_ALARMS: dict[tuple[str, str], str] = {}


def _params(backend: str) -> list:
    return [pytest.param(script, marks=pytest.mark.xfail(reason=KNOWN_FALSE_ALARMS[script, backend], strict=True))
            if (script, backend) in KNOWN_FALSE_ALARMS else script for script in SCRIPTS]


# Each check is two recordings of mostly single-threaded Python (dynamo, the recorder): run the
# selected scripts of one backend side by side, one per core, instead of one after another.
_WORKERS = max(2, min(4, os.cpu_count() or 2))


def _run(script: str, backend: str, out_dir: Path) -> subprocess.CompletedProcess:
    # --no-narrow: a failure should fail fast, not re-run inductor once per fused op.
    return subprocess.run(
        [sys.executable, "-m", "tracediff.cli", "run", str(CLEAN / script), "--backends", f"eager,{backend}",
         "--out-dir", str(out_dir), "--format", "json", "--no-narrow"],
        capture_output=True, text=True, cwd=CLEAN, timeout=900)


@pytest.fixture(scope="module")
def checked(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Any]:
    """`checked(script, backend)`: that run's result; the first call runs every selected script of the backend."""
    done: dict[tuple[str, str], subprocess.CompletedProcess] = {}

    def selected(backend: str) -> list[str]:
        test = f"test_matches_under_{backend}"
        return [item.callspec.params["script"] for item in request.session.items
                if item.module is request.module and item.originalname == test]

    def check(script: str, backend: str) -> subprocess.CompletedProcess:
        if (script, backend) not in done:
            scripts = selected(backend) or [script]
            with ThreadPoolExecutor(_WORKERS) as pool:
                runs = pool.map(lambda s: _run(s, backend, tmp_path_factory.mktemp(f"{backend}-{s[:-3]}")), scripts)
                done.update(((s, backend), r) for s, r in zip(scripts, runs))
        return done[script, backend]

    return check


def _assert_matches(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["verdict"] == "match", report.get("first_divergence")
    assert report["exit_code"] == 0
    assert report["compiled"] is True  # the script reached torch.compile: not two identical eager runs
    assert all(Path(trace).is_file() for trace in report["traces"])


def test_the_set_is_there() -> None:
    assert len(SCRIPTS) >= 12, SCRIPTS


@pytest.mark.parametrize("script", _params("aot_eager"))
def test_matches_under_aot_eager(script: str, checked) -> None:
    _assert_matches(checked(script, "aot_eager"))


@pytest.mark.slow
@pytest.mark.parametrize("script", _params("inductor"))
def test_matches_under_inductor(script: str, checked) -> None:
    _assert_matches(checked(script, "inductor"))
