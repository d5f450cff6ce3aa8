"""A fork server for the test suite's recording children (and the commands tests start): torch is imported once.

    python tests/fork_server.py SOCKET torch|inductor      (tests/recording_forks.py starts three per worker)

A recording child spends ~1.3 s of CPU importing torch and tracediff's recorder before its script starts,
~3.4 s where it imports inductor too, and the suite starts ~550 of them. This process imports what such a
child imports before its script ("torch": what every child imports; "inductor": also inductor's compile_fx,
which a child recording inductor or the script as written imports for record/kernels.py's hooks) and then
forks one process per request of tests/fork_client.py. The fork becomes what `python -m
tracediff.child ARGS` (or `tracediff.cli`: a command a test starts) in the client's place would have been:
the client's stdin, stdout and stderr, working directory, environment, arguments, sys.path[0] and Ctrl-C
disposition, a session of its own, the random generators of Python and numpy reseeded from the OS, and the
module run as __main__ (runpy, as -m does); it exits through the interpreter's normal exit (atexit handlers,
buffers flushed).
What a fork shares with the server's other forks: the string hash secret and the address layout.

What a fork could not reproduce is refused (the client then runs the child itself):
- an environment other than this server's (PER_RUN_VARIABLES and LAZY_VARIABLES aside): torch and
  inductor read variables when imported;
- another interpreter than this one, or another module.
The server itself checks, before it serves at all, that the imports wrote nothing to stdout or stderr (a
warning a child prints at import must stay in its log) and changed no environment variable, and before each
fork that CUDA is not initialised and no other Python thread runs. (numpy's OpenBLAS starts a thread when
torch imports numpy; OpenBLAS re-creates it after a fork, as in every DataLoader worker forked after
`import torch`.) The server exits when its stdin closes: when the pytest process that started it ends.
"""

from __future__ import annotations

import gc
import importlib
import os
import random
import runpy
import selectors
import signal
import socket
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

from fork_client import receive_message, send_message  # beside this file, which runs as a script

# What a recording child imports before its script, as tracediff/child.py does (tests/test_recording_
# forks.py checks that a fork's modules at the script's start are a fresh child's).
TORCH_IMPORTS = ("tracediff.errors", "tracediff.launch.recording", "tracediff.outputs", "tracediff.quiet",
                 "tracediff.record.backends", "tracediff.record.session")
INDUCTOR_IMPORTS = (*TORCH_IMPORTS, "torch._inductor.compile_fx")
IMPORTS = {"torch": TORCH_IMPORTS, "inductor": INDUCTOR_IMPORTS}
# What a fork may become: a recording child, or a `tracediff` command a test started (it imports torch too).
MODULES = ("tracediff.child", "tracediff.cli")
# Variables read at no import, which differ between the server and its clients: pytest sets the first for each
# test; GNU readline, once pytest has imported it, exports the terminal's size into the C environment (not
# os.environ), which the processes a test starts without an explicit environment inherit; inductor's C++ wrapper
# code, compiled in a test's own process, sets the last there for good (a pointer its loaded module reads).
PER_RUN_VARIABLES = ("PYTEST_CURRENT_TEST", "COLUMNS", "LINES", "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR")
# Variables torch reads each time it uses them, never at import, which `tracediff fix` and `bisect` set for their
# children: a compile cache of their own (runtime/cache_dir_utils.py reads it per call) and the compiler
# bisector's state (compiler_bisector.py's get_env_val). Their children were refused, and imported torch and
# inductor again, ~60 times a session; tests/test_recording_forks.py checks a fork compiles into its own cache.
LAZY_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCH_BISECT_BACKEND", "TORCH_BISECT_SUBSYSTEM",
                  "TORCH_BISECT_MAX")
REAP_INTERVAL_S = 0.05


@dataclass
class Request:
    """A recording to fork: the child's arguments, where and how it runs, and the client's descriptors."""

    module: str  # run as __main__, as `python -m MODULE` would
    args: list[str]
    cwd: str
    env: dict[str, str]
    ignores_ctrl_c: bool
    fds: list[int]


def _comparable(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in PER_RUN_VARIABLES and k not in LAZY_VARIABLES}


def _import_quietly(modules: tuple[str, ...]) -> None:
    """Import `modules` as a child would; exit if that printed anything or changed the environment."""
    from tracediff.quiet import silence_missing_numpy

    silence_missing_numpy()  # as child.py does before torch is imported
    before = dict(os.environ)
    with tempfile.TemporaryFile() as captured:
        saved = [os.dup(1), os.dup(2)]
        os.dup2(captured.fileno(), 1)
        os.dup2(captured.fileno(), 2)
        try:
            for module in modules:
                importlib.import_module(module)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
        captured.seek(0)
        printed = captured.read()
    changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
    if printed or changed:
        sys.exit(f"fork server: importing printed {printed[:500]!r}, set {changed}: not serving")


def _check_forkable() -> None:
    import torch

    assert not torch.cuda.is_initialized(), "CUDA initialised before a fork"
    assert threading.active_count() == 1, f"threads before a fork: {threading.enumerate()}"


