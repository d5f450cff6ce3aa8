"""Inductor kernel capture: provenance parsing (fast) and kernel records end to end (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import FIXTURES, TRACES_ONLY, child_command, invoke, marker_line
from tracediff.record.kernels import (
    _triton_arg_names,
    build_graph_kernels,
    call_sites,
    cpp_kernel_params,
    is_written_argument,
    nonfinite_constant_nodes,
    parse_post_grad_graph,
)
from tracediff.trace.reader import read_trace

POST_GRAD = '''
        # File: /src/model.py:37 in forward, code: y = self.lin(x)
        permute: "f32[8, 8][1, 8]cpu" = torch.ops.aten.permute.default(arg0_1, [1, 0]);  arg0_1 = None
        mm: "f32[4, 8][8, 1]cpu" = torch.ops.aten.mm.default(arg1_1, permute);  arg1_1 = permute = None

        # File: /src/model.py:38 in forward, code: return torch.cos(torch.sin(y)) * 2
        sin: "f32[4, 8][8, 1]cpu" = torch.ops.aten.sin.default(mm);  mm = None
        cos: "f32[4, 8][8, 1]cpu" = torch.ops.aten.cos.default(sin);  sin = None
        mul: "f32[4, 8][8, 1]cpu" = torch.ops.aten.mul.Tensor(cos, 2);  cos = None
'''

WRAPPER = """
cpp_fused_cos_mul_sin_0 = async_compile.cpp_pybinding(['float*', 'const float*'], r'''
#include <cpp_prefix.h>
extern "C"  void  kernel(float* in_out_ptr0,
                       const float* in_ptr0)
{
}
''')

class Runner:
    def call(self, args):
        buf0 = empty_strided_cpu((4, 8), (8, 1), torch.float32)
        # [Provenance debug handles] extern_kernels.mm:1
        extern_kernels.mm(arg1_1, reinterpret_tensor(arg0_1, (8, 8), (1, 8), 0), out=buf0)
        buf1 = buf0; del buf0  # reuse
        # [Provenance debug handles] cpp_fused_cos_mul_sin_0:2
        cpp_fused_cos_mul_sin_0(buf1, arg2_1)
        return (buf1, )
