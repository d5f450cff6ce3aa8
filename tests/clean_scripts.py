"""Ordinary training and evaluation scripts must `match`: no false alarm, crash or wrong exit code.

Each script in fixtures/clean/ is the kind of program people really run (a
DataLoader with workers, gradient accumulation, autocast, checkpointing, an
LSTM, ...), correct by construction. Under `aot_eager` and `inductor` every one
must come back `match`, exit 0, with the JSON report; anything else is a
tracediff bug (fixtures/clean/README.md).

The checks of each backend are a test file of their own (test_clean_scripts_<backend>.py): each is minutes of
recordings, and pytest-xdist's `--dist loadfile` gives a file to one worker, so the two backends run side by side.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES
from tests.recording_forks import cli_command

CLEAN = FIXTURES / "clean"
SCRIPTS = sorted(path.name for path in CLEAN.glob("*.py"))


# Known false alarms not fixed yet, each with the reason; strict: a fix makes the test XPASS and fail.
KNOWN_FALSE_ALARMS: dict[tuple[str, str], str] = {}


def params(backend: str) -> list:
    return [pytest.param(script, marks=pytest.mark.xfail(reason=KNOWN_FALSE_ALARMS[script, backend], strict=True))
            if (script, backend) in KNOWN_FALSE_ALARMS else script for script in SCRIPTS]


# Each check is two recordings of mostly single-threaded Python (dynamo, the recorder): run the
# selected scripts of one backend side by side, one per core, instead of one after another.
_WORKERS = max(2, min(4, os.cpu_count() or 2))


def _run(script: str, backend: str, out_dir: Path) -> subprocess.CompletedProcess:
    # --no-narrow: a failure should fail fast, not re-run inductor once per fused op.
    return subprocess.run(
        cli_command("run", str(CLEAN / script), "--backends", f"eager,{backend}",
                    "--out-dir", str(out_dir), "--format", "json", "--no-narrow"),
        capture_output=True, text=True, cwd=CLEAN, timeout=900)


def batched_checks(backend: str, test: str) -> Callable[..., Callable[[str], subprocess.CompletedProcess]]:
    """A module-scoped fixture for a test module whose test `test` is parametrized by `script`: `checked(script)`
    is that run's result under `backend`; the first call runs every selected script of the module at once."""

    @pytest.fixture(scope="module")
    def checked(request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], subprocess.CompletedProcess]:
        done: dict[str, subprocess.CompletedProcess] = {}

        def selected() -> list[str]:
            return [item.callspec.params["script"] for item in request.session.items
                    if item.module is request.module and item.originalname == test]

        def check(script: str) -> subprocess.CompletedProcess:
            if script not in done:
                scripts = selected() or [script]
                with ThreadPoolExecutor(_WORKERS) as pool:
                    runs = pool.map(lambda s: _run(s, backend, tmp_path_factory.mktemp(f"{backend}-{s[:-3]}")),
                                    scripts)
                    done.update(zip(scripts, runs))
            return done[script]

        return check

    return checked


def assert_matches(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["verdict"] == "match", report.get("first_divergence")
    assert report["exit_code"] == 0
    assert report["compiled"] is True  # the script reached torch.compile: not two identical eager runs
    assert all(Path(trace).is_file() for trace in report["traces"])
