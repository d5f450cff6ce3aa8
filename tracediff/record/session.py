"""One recording: header, recorder, compile redirect and footer, as a context manager.

Used in-process by `tracediff.record(...)` and by the child process that
`tracediff record` / `tracediff run` launch for each backend.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import random
import socket
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from tracediff._version import package_version
from tracediff.record.backends import Backend
from tracediff.record.compile_redirect import CompileRedirect
from tracediff.record.cuda_graphs import CudaGraphGuard
from tracediff.record.customizations import compiler_customizations, no_customizations
from tracediff.record.fingerprints.fingerprint import FINGERPRINT_KINDS, host_fingerprint_path
from tracediff.record.fork import ForkGuard
from tracediff.record.host_waits import HostWaits
from tracediff.record.judging.policy import JudgePolicy
from tracediff.record.kernels import KernelCapture
from tracediff.record.mode import TraceRecorder
from tracediff.record.scope import RecordScope
from tracediff.trace.schema import Footer, Header, ScriptError
from tracediff.trace.writer import TraceWriter


def seed_everything(seed: int) -> None:
    """Same seed for torch, random and numpy, so two runs draw the same numbers."""
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(seed)


def device_description() -> str:
    if torch.cuda.is_available():
        return f"cuda ({torch.cuda.get_device_name(0)})"
    return "cpu"


def numeric_settings(inductor: bool = True, environment: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Settings that change numbers; a header diff of these often explains a divergence. `inductor`: whether
    inductor can run, so its settings matter (None where not: importing its config imports dynamo, about a
    second of each eager recording)."""
    settings: dict[str, Any] = {
        "default_dtype": str(torch.get_default_dtype()),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "num_threads": torch.get_num_threads(),
        "matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "inductor": _inductor_settings() if inductor else None,
        "env": {k: v for k, v in sorted((os.environ if environment is None else environment).items())
                if k.startswith(("TORCH", "CUBLAS", "CUDA_")) and not k.startswith(_LAUNCH_BOOKKEEPING)},
    }
    return settings


def _inductor_settings() -> dict[str, Any]:
    import torch._inductor.config as inductor_config

    return {key: getattr(inductor_config, key, None)
            for key in ("fallback_random", "emulate_precision_casts", "max_autotune", "freezing", "cpp_wrapper")}


# Environment the launcher sets per rank and per launch (torchrun's error file, run id, restart count):
# it differs between any two runs and changes no number.
_LAUNCH_BOOKKEEPING = ("TORCHELASTIC_",)


def fallback_random_setting(backend: Backend | None, requested: bool | None) -> bool:
    """inductor's `fallback_random` for a run: as requested, else on for inductor, which generates its own
    random numbers unless told to call eager's."""
    return bool(backend and backend.is_inductor) if requested is None else requested