"""


def test_post_grad_graph_gives_op_and_line_in_graph_order() -> None:
    nodes = parse_post_grad_graph(POST_GRAD)
    assert list(nodes) == ["permute", "mm", "sin", "cos", "mul"]
    assert nodes["cos"] == ("aten::cos", "/src/model.py", 38, None)
    assert nodes["mul"] == ("aten::mul.Tensor", "/src/model.py", 38, None)
    assert nodes["mm"].line == 37


def test_post_grad_nodes_carry_the_op_they_were_decomposed_from_where_annotated() -> None:
    """record/original_aten.py's annotation, as FX prints it (a name over 40 characters cut), and a script's own
    annotation beside it: the source line is read through either."""
    nodes = parse_post_grad_graph(
        "        # Annotation: {'tracediff_aten': 'threshold_backward'} File: /src/net.py:17 in forward, code: y\n"
        '        le: "b8[2, 4]" = torch.ops.aten.le.Scalar(relu, 0)\n'
        "        # Annotation: {'stage': 1, 'tracediff_aten': 'native_batch_norm_backward'} File: /src/net.py:17 in "
        "forward, code: y\n"
        '        sub: "f32[2, 4]" = torch.ops.aten.sub.Tensor(x, mean)\n'
        "        # Annotation: {'tracediff_aten': '_scaled_dot_product_flash_attention_backw...'} File: /src/a.py:3 in "
        "f, code: z\n"
        '        mul: "f32[2, 4]" = torch.ops.aten.mul.Tensor(sub, 2)\n'
        "        # File: /src/net.py:18 in forward, code: w\n"
        '        add: "f32[2, 4]" = torch.ops.aten.add.Tensor(mul, 1)\n')
    assert nodes["le"] == ("aten::le.Scalar", "/src/net.py", 17, "aten::threshold_backward")
    assert nodes["sub"] == ("aten::sub.Tensor", "/src/net.py", 17, "aten::native_batch_norm_backward")
    assert nodes["mul"] == ("aten::mul.Tensor", "/src/a.py", 3, "aten::_scaled_dot_product_flash_attention_backw...")
    assert nodes["add"] == ("aten::add.Tensor", "/src/net.py", 18, None)


def test_a_node_with_several_outputs_is_known_too() -> None:
    """Such a node (fused attention) has no type annotation; its getitems are no ops."""
    nodes = parse_post_grad_graph(
        "        # File: /src/attn.py:12 in forward, code: y = F.scaled_dot_product_attention(q, k, v)\n"
        "        _scaled_dot_product_flash_attention_for_cpu = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu"
        ".default(q, k, v)\n"
        '        getitem: "f32[2, 4]" = _scaled_dot_product_flash_attention_for_cpu[0]\n')
    assert nodes == {"_scaled_dot_product_flash_attention_for_cpu": (
        "aten::_scaled_dot_product_flash_attention_for_cpu", "/src/attn.py", 12, None)}


def test_call_sites_map_wrapper_lines_to_handles() -> None:
    sites = call_sites(WRAPPER)
    lines = WRAPPER.splitlines()
    handles = {lines[n - 1].strip().split("(")[0]: h for n, h in sites.items()}
    assert handles == {"extern_kernels.mm": "extern_kernels.mm:1", "cpp_fused_cos_mul_sin_0": "cpp_fused_cos_mul_sin_0:2"}


def test_cpp_kernel_parameters_tell_inputs_from_outputs() -> None:
    assert cpp_kernel_params(WRAPPER) == {"cpp_fused_cos_mul_sin_0": ["in_out_ptr0", "in_ptr0"]}


def test_a_template_kernels_own_output_name_is_read_as_written() -> None:
    """CPU flex attention's template kernel names its output `float* output`: taken for an input, its old
    contents were fingerprinted before the launch and filed under the value the kernel left, so the program's
    later read of the attention output (sum 30.07) was recorded as sum 1.9e+37."""
    source = ("cpp_flex_attention_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r'''\n"
              'extern "C"\nvoid kernel(const float* query, const int32_t* kv_indices, float* output, '
              "float* __restrict__ in_out_ptr0, const int64_t ks0)\n{\n}\n''')\n")
    assert cpp_kernel_params(source) == {
        "cpp_flex_attention_0": ["query", "kv_indices", "out_ptr_output", "in_out_ptr0", "ks0"]}


def test_a_triton_argument_inductor_lists_as_mutated_is_read_as_written() -> None:
    """A user-written Triton kernel inductor calls names its arguments freely (`y_ptr`): one it mutates is renamed
    `in_out_y_ptr` and counts as written, so the launch reads it after the kernel and launches the fingerprint
    queue before it, where its memory is queued. Before, only `in_out_ptr*` did."""
    autotuner = SimpleNamespace(
        triton_meta={"signature": {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "in_out_ptr0": "*fp32", "out_ptr0": "*fp32"}},
        inductor_meta={"mutated_arg_names": ["y_ptr", "in_out_ptr0"]})
    names = _triton_arg_names(autotuner)
    assert names == ["x_ptr", "in_out_y_ptr", "n", "in_out_ptr0", "out_ptr0"]
    assert [n for n in names if is_written_argument(n)] == ["in_out_y_ptr", "in_out_ptr0", "out_ptr0"]


# -- end to end: one inductor compile each, shared through run_fixture -----------------------

BACKENDS = "eager,inductor"


@pytest.mark.slow
def test_perturbed_op_inside_a_fused_kernel_is_pinned(run_fixture) -> None:
    result = run_fixture("perturbed_fusion.py", BACKENDS, TRACES_ONLY)
    report = result.report
    assert result.exit_code == 1 and report["verdict"] == "diverged"
    first = report["first_divergence"]
    assert first["op"] == "aten::cos"
    assert first["source"] == f"perturbed_fusion.py:{marker_line('perturbed_fusion.py', 'divergent line')}"
    assert first["module"] == "Head"
    assert first["candidates"] == [{k: first[k] for k in ("op", "index", "source", "module")} | {"code": first["code"]}]
    narrowing = first["narrowing"]
    assert narrowing["result"] == "pinned"
    fused = [c["op"] for c in narrowing["fused_candidates"]]
    assert {"aten::sin", "aten::cos", "aten::exp"} <= set(fused)
    assert Path(narrowing["trace"]).is_file()


@pytest.mark.slow
def test_without_narrowing_the_kernel_ops_are_the_candidates(run_fixture) -> None:
    result = run_fixture("perturbed_fusion.py", BACKENDS, "--no-narrow", TRACES_ONLY)
    first = result.report["first_divergence"]
    assert result.exit_code == 1
    ops = [c["op"] for c in first["candidates"]]
    assert "aten::cos" in ops and "aten::sin" in ops and len(ops) > 1
    assert first["op"] in ops
    assert "narrowing" not in first
    assert first["b"]["op"].startswith("cpp_fused_")


@pytest.mark.slow
def test_the_pass_only_runs_under_inductor(run_fixture) -> None:
    result = run_fixture("perturbed_fusion.py", "eager,aot_eager")
    assert result.exit_code == 0 and result.report["verdict"] == "match"


@pytest.mark.slow
def test_a_fault_in_a_compiled_backward_is_named_at_its_forward_line(run_fixture) -> None:
    """The backward graph is compiled on the first `backward()`, after the forward's compile: its kernels
    carry their fused ops and lines too, and the kernel that computes one piece of `tanh_backward`'s
    decomposition is compared as A's op's value, not input by input (before: kernels without lines, an
    11-op candidate list on a training step; then "a program input differs" for a decomposed kernel)."""
    result = run_fixture("backward_fault.py", BACKENDS, TRACES_ONLY)
    report = result.report
    assert result.exit_code == 1 and report["verdict"] == "diverged"
    first = report["first_divergence"]
    assert (first["op"], first["source"]) == (
        "aten::tanh_backward", f"backward_fault.py:{marker_line('backward_fault.py', 'divergent line')}")
    assert first["narrowing"]["result"] == "pinned"
    assert "program input" not in first["note"]
    _, records = read_trace(Path(first["narrowing"]["trace"]))
    backward = [r for r in records if r["t"] == "kernel" and "tanh_backward" in r["name"]]
    assert backward and all(r["fuses"] and r["src"] for r in backward)
    # The backward graph's extern calls too (aten::mm.out of each weight gradient): the line inductor's
    # provenance gives, not the forward line of the autograd node running the whole compiled backward.
    _, fused = read_trace(Path(report["traces"][1]))
    lines = {r["src"] for r in fused if r["t"] == "op" and r.get("bw") and r["op"] == "aten::mm.out"}
    fc2_line = 1 + (FIXTURES / "backward_fault.py").read_text().splitlines().index("        return F.log_softmax(self.fc2(h), dim=-1)  # its output is saved for the backward")
    assert lines == {f"backward_fault.py:{marker_line('backward_fault.py', 'divergent line')}",
                     f"backward_fault.py:{fc2_line}"}, lines


@pytest.mark.slow
def test_kernel_records_show_with_the_ops_they_fuse(run_fixture) -> None:
    report = run_fixture("perturbed_fusion.py", BACKENDS, "--no-narrow", TRACES_ONLY).report
    shown = invoke("show", report["traces"][1])
    kernel_lines = [line for line in shown.stdout.splitlines() if " kernel cpp_fused_" in line]
    assert kernel_lines, shown.stdout
    assert any("aten::sin" in line and "aten::cos" in line for line in kernel_lines)
    assert "perturbed_fusion.py:" in kernel_lines[0]


@pytest.mark.slow
def test_kernels_are_recorded_with_caches_warm_and_cold(tmp_path: Path) -> None:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"))
    kernels = []
    for attempt in ("cold", "warm"):
        trace = tmp_path / f"{attempt}.jsonl"
        subprocess.run(child_command(trace, FIXTURES / "perturbed_fusion.py", "inductor"), env=env, check=True,
                       capture_output=True)
        _, records = read_trace(trace)
        kernels.append([(r["name"], [f["op"] for f in r["fuses"]]) for r in records if r["t"] == "kernel"])
    assert kernels[0] and kernels[0] == kernels[1]
    assert any("aten::cos" in ops for _, ops in kernels[1])


MASK_POST_GRAD = '''
        # File: /src/model.py:6 in attend, code: mask = torch.full((n, n), float("-inf")).triu(1)
        iota: "i64[8][1]cpu" = torch.ops.prims.iota.default(8, start = 0, step = 1, dtype = torch.int64, device = device(type='cpu'), requires_grad = False)
        ge: "b8[8, 8][8, 1]cpu" = torch.ops.aten.ge.Scalar(iota, 1);  iota = None
        full_default: "f32[8, 8][8, 1]cpu" = torch.ops.aten.full.default([8, 8], -inf, dtype = torch.float32, layout = torch.strided, device = device(type='cpu'), pin_memory = False)
        full_default_1: "f32[][]cpu" = torch.ops.aten.full.default([], 0.0, dtype = torch.float32, layout = torch.strided, device = device(type='cpu'), pin_memory = False)
        where: "f32[8, 8][8, 1]cpu" = torch.ops.aten.where.self(ge, full_default, full_default_1);  ge = full_default = full_default_1 = None
        isnan: "b8[8, 8][8, 1]cpu" = torch.ops.aten.isnan.default(where)
        nan_to_num: "f32[8, 8][8, 1]cpu" = torch.ops.aten.nan_to_num.default(where, 0.0, -3.4028234663852886e+38);  where = None
        fill: "f32[8][1]cpu" = torch.ops.aten.fill.Scalar(arg0_1, nan);  arg0_1 = None
        _scaled_dot_product_flash_attention_for_cpu = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(arg1_1, arg2_1, arg3_1, attn_mask = nan_to_num, scale = inf)
'''


def test_post_grad_nodes_writing_a_nonfinite_literal() -> None:
    """`-inf`/`nan` as an argument, also of a node with several outputs (no annotation); not a node
    named after isnan/nan_to_num, nor a finite extreme like finfo.min."""
    assert nonfinite_constant_nodes(MASK_POST_GRAD) == {"full_default", "fill",
                                                         "_scaled_dot_product_flash_attention_for_cpu"}


def test_fused_ops_writing_a_nonfinite_literal_are_marked() -> None:
    compiled = SimpleNamespace(
        cache_key="k", source_code="", inductor_post_grad_graph_str=MASK_POST_GRAD,
        inductor_provenance_mapping_str=json.dumps(
            {"cppCodeToPost": {"cpp_fused_full_triu_0:1": ["where", "ge", "iota", "full_default", "full_default_1"]}}))
    fused = build_graph_kernels(compiled, {}).fuses["cpp_fused_full_triu_0:1"]
    records = [op.as_record(None) for op in fused]
    assert [(r["op"], r.get("nfs", False)) for r in records] == [
        ("prims::iota", False), ("aten::ge.Scalar", False), ("aten::full", True), ("aten::full", False),
        ("aten::where.self", False)]


@pytest.mark.slow
def test_a_custom_backend_around_compile_fx_gives_kernels_module_paths(tmp_path: Path) -> None:
    # compile_fx_backend imports compile_fx before tracediff wraps it: the module paths must come anyway.
    trace = tmp_path / "b.jsonl"
    subprocess.run(child_command(trace, FIXTURES / "perturbed_layernorm.py", "compile_fx_backend:my_backend"),
                   check=True, capture_output=True)
    _, records = read_trace(trace)
    fused = [f for r in records if r["t"] == "kernel" for f in r["fuses"]]
    assert {f["m"] for f in fused if f["op"] == "aten::rsqrt"} == {"Block.norm"}


_IMPORTS_INDUCTOR = """
import sys, torch
from tracediff.record.backends import resolve_backend
from tracediff.record.session import RecordingSession
with RecordingSession(sys.argv[1], backend=resolve_backend(sys.argv[2])) as session:
    torch.compile(lambda x: torch.sin(x) * 2)(torch.randn(8))
print(session.kernels is not None, "torch._inductor.compile_fx" in sys.modules, session.redirect.compile_calls)
"""


@pytest.mark.parametrize(("backend", "expected"), [
    ("eager", "False False 1"),
    ("aot_eager", "False False 1"),
    ("tests.test_kernels:_backend_of_its_own", "True True 1"),  # a custom backend may call inductor itself
])
def test_inductors_compiler_is_imported_only_where_the_backend_may_run_it(tmp_path: Path, backend: str,
                                                                          expected: str) -> None:
    """Importing inductor's compiler (to capture its kernels) costs a recording a second or more: under a
    backend that never reaches inductor it is neither imported nor hooked. A fresh interpreter, so that no
    other test's import counts."""
    result = subprocess.run([sys.executable, "-c", _IMPORTS_INDUCTOR, str(tmp_path / "t.jsonl"), backend],
                            capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parent.parent)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[-2] == expected


def _backend_of_its_own(gm, example_inputs):  # noqa: ANN001, ANN202 - a torch.compile backend
    return gm.forward
