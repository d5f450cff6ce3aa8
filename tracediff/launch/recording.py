"""`Recording`: how one run of a script is recorded, the one value the parent tells its child.

The launcher (launcher.py) serializes it into the child's command line as one JSON argument; the child
(child.py) reads it back. Adding a setting is adding a field here: no flag to spell out on either side.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracediff.config import Config


@dataclass(frozen=True)
class Recording:
    """How one run of the script is recorded: everything the child process is told, in one value."""

    backend: str | None  # None: torch.compile as the script wrote it
    seed: int | None = 0  # None: leave the generators alone
    exact: bool = False  # also a bitwise hash of every tensor
    fallback_random: bool | None = None  # inductor's; None: on for inductor
    timeout: float = 900.0  # seconds (the parent's: the child is killed past it)
    materialize: bool = False  # one inductor kernel per op (narrowing)
    float64: bool = False  # every floating op upcast (a noise reference)
    capture: tuple[int, ...] = ()  # record indices whose arguments to keep (`tracediff repro`)
    capture_out: Path | None = None  # where the captured arguments go
    nproc: int = 1  # processes launched by torch's elastic launcher (torchrun), each writing its rank's trace
    fix: str | None = None  # `tracediff fix`: the changes to make, as JSON (fix/changes.py's `encode`)
    time_out: Path | None = None  # `tracediff fix`: run unrecorded and write the compiled calls' times here
    judge: bool = False  # judge each compiled call on its own inputs against eager and float64 (record/judging/)
    light: bool = False  # record no op, only compiled calls and checks; judge within a time budget (record/scope.py)
    window: str | None = None  # record (and judge) only inside one compiled call, `Net.forward@57`

    @classmethod
    def of(cls, config: Config, backend: str | None, **changes: Any) -> Recording:
        """The recording `config` asks for (seed, exact, fallback_random, timeout), with `changes`."""
        return cls(backend, config.seed, config.exact, config.fallback_random, config.timeout, **changes)

    def to_json(self) -> str:
        fields = dataclasses.asdict(self)
        return json.dumps({k: str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v
                           for k, v in fields.items()})

    @classmethod
    def from_json(cls, text: str) -> Recording:
        """The value `to_json` wrote; ValueError for anything else (a field unknown or of the wrong kind)."""
        fields = json.loads(text)
        if not isinstance(fields, dict):
            raise ValueError("not a JSON object")
        known = {f.name for f in dataclasses.fields(cls)}
        if unknown := set(fields) - known:
            raise ValueError(f"unknown fields {sorted(unknown)}")
        for name in ("capture_out", "time_out"):
            if fields.get(name) is not None:
                fields[name] = Path(fields[name])
        fields["capture"] = tuple(int(i) for i in fields.get("capture") or ())
        try:
            return cls(**fields)
        except TypeError as e:  # the backend missing
            raise ValueError(str(e)) from None
