"""The suite's forked recording children (tests/recording_forks.py) are what fresh ones would be.

A fork starts its script with the modules a fresh child has there, writes the same trace, exits as the
fresh child does (status, signal, Ctrl-C passed on), takes its own children with it when its client is
killed (as the launcher kills a run that timed out), and is not used where torch would be imported under
another environment. The launcher's own handling of fresh children is tested by the tests marked
`fresh_children` (test_exit_codes.py, test_child_processes.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, child_command, ctrl_c_as_from_a_terminal, invoke
from tests.recording_forks import cli_command, wait_until_listening
from tracediff.launch.launcher import CHILD_PREFIX_VARIABLE
from tracediff.trace.reader import Trace


@pytest.fixture(autouse=True)
def servers_listening(recording_forks: str | None) -> None:
    if recording_forks is None:
        pytest.skip("the fork servers are off (TRACEDIFF_TEST_FORKS=0, or an NVIDIA GPU here)")
    wait_until_listening(recording_forks)


# Imported by the fork server's own code (its socket protocol lives in tests/fork_client.py), not a child's.
SERVER_MODULES = {"fork_client"}


def _command(tmp_path: Path, script_text: str, backend: str | None, *script_args: str,
             forked: bool = True) -> list[str]:
    script = tmp_path / "script.py"
    script.write_text(script_text)
    prefix = shlex.split(os.environ[CHILD_PREFIX_VARIABLE]) if forked else []
    return [*prefix, *child_command(tmp_path / f"t-{forked}.jsonl", script, backend), "--", *script_args]


def _run(command: list[str], **options: Any) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=300, **options)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor", None])
def test_a_fork_starts_its_script_with_the_modules_of_a_fresh_child(tmp_path: Path, backend: str | None) -> None:
    dump = "import json, sys\njson.dump(sorted(sys.modules), open(sys.argv[1], 'w'))\n"
    modules = {}
    for forked in (False, True):
        out = tmp_path / f"modules-{forked}.json"
        done = _run(_command(tmp_path, dump, backend, str(out), forked=forked))
        assert done.returncode == 0, done.stderr
        modules[forked] = set(json.loads(out.read_text()))
    assert modules[True] - modules[False] == SERVER_MODULES
    assert modules[False] - modules[True] == set()


def _without_timings(trace: Path) -> tuple[dict[str, Any], list[tuple[Any, ...]], dict[str, Any]]:
    """The trace's header, its records' ops and places, and its footer, without what differs between any
    two runs: when, and how long. (Values are left to `tracediff diff`: a module's weights start as
    torch.empty's uninitialized memory, different in any two processes.)"""
    reader = Trace(trace)
    places = [(r["t"], r.get("op"), r.get("src"), [o.get("sh") for o in r.get("out") or []]) for r in reader]
    header, footer = reader.header, reader.footer
    assert footer is not None, trace
    header.pop("started")
    for key in ("elapsed_s", "ended"):
        footer.pop(key)
    footer.get("judging", {}).pop("spent_s", None)
    return header, places, footer


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_forked_recording_writes_the_trace_a_fresh_child_writes(tmp_path: Path, backend: str) -> None:
    traces = []
    for forked in (False, True):
        trace = tmp_path / f"{forked}.jsonl"
        done = _run([*(shlex.split(os.environ[CHILD_PREFIX_VARIABLE]) if forked else []),
                     *child_command(trace, FIXTURES / "clean_mlp.py", backend, judge=True)], cwd=FIXTURES)
        assert done.returncode == 0, done.stderr
        traces.append(trace)
    assert _without_timings(traces[0]) == _without_timings(traces[1])
    compared = invoke("diff", *map(str, traces), "--format", "json")
    assert compared.exit_code == 0 and compared.report["verdict"] == "match", compared.stdout


@pytest.mark.parametrize(("script", "expected"), [
    ("print('done')", 0),
    ("raise ValueError('wrong')", 3),
    ("import sys\nsys.exit(2)", 3),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL),
])
def test_the_client_exits_as_a_fresh_child_does(tmp_path: Path, script: str, expected: int) -> None:
    codes = [_run(_command(tmp_path, script, "eager", forked=forked)).returncode for forked in (False, True)]
    assert codes == [expected, expected]


