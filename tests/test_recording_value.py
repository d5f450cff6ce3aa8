"""launch/recording.py: the child's settings travel as one serialized value."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tracediff.launch.recording import Recording


def test_a_recording_comes_back_as_it_went() -> None:
    recording = Recording("inductor", seed=None, exact=True, fallback_random=False, timeout=12.5, materialize=True,
                          capture=(3, 7), capture_out=Path("/tmp/args.pt"), nproc=2, fix='{"changes": []}',
                          time_out=Path("/tmp/times.json"), judge=True, window="Net.forward@57")
    assert Recording.from_json(recording.to_json()) == recording
    assert Recording.from_json(Recording(None).to_json()) == Recording(None)


@pytest.mark.parametrize("text", ['["inductor"]', '{"backend": "eager", "colour": "red"}', '{"seed": 1}'])
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        Recording.from_json(text)


def test_the_child_answers_an_unreadable_recording_in_one_line(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text("print('ran')\n")
    done = subprocess.run([sys.executable, "-m", "tracediff.child", "--out", str(tmp_path / "t.jsonl"),
                           "--recording", '{"backend": "eager", "colour": "red"}', str(script)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "ran" not in done.stdout
    assert done.stderr.strip().splitlines() == ["tracediff: an unreadable --recording (unknown fields ['colour'])"]
