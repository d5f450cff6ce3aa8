"""bench/localize/rejudge.py: a localization run judged again from its saved traces."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.synth import TraceBuilder
from tests.test_verdict import _chain
from tracediff.config import Config
from tracediff.launch.recording import Recording

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "localize"))
from rejudge import rejudge_file, saved_recordings  # noqa: E402
from run import score  # noqa: E402


def _saved_run(tmp_path: Path, stale_outcome: str) -> Path:
    """A run's reference, its fused trace (cos computed as sin, line m.py:12) and a result line scored
    `stale_outcome` by older code."""
    run_dir = tmp_path / "cnn" / "inductor" / "g0n1"
    run_dir.mkdir(parents=True)
    reference = TraceBuilder(tmp_path / "cnn" / "a-eager.jsonl")
    _chain(reference)
    fused = TraceBuilder(run_dir / "b-inductor.jsonl", "inductor")
    _chain(fused, wrong_cos=True)
    result = {"model": "cnn", "backend": "inductor", "dir": str(run_dir), "reference": str(reference.close()),
              "plant": "0:1:1.01", "truth": "m.py:12", "verdict": "diverged", "observable": True,
              "reported": {"op": "aten::exp", "source": "m.py:13", "module": None}, "candidates": ["m.py:13"],
              "outcome": stale_outcome}
    fused.close()
    results = tmp_path / "localize-cpu.jsonl"
    results.write_text(json.dumps(result) + "\n")
    return results


def test_a_saved_run_is_scored_with_the_code_checked_out_now(tmp_path: Path) -> None:
    changed: list[str] = []
    [after] = rejudge_file(_saved_run(tmp_path, "wrong"), Config(), score, changed.append)
    assert after["outcome"] == "exact"
    assert after["reported"]["source"] == "m.py:12" and after["candidates"] == ["m.py:12"]
    assert changed and "wrong -> exact" in changed[0]


def test_a_recording_the_run_did_not_make_fails_with_its_reason(tmp_path: Path) -> None:
    record = saved_recordings(tmp_path)
    missing = record(Path("target.py"), [], Recording("inductor"), tmp_path / "c-inductor-unfused.jsonl")
    assert missing.failure() is not None and "was not recorded" in missing.failure()
    (tmp_path / "c-inductor-unfused.jsonl").write_text("{}\n")
    saved = record(Path("target.py"), [], Recording("inductor"), Path("/elsewhere/c-inductor-unfused.jsonl"))
    assert saved.ok and saved.trace == tmp_path / "c-inductor-unfused.jsonl"


def test_a_run_that_failed_before_its_verdict_stays_failed(tmp_path: Path) -> None:
    results = tmp_path / "localize-cpu.jsonl"
    failed = {"model": "cnn", "backend": "inductor", "dir": str(tmp_path), "reference": str(tmp_path / "a.jsonl"),
              "plant": "0:1:1.01", "outcome": "failed", "detail": "ImportError"}
    results.write_text(json.dumps(failed) + "\n")
    [after] = rejudge_file(results, Config(), score, lambda _line: None)
    assert after["outcome"] == "failed" and after["detail"] == "ImportError"