LOOP = """
import os, subprocess, sys, time
import torch
sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print("running", os.getpid(), sleeper.pid, flush=True)
while True:
    torch.ones(3).sum()
    time.sleep(0.01)
"""


@contextlib.contextmanager
def _looping_recording(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    """A client whose forked recording loops until stopped: (the client, the recording's pid and its child's).
    Whatever the test leaves running is killed at the end, a failed test's too."""
    client = subprocess.Popen(_command(tmp_path, LOOP, "eager"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True, preexec_fn=ctrl_c_as_from_a_terminal)
    groups = [client.pid]
    try:
        assert client.stdout is not None
        started = next((line.split() for line in client.stdout if line.startswith("running")), None)
        assert started is not None, f"the script never ran: {client.communicate()}"
        recording, sleeper = int(started[1]), int(started[2])
        groups.append(recording)
        yield client, recording, sleeper
    finally:
        for group in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        client.kill()
        client.communicate()


def _gone(pid: int, within_s: float = 30.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text():
                return True  # a zombie: killed, not yet reaped by its parent
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def _where(pid: int) -> str:
    """A process's state and the kernel function it waits in, from /proc (for a failure's message)."""
    try:
        state = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("State"))
        return f"{state.split(':', 1)[1].strip()}, waiting in {Path(f'/proc/{pid}/wchan').read_text() or '-'}"
    except (OSError, StopIteration):
        return "gone"


def test_ctrl_c_reaches_the_recording_which_ends_its_trace(tmp_path: Path) -> None:
    with _looping_recording(tmp_path) as (client, recording, _):
        assert recording != client.pid  # forked, not run by the client itself
        os.killpg(client.pid, signal.SIGINT)  # as the launcher passes Ctrl-C on
        try:
            assert client.wait(timeout=120) == 3
        except subprocess.TimeoutExpired:  # seen once in a full suite, not reproduced since: say where each stood
            pytest.fail(f"no exit 120 s after Ctrl-C; client: {_where(client.pid)}; recording: {_where(recording)}")
        assert client.stderr is not None and "the script was interrupted" in client.stderr.read()
    trace = Trace(tmp_path / "t-True.jsonl")
    for _ in trace:
        pass
    assert trace.footer is not None and trace.footer["error"]["type"] == "KeyboardInterrupt"


HELD_SIGNAL = """
import os, signal, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
import fork_client
recording = subprocess.Popen([sys.executable, "-c", "import time; print('running', flush=True); time.sleep(120)"],
                             start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
# Running its script, as a recording is: a Ctrl-C during the interpreter's start exits 1, not by the signal.
recording.stdout.readline()
signals = fork_client._SignalsPassedOn()
os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C before the server has said which process it forked
deadline = time.monotonic() + 30
while not signals.held and time.monotonic() < deadline:
    time.sleep(0.01)
print("held", signals.held == [signal.SIGINT], flush=True)
signals.forked(recording.pid)
print("recording", recording.wait(timeout=60))
"""


def test_ctrl_c_before_the_recording_is_known_reaches_it_once_it_is() -> None:
    """The client passes signals on from before it sends its request: a Ctrl-C that comes while the recording
    already runs but before the client learned its pid (a loaded machine) is held and passed on, not lost."""
    done = subprocess.run([sys.executable, "-c", HELD_SIGNAL, str(Path(__file__).parent)], capture_output=True,
                          text=True, timeout=120, preexec_fn=ctrl_c_as_from_a_terminal)
    assert done.stdout.splitlines() == ["held True", f"recording {-signal.SIGINT}"], done.stderr


def test_a_killed_client_takes_its_recording_and_the_recordings_children_with_it(tmp_path: Path) -> None:
    with _looping_recording(tmp_path) as (client, recording, sleeper):
        os.killpg(client.pid, signal.SIGKILL)  # as the launcher stops a run that timed out: its group, the client
        client.wait(timeout=60)
        assert _gone(recording) and _gone(sleeper)


def test_another_environment_runs_the_child_as_given(tmp_path: Path) -> None:
    """torch reads TORCH_* and other variables when imported: a server started without them cannot fork it."""
    command = _command(tmp_path, "import os\nprint('pid', os.getpid())", "eager")
    # Inductor's C++ wrapper code sets _TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR in the test process for good;
    # no import reads it.
    for env, forked in ((None, True), (dict(os.environ, TORCH_SHOW_CPP_STACKTRACES="1"), False),
                        (dict(os.environ, _TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR="1"), True)):
        client = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
        stdout, _ = client.communicate(timeout=300)
        assert client.returncode == 0
        assert (f"pid {client.pid}\n" not in stdout) == forked, stdout


def test_a_fork_compiles_into_the_cache_its_environment_names(tmp_path: Path) -> None:
    """`tracediff fix` and `bisect` give each child a compile cache of its own (fork_server.LAZY_VARIABLES):
    forked, it must compile there, not into the server's cache, or a run would reuse another's kernels."""
    own = tmp_path / "own-cache"
    script = ("import os, torch\nprint('pid', os.getpid())\n"
              "print(torch.compile(lambda x: x.sin() * 3 + 1)(torch.arange(7.0)).sum().item())\n")
    command = _command(tmp_path, script, "inductor")
    client = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(own)))
    stdout, stderr = client.communicate(timeout=300)
    assert client.returncode == 0, stderr[-3000:]
    assert f"pid {client.pid}\n" not in stdout, "not forked"
    assert list(own.rglob("*.py")), f"nothing compiled into {own}: {sorted(own.rglob('*'))[:20]}"


