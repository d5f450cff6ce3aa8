"""torch.func transforms under the recorder: no crash, no change to the results, no false alarm.

Forward-mode AD (jvp, jacfwd, hessian) makes efficient zero tensors, which
have no memory: reading one under the dispatch mode segfaulted. Compiled
functions called inside a transform get functorch's wrapper tensors, which
cannot be read while the transforms are active.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch.func import vmap

import tracediff
from tests.conftest import FIXTURES, Result
from tracediff.trace.reader import read_trace

ROOT = Path(__file__).resolve().parent.parent

# Run in a child process: before the fix this was killed by SIGSEGV, which would take pytest down.
_FORWARD_OVER_REVERSE = textwrap.dedent("""
    import sys
    import torch
    import tracediff
    from torch.func import hessian, jacfwd, jvp

    def f(x):
        return (x.sin() * x).sum() + (x ** 2).mean()

    x = torch.randn(5, generator=torch.Generator().manual_seed(0))
    plain = [hessian(f)(x), jacfwd(torch.cos)(x), jvp(torch.sin, (x,), (torch.ones(5),))[1]]
    for exact in (False, True):
        with tracediff.record(sys.argv[1] + f"-{exact}.jsonl", exact=exact):
            recorded = [hessian(f)(x), jacfwd(torch.cos)(x), jvp(torch.sin, (x,), (torch.ones(5),))[1]]
        assert all(torch.equal(a, b) for a, b in zip(plain, recorded)), exact
    print("ok")
""")


def test_forward_mode_ad_records_without_crashing(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", _FORWARD_OVER_REVERSE, str(tmp_path / "t")],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
    for exact in (False, True):
        _, records = read_trace(tmp_path / f"t-{exact}.jsonl")
        zeros = [t for r in records if r.get("op") == "aten::_efficientzerotensor" for t in r["out"]]
        assert zeros, "forward-mode AD made no zero tensor: the test no longer covers the crash"
        for t in zeros:  # a zero tensor's value is known without reading it
            assert t["fp"]["l1"] == 0 and t["fp"]["n"] == 5
            assert ("hash" in t["fp"]) == exact


def test_a_compiled_function_called_under_vmap_is_read_outside_the_transform(tmp_path: Path) -> None:
    def features(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * 2 - 1) * x.cos()

    batch = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))
    with tracediff.record(tmp_path / "t.jsonl", backend="eager"):
        recorded = vmap(torch.compile(features))(batch)
    assert torch.equal(recorded, vmap(features)(batch))
    _, records = read_trace(tmp_path / "t.jsonl")
    regions = [r for r in records if r["t"] == "region"]
    assert [r["ev"] for r in regions] == ["enter", "exit"]
    for tensor in (*regions[0]["in"], *regions[1]["out"]):
        assert tensor["ft"] >= 1  # a vmap wrapper, described by the batch it wraps
        assert tensor["sh"] == [3, 5] and tensor["fp"]["n"] == 15
    assert regions[0]["in"][0]["fp"]["sum"] == pytest.approx(batch.sum().item(), rel=1e-6)
    assert regions[1]["out"][0]["fp"]["sum"] == pytest.approx(recorded.sum().item(), rel=1e-6)


def _printed(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.match(r"[\w .-]+: shape=", line)]


def _printed_by_runs(result: Result) -> list[list[str]]:
    return [_printed(Path(run["log"]).read_text()) for run in result.report["runs"]]


def test_torch_func_transforms_match_under_aot_eager(run_fixture) -> None:
    result = run_fixture("torch_func.py", "eager,aot_eager")
    assert result.exit_code == 0 and result.report["verdict"] == "match", result.stdout
    a, b = _printed_by_runs(result)
    assert len(a) == 10 and a == b
    # Graphs dynamo traced through vmap/grad are not re-run (on torch 2.11 a failed re-run left functorch's
    # layers so that the program's next compiled call failed); the other graphs are judged.
    same_inputs = result.report["same_inputs"]
    assert same_inputs["unjudged"] and same_inputs["calls"], same_inputs
    assert same_inputs["unjudged_reason"] == "its graph applies a torch.func transform (vmap, grad) inside"


@pytest.mark.slow
def test_torch_func_transforms_match_under_inductor_and_print_what_python_prints(run_fixture) -> None:
    result = run_fixture("torch_func.py", "eager,inductor")
    assert result.exit_code == 0 and result.report["verdict"] == "match", result.stdout
    plain = subprocess.run([sys.executable, str(FIXTURES / "torch_func.py")], capture_output=True, text=True,
                           cwd=FIXTURES, timeout=600)
    assert plain.returncode == 0, plain.stderr[-3000:]
    _, inductor = _printed_by_runs(result)
    assert inductor == _printed(plain.stdout) and len(inductor) == 10
