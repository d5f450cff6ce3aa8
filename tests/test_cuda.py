"""The same fixtures on an NVIDIA GPU: Triton kernels recorded, faults localized, clean models match.

Skipped where CUDA is absent (CI). Run on a GPU machine with:
    python -m pytest -q -m cuda tests/test_cuda.py
Results from such a run are recorded in docs/cuda.md.
"""

from __future__ import annotations

import pytest
import torch

from tests.conftest import marker_line

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (CUDA)"),
]

ON_GPU = ("--", "--device", "cuda")


def test_wrong_decomposition_on_cuda(run_fixture) -> None:
    result = run_fixture("wrong_decomposition.py", "eager,wrong_decomposition:wrong_cos_backend", *ON_GPU)
    first = result.report["first_divergence"]
    assert result.exit_code == 1
    assert first["op"] == "aten::cos"
    assert first["source"] == f"wrong_decomposition.py:{marker_line('wrong_decomposition.py', 'divergent line')}"


def test_perturbed_fusion_on_cuda_is_pinned(run_fixture) -> None:
    result = run_fixture("perturbed_fusion.py", "eager,inductor", *ON_GPU)
    first = result.report["first_divergence"]
    assert result.exit_code == 1, result.stdout
    assert first["op"] == "aten::cos"
    assert first["source"] == f"perturbed_fusion.py:{marker_line('perturbed_fusion.py', 'divergent line')}"
    assert first["narrowing"]["result"] == "pinned"


def test_triton_kernels_are_recorded_with_fused_ops(run_fixture) -> None:
    from tests.conftest import invoke

    report = run_fixture("perturbed_fusion.py", "eager,inductor", "--no-narrow", *ON_GPU).report
    first = report["first_divergence"]
    assert {"aten::sin", "aten::cos"} <= {c["op"] for c in first["candidates"]}
    assert first["b"]["op"].startswith("triton_")
    shown = invoke("show", report["traces"][1])
    assert any(" kernel triton_" in line and "aten::cos" in line for line in shown.stdout.splitlines())


@pytest.mark.parametrize("fixture", ["clean_transformer.py", "clean_cnn.py", "clean_mlp.py"])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_clean_models_match_on_cuda(run_fixture, fixture: str, backend: str) -> None:
    result = run_fixture(fixture, f"eager,{backend}", *ON_GPU)
    assert result.exit_code == 0, result.stdout
    assert result.report["verdict"] == "match"


def test_repro_of_a_fused_triton_kernel_reproduces_on_cuda(run_fixture, tmp_path) -> None:
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import invoke

    run = run_fixture("perturbed_fusion.py", "eager,inductor", "--no-narrow", *ON_GPU)
    made = invoke("repro", run.report["run_dir"], "--out-dir", str(tmp_path), "--format", "json")
    assert made.exit_code == 1, made.stderr
    assert made.report["verdict"] == "reproduced" and made.report["check"]["control_returncode"] == 0
    loaded = torch.load(Path(made.report["inputs"]), weights_only=True)
    assert all(t.is_cuda for t in loaded.values())  # captured where the run ran
    on_cpu = subprocess.run([sys.executable, "repro.py", "--device", "cpu", "--backend", "eager"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert on_cpu.returncode == 0, on_cpu.stdout + on_cpu.stderr