def test_a_command_a_test_starts_is_forked_and_ends_as_the_plain_command_does(tmp_path: Path) -> None:
    """`cli_command`: the client waits for the forked command (it would exec into a refused one at once) and
    exits with its code; stdout and stderr are the command's."""
    script = tmp_path / "s.py"
    script.write_text("import time\ntime.sleep(3)\nprint('slept')\nraise SystemExit(5)\n")
    outcomes = []
    for command in (cli_command("record", str(script), "--backend", "eager", "-o", str(tmp_path / "t.jsonl")),
                    [sys.executable, "-m", "tracediff.cli", "record", str(script), "--backend", "eager", "-o",
                     str(tmp_path / "u.jsonl")]):
        client = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(2)
        running = Path(f"/proc/{client.pid}/cmdline").read_bytes().decode()
        stdout, stderr = client.communicate(timeout=300)
        outcomes.append((client.returncode, stdout, stderr.replace("u.jsonl", "t.jsonl").replace("u.log", "t.log")))
        assert ("fork_client.py" in running) == any("fork_client.py" in part for part in command), running  # the first: forked
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] == 3 and "exited with status 5" in outcomes[0][2], outcomes[0]


def test_a_runs_eager_and_compiled_recordings_come_from_two_servers(tmp_path: Path) -> None:
    """Two forks of one server share its string hash secret and address layout; two fresh processes do not."""
    parents = set()
    for backend in ("eager", "aot_eager"):
        done = _run(_command(tmp_path, "import os\nprint('parent', os.getppid())", backend))
        assert done.returncode == 0, done.stderr
        parents.add(done.stdout.split()[-1])
    assert len(parents) == 2


def test_the_launcher_starts_each_child_under_the_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "s.py"
    script.write_text("import os\nprint('prefixed:', os.environ.get('PREFIXED'))\n")
    monkeypatch.setenv(CHILD_PREFIX_VARIABLE, "env PREFIXED=yes")
    result = invoke("record", str(script), "--backend", "eager", "-o", str(tmp_path / "t.jsonl"))
    assert result.exit_code == 0, result.stderr
    assert "prefixed: yes" in (tmp_path / "t.log").read_text()
