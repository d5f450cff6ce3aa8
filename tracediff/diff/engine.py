"""Diff two trace files: skeletons, alignment, verdict, header differences."""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import multiprocessing
import re
import tempfile
import time
from array import array
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

from tracediff.config import Config
from tracediff.diff.align import align_in_windows
from tracediff.diff.noise import measure_noise
from tracediff.diff.sample import AlignmentSample
from tracediff.diff.second_process import can_fork_a_helper
from tracediff.diff.shortcut import diff_by_shortcut
from tracediff.diff.skeleton import Skeleton, build_skeleton
from tracediff.diff.verdict import DiffResult, find_divergence
from tracediff.trace.compression import estimated_text_bytes
from tracediff.trace.schema import Header

# Header fields that differ between any two runs and explain nothing.
_HEADER_NOISE = ("started", "t", "judged", "scope")


# Below this size (of JSON lines: a compressed trace's is estimated) a second process costs more than it saves.
_PARALLEL_BYTES = 64 * 2**20
# From this size of the larger trace (about 300,000 records) a diff takes a minute or more: it reports its progress.
PROGRESS_BYTES = 256 * 2**20
# From this size of the larger trace the diff looks for stretches both traces hold alike (shortcut.py): a
# diff this long takes ten seconds or more, and reading the digest indexes a fraction of a second.
SHORTCUT_BYTES = 64 * 2**20

Progress = Callable[[str], None]


def build_skeletons(path_a: str | Path, path_b: str | Path, spill: Path | None = None) -> tuple[Skeleton, Skeleton]:
    """Pass 1 over both files; two large files are read in two processes at once. With `spill`, a folder:
    the keys of long traces go to files there (skeleton.py)."""
    spill_a, spill_b = (spill / "a", spill / "b") if spill is not None else (None, None)
    sizes = [_text_bytes(p) for p in (path_a, path_b)]
    if min(sizes) < _PARALLEL_BYTES or not can_fork_a_helper():
        return build_skeleton(path_a, spill_a), build_skeleton(path_b, spill_b)
    # Forked, not spawned: the keys hash strings, and a fresh interpreter hashes them with another secret.
    fork = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=fork) as pool:
        future_b = pool.submit(build_skeleton, path_b, spill_b)
        a = build_skeleton(path_a, spill_a)
        return a, future_b.result()


def diff_traces(path_a: str | Path, path_b: str | Path, config: Config, *,
                sample: AlignmentSample | None = None, noise_trace: str | Path | None = None,
                progress: Progress | None = None) -> DiffResult:
    """Align trace B to reference trace A and find the first divergence.

    `sample`, if given, collects a bounded view of the alignment for the HTML report.
    noise_trace: a float64 re-run of A (`record --float64`); differences are
    then judged against each tensor's measured noise too (diff/noise.py).
    progress: told a line at each stage of a long diff (traces of PROGRESS_BYTES or more), and as the walk goes.
    """
    largest = max(_text_bytes(path_a), _text_bytes(path_b))
    if progress is not None and largest < PROGRESS_BYTES:
        progress = None
    with _no_cycle_collection():
        if sample is None and noise_trace is None and not config.ignores_any and largest >= SHORTCUT_BYTES:
            def diff_kept(kept_a: Path, kept_b: Path, op_lines_a: set[int]) -> DiffResult:
                return _diff_files(kept_a, kept_b, config, progress=progress, op_lines_a=op_lines_a)

            result = diff_by_shortcut(Path(path_a), Path(path_b), diff_kept, progress)
            if result is not None:
                return result
        return _diff_files(path_a, path_b, config, sample=sample, noise_trace=noise_trace, progress=progress)


def _diff_files(path_a: str | Path, path_b: str | Path, config: Config, *, sample: AlignmentSample | None = None,
                noise_trace: str | Path | None = None, progress: Progress | None = None,
                op_lines_a: AbstractSet[int] = frozenset()) -> DiffResult:
    """The diff of two whole files. `op_lines_a`: ops A computes by line in records not in its file (shortcut.py)."""
    a, b, partner, tier = aligned_skeletons(path_a, path_b, progress)
    a.release_keys()
    b.release_keys()
    a.op_lines |= op_lines_a
    noise = measure_noise(path_a, noise_trace, config.noise_factor) if noise_trace is not None else None
    return find_divergence(a, b, partner, tier, config, sample=sample, noise=noise, progress=progress)


