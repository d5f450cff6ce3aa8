"""The test suite's stand-in for a recording child: has tests/fork_server.py fork it, or runs it as given.

    python -I -S tests/fork_client.py SERVER_DIR -- python -m tracediff.child --out t.jsonl ...
    python -I -S tests/fork_client.py SERVER_DIR -- python -m tracediff.cli run script.py ...

The launcher runs this in place of the child when TRACEDIFF_CHILD_PREFIX says so (tests/recording_forks.py
sets it). For a recording child, a fork server in SERVER_DIR (torch already imported) forks the recording
with this process's stdin, stdout and stderr, working directory, environment, arguments and Ctrl-C
disposition; this process passes Ctrl-C and SIGTERM on to the recording's process group and exits as the
recording did. Killed, it leaves the recording to the server, which kills its group. Any other command
(torch's launcher for several ranks), a server that refuses (an environment torch would read differently
at import) or none listening (not started yet, or failed): the command runs as given, in this process (exec).

Only the standard library, and no site packages (-S): a wrapper started ~550 times a session must start fast.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from typing import Any

CHILD_MODULE = ["-m", "tracediff.child"]
CLI_MODULE = ["-m", "tracediff.cli"]
MAX_MESSAGE = 1 << 20  # a request holds the environment and the recording's JSON: a few KiB


def server_for(command: list[str]) -> str | None:
    """The server whose forks run this command; None: it is neither a recording child nor a `python -m
    tracediff.cli` a test started (tests/recording_forks.py's `cli_command`), which the "eager" server runs.

    A child recording inductor or the script as written (backend None) imports inductor before its script
    (record/kernels.py hooks it): "inductor" has it imported. The others need torch alone: "eager" for the
    eager reference, "compiled" for the rest, so that a run's two recordings come from two processes (each
    with its own string hashing and address layout, as two fresh processes have)."""
    if command[1:3] == CLI_MODULE:
        return "eager"
    if command[1:3] != CHILD_MODULE or "--per-rank" in command or "--recording" not in command:
        return None
    try:
        backend = json.loads(command[command.index("--recording") + 1]).get("backend")
    except (IndexError, ValueError, AttributeError):
        return None
    if backend in (None, "inductor"):
        return "inductor"
    return "eager" if backend == "eager" else "compiled"


def socket_path(server_dir: str, name: str) -> str:
    return os.path.join(server_dir, f"{name}.sock")


def send_message(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    socket.send_fds(sock, [json.dumps(message).encode()], fds or [])


def receive_message(sock: socket.socket, max_fds: int = 0) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and the descriptors that came with it; (None, []) once the peer has closed the connection."""
    data, fds, _flags, _address = socket.recv_fds(sock, MAX_MESSAGE, max_fds)
    return (json.loads(data) if data else None), fds


class _SignalsPassedOn:
    """Ctrl-C and SIGTERM passed on to the recording's process group, from before it is forked: one that comes
    between the fork and this process learning the recording's pid (the recording may already be running and
    printing) is held and passed on then, not lost."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.recording: int | None = None
        self.held: list[int] = []
        self._before = {signum: signal.signal(signum, self._pass_on) for signum in self.SIGNALS}

    def _pass_on(self, signum: int, _frame: object) -> None:
        if self.recording is None:
            self.held.append(signum)
        else:
            self.send(signum)

    def send(self, signum: int) -> None:
        assert self.recording is not None
        try:
            os.killpg(self.recording, signum)
        except ProcessLookupError:
            pass

    def forked(self, recording: int) -> None:
        self.recording = recording
        for signum in self.held:
            self.send(signum)

    def not_forked(self) -> None:
        """Nothing was forked: the command will run in this process, which meets the signals held as it would
        have without this class."""
        for signum, before in self._before.items():
            signal.signal(signum, before)
        for signum in self.held:
            os.kill(os.getpid(), signum)


def _forked(server: str, command: list[str]) -> int | None:
    """The recording's wait status, forked by `server`; None where it would not fork it (nothing ran)."""
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.connect(server)
    except OSError:
        return None
    request = {"executable": command[0], "module": command[2], "args": command[3:], "cwd": os.getcwd(),
               "env": dict(os.environ),
               # as this process found it: a child started in its place would have found the same
               "ignores_ctrl_c": signal.getsignal(signal.SIGINT) is signal.SIG_IGN}
    signals = _SignalsPassedOn()
    send_message(sock, request, [0, 1, 2])
    reply, _ = receive_message(sock)
    if reply is None or "pid" not in reply:
        signals.not_forked()
        return None
    signals.forked(reply["pid"])
    done, _ = receive_message(sock)
    if done is None:  # the server is gone: no one is left to wait for the recording
        signals.send(signal.SIGKILL)
        print("tracediff tests: the fork server went away during a recording", file=sys.stderr)
        return 70 << 8
    return int(done["status"])


def _exit_as(status: int) -> None:
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # killed by a signal: die of the same one, so the launcher sees what a child's parent sees
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # the two whose handling cannot be changed
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def main(argv: list[str]) -> None:
    server_dir, separator, *command = argv
    assert separator == "--" and command, "usage: fork_client.py SERVER_DIR -- COMMAND..."
    name = server_for(command)
    status = _forked(socket_path(server_dir, name), command) if name else None
    if status is None:
        os.execv(command[0], command)
    _exit_as(status)


if __name__ == "__main__":
    main(sys.argv[1:])