class RecordingSession:
    """Records everything the program dispatches between enter and exit into `path`."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        backend: Backend | None = None,
        seed: int | None = 0,
        exact: bool = False,
        fallback_random: bool | None = None,
        command: list[str] | None = None,
        materialized: bool = False,
        script_dir: str | None = None,
        recorder_factory: Callable[[TraceWriter, bool], TraceRecorder] | None = None,
        upcast: str | None = None,
        before_compile: Callable[[Any], bool | None] | None = None,
        judge: JudgePolicy | None = None,
        scope: RecordScope | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        self.path = Path(path)
        # The environment the run was given, for the header: importing inductor sets TORCHINDUCTOR_CACHE_DIR, and
        # only a run that may reach inductor imports it (the child passes what it started with).
        self.environment = dict(os.environ if environment is None else environment)
        self.backend = backend
        self.seed = seed
        self.exact = exact
        self.fallback_random = fallback_random_setting(backend, fallback_random)
        self.command = command if command is not None else list(sys.argv)
        self.materialized = materialized
        self.script_dir = script_dir
        # Which ops are kept: every one, none (the light mode), or one call's window (record/scope.py).
        self.scope = scope or RecordScope()
        # `tracediff repro` swaps in a recorder that also keeps chosen ops' arguments.
        self.recorder_factory = recorder_factory or (
            lambda writer, exact: TraceRecorder(writer, exact=exact, scope=self.scope))
        self.upcast = upcast  # "float64": a noise reference run (record/upcast.py)
        self.before_compile = before_compile  # `tracediff fix`: its changes, made at each torch.compile call
        self.judge = judge  # which compiled calls are judged on their own inputs (record/judging/); None: none
        self.writer: TraceWriter | None = None
        self.recorder: TraceRecorder | None = None
        self.redirect: CompileRedirect | None = None
        self.kernels: KernelCapture | None = None
        self.forks: ForkGuard | None = None
        self._exits = contextlib.ExitStack()
        self._started = 0.0
        self._warnings = warnings.catch_warnings()

    @property
    def _may_run_inductor(self) -> bool:
        """Whether a compile in this run can reach inductor (the script's own backend may be inductor)."""
        return self.backend is None or self.backend.may_run_inductor

    def _header(self) -> Header:
        return {
            "tracediff": package_version(),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "host": socket.gethostname(),
            "device": device_description(),
            "backend": self.backend.name if self.backend else "as-written",
            "command": self.command,
            "cwd": os.getcwd(),
            "seed": self.seed,
            "fingerprint": list(FINGERPRINT_KINDS) + (["hash"] if self.exact else []),
            "host_fingerprints": host_fingerprint_path(),
            "exact": self.exact,
            "materialized": self.materialized,
            "upcast": self.upcast,
            "judged": self.judge is not None,
            "scope": {"kind": self.scope.kind, "window": str(self.scope.window) if self.scope.window else None},
            "settings": numeric_settings(inductor=self._may_run_inductor, environment=self.environment),
            "rank": int(os.environ.get("RANK", 0)),
            "world_size": int(os.environ.get("WORLD_SIZE", 1)),
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }

    def __enter__(self) -> RecordingSession:
        if self.seed is not None:
            seed_everything(self.seed)
        # Entered in order and left in reverse, also when entering fails half-way: the footer last.
        with contextlib.ExitStack() as stack:
            # Importing inductor's config imports dynamo (about a second): not where no compile can reach inductor.
            if self._may_run_inductor:
                import torch._inductor.config as inductor_config

                restore_fallback_random = inductor_config.fallback_random
                inductor_config.fallback_random = self.fallback_random
                stack.callback(setattr, inductor_config, "fallback_random", restore_fallback_random)
            self.writer = TraceWriter(self.path, self._header())
            self.recorder = self.recorder_factory(self.writer, self.exact)
            self.redirect = CompileRedirect(self.backend, self.recorder, before_compile=self.before_compile,
                                            judge=self.judge)
            # Importing inductor's compiler costs a second or more per recording: not where no compile can reach
            # it (the compile redirect gives every torch.compile this backend).
            # Nor where no op is recorded (the light mode): a kernel's launch is one.
            self.kernels = KernelCapture(self.recorder) if self.scope.records_ops and self._may_run_inductor else None
            self.forks = ForkGuard(self.recorder, self.writer)
            stack.push(self._close_with_footer)
            stack.enter_context(self.forks)  # left before the footer: it counts the children
            stack.callback(self.recorder.finish)  # records held for device fingerprints, also when the script raised
            stack.enter_context(HostWaits(self.recorder.before_host_wait))  # left before `finish`
            if self.kernels is not None:
                stack.enter_context(self.kernels)
            stack.enter_context(CudaGraphGuard(self.recorder, trees=self._may_run_inductor))
            stack.enter_context(self._warnings)
            # Our module tracker's global hooks make torch warn about compiled modules;
            # compile_redirect handles OptimizedModule itself, so the warning is noise.
            warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are global hooks")
            stack.enter_context(self.redirect)
            stack.enter_context(self.recorder)
            self._exits = stack.pop_all()
        self._started = time.perf_counter()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._exits.__exit__(exc_type, exc, tb)

    def _close_with_footer(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                           tb: TracebackType | None) -> None:
        assert self.writer is not None
        self.writer.close(self.footer(exc))

    def footer(self, exc: BaseException | None) -> Footer:
        assert self.recorder and self.redirect and self.forks
        error: ScriptError | None = None
        if exc is not None and not _is_clean_exit(exc):
            error = {
                "type": type(exc).__name__,
                "message": str(exc).strip().splitlines()[0][:500] if str(exc).strip() else "",
                "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:],
            }
        return {
            "ops": self.recorder.ops,
            "kernels": self.recorder.kernels,
            "compile_calls": self.redirect.compile_calls,
            "dropped_compile_options": self.redirect.dropped_options,
            "elapsed_s": round(time.perf_counter() - self._started, 3),
            "ended": round(time.time(), 3),  # wall clock: which rank of a distributed run failed first
            # Forked children that ran ops: their ops are not in this trace (record/fork.py).
            "child_processes": self.forks.children,
            "error": error,
            "local_modules": local_modules(self.script_dir) if self.script_dir else [],
            # Read only where the script compiled: the tables hold thousands of entries (about 2 ms).
            "compiler_customizations": compiler_customizations() if self.redirect.compile_calls else no_customizations(),
            # Ops tracediff failed to record, its own error (the program went on): how many, and the first.
            **({"recorder_failures": {"count": self.recorder.failures, "first": self.recorder.first_failure}}
               if self.recorder.failures else {}),
            # Calls judged on their own inputs, of those made (the light mode judges within a time budget).
            **({"judging": self.judge.summary()} if self.judge is not None else {}),
            # One rank of several: the process group's backend (gloo, nccl), known once the script made one.
            **({"process_group": self.recorder.process_group} if self.recorder.process_group else {}),
        }


def local_modules(script_dir: str) -> list[dict[str, str]]:
    """Modules the script imported from its own folder, in import order.

    `tracediff repro` copies them next to the repro and imports them first:
    a script's own module may change the compiler when imported (a custom
    backend, a registered decomposition or graph pass).
    """
    root = Path(script_dir).resolve()
    inside = str(root).rstrip(os.sep) + os.sep
    # Resolved a folder at a time: a file at a time (Path.resolve, an lstat per component) took 0.3-0.6 s of
    # every recording's exit with torch's ~1,000-2,000 modules loaded.
    real_folders: dict[str, str] = {}
    found = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if name == "__main__" or not file or not file.endswith(".py"):
            continue
        folder, base = os.path.split(os.path.abspath(file))
        if folder not in real_folders:
            real_folders[folder] = os.path.realpath(folder)
        real = os.path.join(real_folders[folder], base)
        if os.path.islink(real):
            real = os.path.realpath(real)
        if not real.startswith(inside):
            continue
        path = Path(real)
        if {"site-packages", "dist-packages"} & set(path.parts):
            continue
        found.append({"name": name, "file": str(path.relative_to(root))})
    return found


def _is_clean_exit(exc: BaseException) -> bool:
    return isinstance(exc, SystemExit) and exc.code in (None, 0)
