"""`tracediff.assert_match` and the pytest plugin's `tracediff` fixture."""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from pathlib import Path

import pytest
import torch

import tracediff

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent


def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = torch.relu(x @ w)
    return torch.cos(h).sum(dim=-1)


def sin_for_cos_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """A broken compiler: computes sin where the program says cos."""
    for node in gm.graph.nodes:
        if node.target is torch.cos:
            node.target = torch.sin
    gm.recompile()
    return gm.forward


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(4, 8, generator=g), torch.randn(8, 8, generator=g)


def test_assert_match_passes_and_returns_the_report(tmp_path: Path) -> None:
    report = tracediff.assert_match(block, _inputs(), backend="aot_eager", trace_dir=tmp_path)
    assert report["verdict"] == "match" and report["compared"] > 0


def test_assert_match_fails_with_the_divergence_report(tmp_path: Path) -> None:
    with pytest.raises(AssertionError) as raised:
        tracediff.assert_match(block, _inputs(), backend=sin_for_cos_backend, trace_dir=tmp_path)
    message = str(raised.value)
    assert "first divergence (output): aten::cos" in message
    assert "test_pytest_plugin.py:" in message and "torch.cos(h)" in message
    assert f"traces kept in {tmp_path}" in message and (tmp_path / "a-eager.jsonl").is_file()


def test_inputs_are_copied_so_in_place_ops_cannot_fake_a_match(tmp_path: Path) -> None:
    def bump(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2

    x = torch.ones(3)
    tracediff.assert_match(bump, (x,), backend="aot_eager", trace_dir=tmp_path)
    assert torch.equal(x, torch.ones(3))


@pytest.mark.slow
def test_assert_match_under_inductor() -> None:
    tracediff.assert_match(block, _inputs(), backend="inductor")


def test_entry_point_names_the_plugin_module() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    module = importlib.import_module(project["project"]["entry-points"]["pytest11"]["tracediff"])
    assert callable(module.tracediff)
    assert "torch" not in module.__dict__  # loading the plugin must stay cheap


def _plugin_args() -> list[str]:
    """Load the plugin by module unless it is installed (then its entry point loads it already)."""
    installed = any(ep.value == "tracediff.pytest_plugin"
                    for ep in importlib.metadata.entry_points(group="pytest11", name="tracediff"))
    return [] if installed else ["-p", "tracediff.pytest_plugin"]


def test_fixture_in_a_user_test_suite(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=f'''
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import torch
from test_pytest_plugin import block, sin_for_cos_backend, _inputs

def test_compiles_faithfully(tracediff):
    tracediff.assert_match(block, _inputs(), backend="aot_eager")

def test_broken_compiler(tracediff):
    tracediff.assert_match(block, _inputs(), backend=sin_for_cos_backend)
''')
    result = pytester.runpytest_subprocess(*_plugin_args(), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*AssertionError: tracediff: block under backend sin_for_cos_backend does not match eager*",
        "*first divergence (output): aten::cos*",
        "*traces kept in *test_broken_compiler*tracediff*1",
    ])
    assert sys.modules.get("tracediff") is not None
