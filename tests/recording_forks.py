"""Recording children forked from servers that imported torch once (tests/fork_server.py), for one session.

A recording child's imports are about half of its CPU in this suite (torch, and inductor where it records
inductor). `forked_recordings(logs)` starts the fork servers of one pytest process and sets
TRACEDIFF_CHILD_PREFIX, so that every run of the session (`invoke`d in-process, or a `python -m
tracediff.cli` a test starts: it inherits the variable) starts its children through tests/fork_client.py.
Tests of how the launcher itself starts, stops and kills its children take the plain path: the
`fresh_children` marker (conftest.py) unsets the variable for them. TRACEDIFF_TEST_FORKS=0 turns the
servers off for a whole session, as a machine with an NVIDIA GPU does; tests/test_recording_forks.py checks that a
fork is what a fresh child is.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.fork_client import socket_path
from tracediff.launch.launcher import CHILD_PREFIX_VARIABLE

HERE = Path(__file__).resolve().parent
# Each server, and the imports it has done (tests/fork_client.py's server_for says which serves what).
SERVERS = {"eager": "torch", "compiled": "torch", "inductor": "inductor"}
STOP_TIMEOUT_S = 60


def wanted() -> bool:
    return os.environ.get("TRACEDIFF_TEST_FORKS", "1") != "0" and not _has_an_nvidia_gpu()


def _has_an_nvidia_gpu() -> bool:
    """An NVIDIA GPU here (its device files, looked for without touching CUDA): the servers' imports reach the CUDA
    driver there, and a fork of them cannot use the GPU ("Cannot re-initialize CUDA in forked subprocess").
    The forks save CPU time on CI's machine, which has none."""
    return any(Path("/dev").glob("nvidia[0-9]*"))


def _start(sockets: str, name: str, logs: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(logs / f"fork-server-{name}.log", "w") as log:
        return subprocess.Popen([sys.executable, str(HERE / "fork_server.py"), socket_path(sockets, name),
                                 SERVERS[name]], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log, env=env,
                                start_new_session=True)  # out of reach of a signal a test sends its own group


def wait_until_listening(sockets: str, timeout_s: float = 300) -> None:
    """Until every server listens (tests of the servers themselves need them; others just run slower)."""
    deadline = time.monotonic() + timeout_s
    while not all(os.path.exists(socket_path(sockets, name)) for name in SERVERS):
        assert time.monotonic() < deadline, f"the fork servers do not listen: see their logs ({sorted(SERVERS)})"
        time.sleep(0.2)


def _stop(server: subprocess.Popen[bytes]) -> None:
    assert server.stdin is not None
    server.stdin.close()  # the server exits when its stdin closes
    try:
        server.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


@contextlib.contextmanager
def forked_recordings(logs: Path) -> Iterator[str]:
    """While active, this process's runs start their children through the fork servers; their logs (each
    refusal, with why, and the counts) go to `logs`. The servers import in the background: until one
    listens, its clients run their child themselves. Yields the folder of the servers' sockets."""
    sockets = tempfile.mkdtemp(prefix="tracediff-forks-")  # short (a socket's path has 107 bytes), private
    previous = os.environ.get(CHILD_PREFIX_VARIABLE)
    os.environ[CHILD_PREFIX_VARIABLE] = shlex.join([sys.executable, "-I", "-S", str(HERE / "fork_client.py"),
                                                    sockets, "--"])
    env = dict(os.environ, PYTHONUNBUFFERED="1")  # the launcher's children have it: so must the servers
    servers = [_start(sockets, name, logs, env) for name in SERVERS]
    try:
        yield sockets
    finally:
        if previous is None:
            os.environ.pop(CHILD_PREFIX_VARIABLE, None)
        else:
            os.environ[CHILD_PREFIX_VARIABLE] = previous
        for server in servers:
            _stop(server)
        shutil.rmtree(sockets, ignore_errors=True)


def cli_command(*args: str) -> list[str]:
    """`python -m tracediff.cli ARGS`, forked from a server where this session has them (the command's own
    import of torch is ~1.3 s of CPU, and the suite starts about 70): for tests that run a command to its end.
    Tests of how a command is stopped or killed start it plainly."""
    command = [sys.executable, "-m", "tracediff.cli", *args]
    prefix = os.environ.get(CHILD_PREFIX_VARIABLE)
    return [*shlex.split(prefix), *command] if prefix and wanted() else command
