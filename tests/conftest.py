"""Shared end-to-end runs: each (fixture, backends) pair runs once per test session."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tracediff.cli import cli

# Several torch processes share the cores during the suite (the pytest-xdist workers, each `tracediff run`'s
# recordings, the clean-script and tracker batches run two at a time). OpenMP's worker threads busy-wait for
# work by default, burning the cores the other processes need: three judged runs of a 60-step training
# script side by side took 78 s of CPU instead of 24 s. Passive waiting (idle threads sleep) changes no
# thread count, kernel or result. Set here, before any test module imports torch; children inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Inductor checks each vector ISA the CPU reports by compiling and loading a small library in a subprocess:
# six `python -c` loads (~1 s of CPU) in every process that compiles, and six compiles (~15 s) in every fresh
# cache directory (each `tracediff fix` and `bisect` run has its own). Taking the CPU's word picks the same ISA
# where the compiler works; where it does not, kernels fail to build and the tests fail loudly.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
# `tracediff run` without the same-input judge: the verdict of the traces' own rules (alignment, kernels,
# narrowing, calibration), as `tracediff diff` of two recordings gives it. Tests of those rules pass it.
TRACES_ONLY = "--no-same-inputs"


def child_command(trace: Path, script: Path, backend: str | None, **recording: Any) -> list[str]:
    """The command the launcher runs to record `script` into `trace` (child.py), as tests run it by hand."""
    import sys

    from tracediff.launch.recording import Recording

    return [sys.executable, "-m", "tracediff.child", "--out", str(trace),
            "--recording", Recording(backend, **recording).to_json(), str(script)]


def marker_line(fixture: str, marker: str) -> int:
    """Line number of the `# tracediff: <marker>` comment in a fixture."""
    for number, line in enumerate((FIXTURES / fixture).read_text().splitlines(), start=1):
        if line.rstrip().endswith(f"# tracediff: {marker}"):
            return number
    raise AssertionError(f"no '# tracediff: {marker}' in {fixture}")


class Result:
    def __init__(self, exit_code: int, stdout: str, stderr: str) -> None:
        self.exit_code, self.stdout, self.stderr = exit_code, stdout, stderr

    @property
    def report(self) -> dict[str, Any]:
        return json.loads(self.stdout)


def _runner() -> CliRunner:
    try:  # click 8.1 mixes stderr into stdout unless told not to; 8.2+ always separates them
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


def ctrl_c_as_from_a_terminal() -> None:
    """A `preexec_fn`: the child starts with Ctrl-C as a terminal gives it, whatever this process inherited. pytest
    started as a background job (`make test &`) inherits SIGINT ignored, and a child started from it would ignore
    Ctrl-C too (a fork client has its recording ignore it, as a child in its place would): a test of Ctrl-C then
    waits forever."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def invoke(*args: str) -> Result:
    runner = _runner()
    result = runner.invoke(cli, list(args), catch_exceptions=False)
    return Result(result.exit_code, result.stdout, result.stderr)


@pytest.fixture(scope="session", autouse=True)
def frozen_imports() -> None:
    """What a worker has imported by its first test (torch, inductor, the test modules) lives to its end: the
    cycle collector need not walk it again in each run a test makes in-process (child.py and the fork servers
    freeze theirs alike)."""
    import gc

    gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def one_inductor_cache() -> None:
    """Every process of the session compiles into one inductor cache, torch's default one. Left unset, the
    first inductor import in a process sets it from tempfile's directory, which tests/test_bisect.py points
    at a folder of one test's own: every later run of that pytest worker then compiled from a cold cache.
    (A fixture, not module code: the lookup imports torch, which the xdist controller never needs.)"""
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        os.environ["TORCHINDUCTOR_CACHE_DIR"] = default_cache_dir()


@pytest.fixture(scope="session", autouse=True)
def recording_forks(one_inductor_cache: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str | None]:
    """The session's recording children are forked from servers that imported torch (tests/recording_forks.py).
    Its value: the folder of the servers' sockets (None: TRACEDIFF_TEST_FORKS=0)."""
    from tests.recording_forks import forked_recordings, wanted

    if not wanted():
        yield None
        return
    with forked_recordings(tmp_path_factory.mktemp("fork-servers")) as sockets:
        yield sockets


@pytest.fixture(autouse=True)
def fresh_children(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test marked `fresh_children` starts its runs' children as a user's run does, not from a fork server."""
    from tracediff.launch.launcher import CHILD_PREFIX_VARIABLE

    if request.node.get_closest_marker("fresh_children"):
        monkeypatch.delenv(CHILD_PREFIX_VARIABLE, raising=False)


@pytest.fixture(scope="session")
def run_fixture(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Result]:
    cache: dict[tuple[str, ...], Result] = {}

    def run(fixture: str, backends: str, *extra: str) -> Result:
        key = (fixture, backends, *extra)
        if key not in cache:
            out = tmp_path_factory.mktemp(fixture.replace(".py", "").replace("/", "_"))
            cache[key] = invoke("run", str(FIXTURES / fixture), "--backends", backends, "--out-dir", str(out),
                                "--format", "json", *extra)
        return cache[key]

    return run


# The test files that take longest, longest first (measured on 2 cores). `--dist loadfile` hands whole files to
# the workers in collection order: started first, the long ones leave short files for the end, where they
# fill the gaps, instead of one long file running on alone after the other worker has finished. The order only
# steers the schedule (the Makefile passes --no-loadscope-reorder, which keeps it); a stale list slows the run,
# nothing else.
LONGEST_FIRST = (
    "test_clean_scripts_inductor.py",
    "test_tracker_bugs.py",
    "test_same_inputs_runs.py",
    "test_clean_scripts_aot_eager.py",
    "test_narrow.py",
    "test_distributed_diff.py",
    "test_multinode.py",
    "test_cli.py",
    "test_bisect.py",
    "test_kernels.py",
    "test_repro.py",
    "test_fix.py",
    "test_fix_inductor.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's own order is kept