def _refusal(request: dict[str, Any] | None, fds: list[int], env: dict[str, str]) -> str | None:
    if request is None or len(fds) != 3:
        return "no request"
    if request.get("module") not in MODULES:
        return f"another module ({request.get('module')})"
    if request.get("executable") != sys.executable:
        return f"another interpreter ({request.get('executable')})"
    theirs = _comparable(request["env"])
    if theirs != env:
        differing = sorted(k for k in set(theirs) | set(env) if theirs.get(k) != env.get(k))
        return f"another environment ({', '.join(f'{k}: {env.get(k)!r} -> {theirs.get(k)!r}' for k in differing)})"
    return None


def _send(conn: socket.socket, message: dict[str, Any]) -> bool:
    """False where the client is gone."""
    try:
        send_message(conn, message)
    except OSError:
        return False
    return True


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class _Server:
    """Accepts clients, forks their recordings, reports each one's wait status, kills the orphaned."""

    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.env = _comparable(dict(os.environ))
        self.selector = selectors.DefaultSelector()
        self.clients: dict[int, socket.socket] = {}  # recording pid -> its client's connection
        self.forked = 0
        self.refused = 0

    def serve(self) -> Request:
        """Serve until stdin closes (then exit); returns only in a forked child, with its request."""
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.selector.register(sys.stdin, selectors.EVENT_READ, "stdin")
        while True:
            for key, _ in self.selector.select(REAP_INTERVAL_S):
                if key.data == "accept":
                    request = self._accept()
                    if request is not None:
                        return request
                elif key.data == "stdin":
                    if not os.read(sys.stdin.fileno(), 4096):
                        self._stop()
                else:
                    self._client_gone(key.data)
            self._reap()

    def _accept(self) -> Request | None:
        conn, _ = self.listener.accept()
        message, fds = receive_message(conn, max_fds=3)
        refusal = _refusal(message, fds, self.env)
        if refusal is not None or message is None:
            self.refused += 1
            print(f"fork server: refused, {refusal}: {message and message.get('args')}", file=sys.stderr, flush=True)
            for fd in fds:
                os.close(fd)
            _send(conn, {"refused": refusal})
            conn.close()
            return None
        request = Request(message["module"], message["args"], message["cwd"], message["env"], message["ignores_ctrl_c"],
                          fds)
        _check_forkable()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._leave(conn)
            return request
        self.forked += 1
        for fd in fds:
            os.close(fd)
        if not _send(conn, {"pid": pid}):  # the client died meanwhile: so does its recording
            _kill_group(pid)
            conn.close()
            return None
        self.clients[pid] = conn
        self.selector.register(conn, selectors.EVENT_READ, pid)
        return None

    def _leave(self, conn: socket.socket) -> None:
        """In the fork: let go of everything that is the server's."""
        self.selector.close()
        for client in (*self.clients.values(), conn, self.listener):
            client.close()

    def _client_gone(self, pid: int) -> None:
        """The client's connection closed before its recording ended (the client was killed): kill the group."""
        conn = self.clients.pop(pid)
        self.selector.unregister(conn)
        conn.close()
        _kill_group(pid)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.clients.pop(pid, None)
            if conn is not None:
                self.selector.unregister(conn)
                _send(conn, {"status": status})
                conn.close()

    def _stop(self) -> None:
        print(f"fork server: forked {self.forked} recordings, refused {self.refused}", file=sys.stderr, flush=True)
        for pid in self.clients:
            _kill_group(pid)
        sys.exit(0)


def _reseed_random_generators() -> None:
    """A fresh process seeds them from the OS; forks would share the server's sequences."""
    random.seed()
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()


def _become_the_child(request: Request) -> None:
    """In the fork: what `python -m MODULE ARGS` in the client's place would be at its start."""
    os.setsid()  # the launcher starts each child in a session of its own
    for target, fd in enumerate(request.fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    signal.signal(signal.SIGINT, signal.SIG_IGN if request.ignores_ctrl_c else signal.default_int_handler)
    sys.argv = ["-m", *request.args]  # runpy puts the module's path first, as -m does
    sys.orig_argv = [sys.executable, "-m", request.module, *request.args]
    sys.path[0] = request.cwd  # -m puts the working directory first
    _reseed_random_generators()
    runpy.run_module(request.module, run_name="__main__", alter_sys=True)


def main(argv: list[str]) -> None:
    path, imports = argv
    _import_quietly(IMPORTS[imports])
    # Python's own advice for a process that forks without exec: the garbage collector then never walks the
    # imported objects again, neither in the forks' collections (which wrote into the shared pages, copying
    # them) nor in each fork's exit, where it took ~0.8 s of CPU with inductor imported.
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(f"{path}.binding")  # in a folder only this user can enter
    listener.listen(16)
    os.rename(f"{path}.binding", path)  # where clients look, once it listens
    request = _Server(listener).serve()
    _become_the_child(request)


if __name__ == "__main__":
    main(sys.argv[1:])
    sys.exit(0)
