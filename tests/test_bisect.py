"""tracediff bisect: CompilerBisector with tracediff's verdict as the oracle."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, invoke
from tracediff.bisect.compiler import private_bisector_state, readable_debug_info


@pytest.fixture(autouse=True)
def private_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bisector state dirs go to a folder of this test's own, so other processes' runs can't be mistaken for ours."""
    own = tmp_path / "tempdir"
    own.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(own))


def _leftovers() -> list[str]:
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    found = [p for p in os.listdir(tempfile.gettempdir()) if p.startswith("tracediff-bisect-")]
    if os.path.exists(os.path.join(cache_dir(), "bisect")):
        found.append(os.path.join(cache_dir(), "bisect"))
    return found


def test_bisector_state_is_private_and_removed_even_on_error() -> None:
    from torch._inductor.compiler_bisector import CompilerBisector

    before = (CompilerBisector.in_process_cache, CompilerBisector.bisection_enabled)
    with pytest.raises(KeyboardInterrupt):
        with private_bisector_state() as state_dir:
            assert CompilerBisector.in_process_cache == state_dir
            Path(state_dir, "bisect").mkdir()
            raise KeyboardInterrupt
    assert not os.path.exists(state_dir)
    assert (CompilerBisector.in_process_cache, CompilerBisector.bisection_enabled) == before


def test_debug_info_is_readable() -> None:
    assert readable_debug_info("<OpOverload(op='aten.cos', overload='default')>") == "aten.cos.default"
    assert readable_debug_info("sin") == "sin"


def test_nothing_to_bisect_exits_0(tmp_path: Path) -> None:
    result = invoke("bisect", str(FIXTURES / "clean_mlp.py"), "--backend", "aot_eager", "--out-dir", str(tmp_path),
                    "--format", "json")
    assert result.exit_code == 0
    assert any("nothing to bisect" in note for note in result.report["notes"])
    assert "bisect" not in result.report


def test_bisect_bad_input(tmp_path: Path) -> None:
    missing = invoke("bisect", str(tmp_path / "missing.py"))
    assert missing.exit_code == 2 and missing.stderr.strip().count("\n") == 0
    assert invoke("bisect", str(FIXTURES / "clean_mlp.py"), "--backend", "no_such_backend").exit_code == 2


def test_bisect_of_a_crashing_run_exits_3_without_bisecting(tmp_path: Path) -> None:
    result = invoke("bisect", str(FIXTURES / "raises_when_compiled.py"), "--backend", "aot_eager",
                    "--out-dir", str(tmp_path), "--format", "json")
    assert result.exit_code == 3
    assert result.report["verdict"] == "failed" and "bisect" not in result.report
    assert _leftovers() == []


@pytest.mark.slow
def test_wrong_inductor_decomposition_bisects_to_the_decomposition_of_cos(tmp_path: Path) -> None:
    result = invoke("bisect", str(FIXTURES / "inductor_wrong_decomposition.py"), "--backend", "inductor",
                    "--out-dir", str(tmp_path), "--format", "json")
    report = result.report
    assert result.exit_code == 1 and report["verdict"] == "diverged"
    assert report["bisect"]["backend"] == "aot_eager_decomp_partition"
    assert report["bisect"]["subsystem"] == "decomposition"
    assert "aten.cos" in report["bisect"]["debug_info"]
    assert report["first_divergence"]["op"] == "aten::cos"
    assert report["oracle_calls"] == len(report["bisect_steps"]) > 2
    assert _leftovers() == []


@pytest.mark.slow
def test_post_grad_pass_bisects_to_post_grad_passes(tmp_path: Path) -> None:
    result = invoke("bisect", str(FIXTURES / "perturbed_fusion.py"), "--backend", "inductor",
                    "--out-dir", str(tmp_path), "--format", "json")
    report = result.report
    assert result.exit_code == 1
    assert report["bisect"]["backend"] == "inductor"
    assert report["bisect"]["subsystem"] == "post_grad_passes"
    assert report["first_divergence"]["op"] == "aten::cos"
    assert _leftovers() == []
