"""Which global ranks a launch ran on this node, and the trace each wrote, as the ranks themselves say.

A node of a multi-node job knows its ranks only once they have started: c10d's rendezvous numbers the
nodes in its own order (by host name, not by --node-rank), and an output folder shared by the nodes holds
the other nodes' traces too, so neither 0..nproc-1 nor the files found there are this node's ranks. Each
rank torch's launcher starts here writes a note, `local<L>.json` ({"rank", "world_size", "trace"}), into a
folder the launching tracediff made on this host, before its script runs; the launcher reads the notes
once the launch has ended.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RankNote:
    """One rank of a launch: its local and global rank, the job's world size, and the trace it writes."""

    local_rank: int
    rank: int
    world_size: int
    trace: Path


def write_note(directory: Path, trace: Path, environ: dict[str, str] | os._Environ[str] | None = None) -> RankNote:
    """Note this process's rank (torchrun's LOCAL_RANK, RANK, WORLD_SIZE) and its trace in `directory`."""
    env = os.environ if environ is None else environ
    note = RankNote(int(env.get("LOCAL_RANK", "0") or 0), int(env.get("RANK", "0") or 0),
                    int(env.get("WORLD_SIZE", "1") or 1), trace.absolute())
    target = directory / f"local{note.local_rank}.json"
    partial = target.with_suffix(".partial")  # renamed once written: a reader never sees half a note
    partial.write_text(json.dumps({"rank": note.rank, "world_size": note.world_size, "trace": str(note.trace)}),
                       encoding="utf-8")
    os.replace(partial, target)
    return note


def read_notes(directory: Path) -> list[RankNote]:
    """The notes of the ranks that started, by global rank; notes that cannot be read are left out."""
    notes = []
    for path in directory.glob("local*.json"):
        try:
            local = int(path.stem.removeprefix("local"))
            fields = json.loads(path.read_text(encoding="utf-8"))
            notes.append(RankNote(local, int(fields["rank"]), int(fields["world_size"]), Path(fields["trace"])))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(notes, key=lambda note: note.rank)