def aligned_skeletons(path_a: str | Path, path_b: str | Path, progress: Progress | None = None
                      ) -> tuple[Skeleton, Skeleton, array, bytearray]:
    """Pass 1 of both traces and B aligned to A (`partner`, `tier`: align.py). The keys of long traces are
    spilled to a temporary folder, deleted once they are aligned."""
    started = time.monotonic()
    with _no_cycle_collection(), tempfile.TemporaryDirectory(prefix="tracediff-keys-") as spill:
        if progress is not None:
            progress("diff: reading both traces (pass 1 of 2: keys for the alignment)")
        a, b = build_skeletons(path_a, path_b, Path(spill))
        if progress is not None:
            progress(f"diff: {len(a):,} and {len(b):,} records to align ({time.monotonic() - started:.0f} s); aligning")
        partner, tier = align_in_windows(a, b)
    if progress is not None:
        paired = sum(1 for j in partner if j >= 0)
        progress(f"diff: {paired:,} records paired ({time.monotonic() - started:.0f} s); "
                 "comparing them (pass 2 of 2)")
    return a, b, partner, tier


def _text_bytes(path: str | Path) -> int:
    return estimated_text_bytes(path) if Path(path).is_file() else 0


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """A diff makes millions of objects that live long (keys, producer tables) and next to no reference
    cycles: the cycle collector walked the growing tables again and again, a fifth of a diff's CPU (200k
    records: 18.8 s with it, 15.4 s without, the same peak memory and ~1,500 cyclic objects left), so it
    pauses for the diff. Memory is freed by reference counting as ever."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def header_differences(a: Header, b: Header) -> list[str]:
    """Human-readable differences between two headers (deepdiff), e.g. `torch: 2.12 -> 2.13`."""
    from deepdiff import DeepDiff

    compared_a = {k: v for k, v in a.items() if k not in _HEADER_NOISE}
    compared_b = {k: v for k, v in b.items() if k not in _HEADER_NOISE}
    if _inductor_settings(compared_a) is None or _inductor_settings(compared_b) is None:  # could not reach inductor
        compared_a, compared_b = _without_inductor_settings(compared_a), _without_inductor_settings(compared_b)
    diff = DeepDiff(compared_a, compared_b, verbose_level=2)
    lines: list[str] = []
    for path, change in diff.get("values_changed", {}).items():
        lines.append(f"{_path(path)}: {change['old_value']!r} -> {change['new_value']!r}")
    for path, change in diff.get("type_changes", {}).items():
        lines.append(f"{_path(path)}: {change['old_value']!r} -> {change['new_value']!r}")
    for path, value in diff.get("dictionary_item_added", {}).items():
        lines.append(f"{_path(path)}: only in B ({value!r})")
    for path, value in diff.get("dictionary_item_removed", {}).items():
        lines.append(f"{_path(path)}: only in A ({value!r})")
    for kind in ("iterable_item_added", "iterable_item_removed"):
        for path, value in diff.get(kind, {}).items():
            lines.append(f"{_path(path)}: {'added' if kind.endswith('added') else 'removed'} {value!r}")
    return sorted(lines)


def _inductor_settings(header: dict[str, object]) -> Any:
    """The run's inductor settings; None where it could not reach inductor (an eager recording)."""
    settings = header.get("settings")
    return settings.get("inductor") if isinstance(settings, dict) else None


def _without_inductor_settings(header: dict[str, object]) -> dict[str, object]:
    """Inductor's settings are compared only where both runs could reach inductor."""
    settings = header.get("settings")
    if not isinstance(settings, dict):
        return header
    return {**header, "settings": {k: v for k, v in settings.items() if k != "inductor"}}


# One step of a deepdiff path: ['key'], ["key"] or [index].
_STEP = re.compile(r"""\['((?:[^'\\]|\\.)*)'\]|\["((?:[^"\\]|\\.)*)"\]|\[(\d+)\]""")


def _path(deepdiff_path: str) -> str:
    """root['settings']['inductor']['fallback_random'] -> settings.inductor.fallback_random;
    root['command'][0] -> command[0]"""
    out = ""
    for single, double, index in _STEP.findall(deepdiff_path.removeprefix("root")):
        out += f"[{index}]" if index else f".{single or double}"
    return out.removeprefix(".") or deepdiff_path


def program_differences(a: Header, b: Header) -> list[str]:
    """How the programs behind two trace headers differ: script, then its arguments.

    Empty for two runs of one command. A different working directory alone is
    not listed (a golden trace recorded on another machine); header differences show it.
    """
    cmd_a, cmd_b = a.get("command") or [], b.get("command") or []
    if not cmd_a or not cmd_b:
        return []
    script_a, script_b = str(cmd_a[0]), str(cmd_b[0])
    if Path(script_a).name != Path(script_b).name:
        return [f"different scripts: A ran {script_a}, B ran {script_b}"]
    if cmd_a[1:] != cmd_b[1:]:
        return [f"the script's arguments differ: A {' '.join(map(str, cmd_a[1:])) or '(none)'}, "
                f"B {' '.join(map(str, cmd_b[1:])) or '(none)'}"]
    return []
