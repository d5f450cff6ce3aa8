"""Applying `tracediff fix`'s printed patch to a copy of a fixture, as a user would paste it."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import FIXTURES


def patched_copy(fixture: str, patch: list[str], where: Path, companions: tuple[str, ...] = ()) -> Path:
    """A copy of `fixture` in `where` (with its `companions`, the modules it imports) with the `patch`
    lines pasted before its first `torch.compile(` line under `if __name__ == "__main__":`."""
    lines = (FIXTURES / fixture).read_text().splitlines()
    main = next(i for i, line in enumerate(lines) if line.startswith("if __name__"))
    at = next(i for i in range(main, len(lines)) if "torch.compile(" in lines[i])
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    lines[at:at] = [indent + line for line in patch]
    for name in companions:
        shutil.copy(FIXTURES / name, where / name)
    target = where / fixture
    target.write_text("\n".join(lines) + "\n")
    return target
