"""Recording raises few audit events per op (record/identity.py): where a Python audit hook is installed (filelock
installs one on Python 3.12 and later; Hugging Face, Triton and inductor import filelock), each event is a Python
call."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tracediff.record.identity import identity

_COUNT_EVENTS = """
import collections, sys, torch, tracediff
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
x = torch.randn(8, 16)
counting = [False]
events = collections.Counter()
def count(event, args):
    if counting[0]:
        events[event] += 1
sys.addaudithook(count)
def counted():
    events.clear()
    counting[0] = True
    model(x)
    counting[0] = False
    return dict(events)
plain = counted()
with tracediff.record(sys.argv[1]) as session:
    model(x)
    before = session.recorder.ops
    recorded = counted()
    ops = session.recorder.ops - before
print(repr((plain, recorded, ops)))
"""


def test_identity_names_a_live_object_as_id_does() -> None:
    a, b = object(), [1]
    assert identity(a) == identity(a) and identity(a) != identity(b)
    assert object.__hash__(b) != object.__hash__(a)  # an unhashable list has an identity all the same


def test_a_recorded_op_raises_at_most_two_audit_events_and_no_id(tmp_path: Path) -> None:
    """Before, the recorder's `id()` calls and frame walk raised about seventeen events per op: now the frame and
    its code, and from Python 3.12 no `id()` (record/identity.py). A fresh interpreter: the hook stays installed
    for the process's life."""
    script = tmp_path / "count_events.py"  # a file: the walk for the user's line stops at its frames
    script.write_text(_COUNT_EVENTS)
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "t.jsonl")], capture_output=True,
                            text=True, timeout=300, cwd=Path(__file__).resolve().parent.parent)
    assert result.returncode == 0, result.stderr[-2000:]
    plain, recorded, ops = ast.literal_eval(result.stdout.strip().splitlines()[-1])
    assert ops >= 4
    if identity is not id:  # Python 3.12 and later (record/identity.py)
        assert recorded.get("builtins.id", 0) == plain.get("builtins.id", 0)
    recorded.pop("builtins.id", None)
    plain.pop("builtins.id", None)
    added = sum(recorded.values()) - sum(plain.values())
    assert added <= 2 * ops, (recorded, plain, ops)  # the frame, and the code of the line recorded
