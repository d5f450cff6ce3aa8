"""tracediff.yaml: parsing, precedence, and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracediff.config import DEFAULT_TOLERANCES, EXACT, Config, Tolerance, load_config
from tracediff.errors import UserError


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tracediff.yaml"
    path.write_text(text)
    return path


def test_defaults_are_dtype_aware() -> None:
    config = Config()
    assert config.tolerance_for("float32", "aten::cos", None) == DEFAULT_TOLERANCES["float32"]
    assert config.tolerance_for("bfloat16", "aten::cos", None).rtol > config.tolerance_for("float32", "x", None).rtol
    assert config.tolerance_for("int64", "aten::add", None) == EXACT
    assert config.tolerance_for("bool", "aten::eq", None) == EXACT


def test_file_overrides_with_precedence(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, """
tolerances:
  float32: {rtol: 1e-3}
ops:
  aten::softmax: {rtol: 0.5, atol: 0}
modules:
  Net: {rtol: 0.1}
  Net.head: {rtol: 0.2}
ignore:
  ops: [aten::dropout]
  modules: [Net.aux]
strict_structure: true
seed: 7
"""))
    assert config.tolerance_for("float32", "aten::add", None) == Tolerance(1e-3, DEFAULT_TOLERANCES["float32"].atol)
    assert config.tolerance_for("float32", "aten::softmax.int", "Net.head") == Tolerance(0.5, 0.0)
    assert config.tolerance_for("float32", "aten::add", "Net.head.fc").rtol == 0.2
    assert config.tolerance_for("float32", "aten::add", "Net.body").rtol == 0.1
    assert config.tolerance_for("float32", "aten::add", "Netter").rtol == 1e-3
    assert config.is_ignored("aten::dropout", None)
    assert config.is_ignored("aten::add", "Net.aux.fc")
    assert not config.is_ignored("aten::add", "Net.auxiliary")
    assert config.strict_structure and config.seed == 7


def test_command_line_wins(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, "tolerances:\n  float32: {rtol: 1.0e-3}\n")).with_overrides(rtol=0.5, atol=None)
    assert config.tolerance_for("float32", "aten::add", None).rtol == 0.5
    assert config.tolerance_for("bfloat16", "aten::add", None).rtol == 0.5


@pytest.mark.parametrize(
    "text, message",
    [
        ("tolerence: {}\n", "unknown key 'tolerence'"),
        ("tolerances:\n  float32: {rtl: 1}\n", "unknown key 'rtl'"),
        ("tolerances:\n  float32: {rtol: -1}\n", "non-negative"),
        ("ignore:\n  opps: []\n", "unknown key ignore.opps"),
        ("ignore:\n  ops: aten::add\n", "list of strings"),
        ("seed: x\n", "seed must be int"),
        ("- a\n- b\n", "mapping"),
        ("a: [\n", "not valid YAML"),
    ],
)
def test_bad_config_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(UserError) as info:
        load_config(_write(tmp_path, text))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        load_config(tmp_path / "nope.yaml")


def test_no_file_means_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_config(None) == Config()


def test_device_specific_tolerances(tmp_path: Path) -> None:
    config = Config()
    assert config.tolerance_for("float32", "aten::add", None, "cuda:0") == DEFAULT_TOLERANCES["float32@cuda"]
    assert config.tolerance_for("float32", "aten::add", None, "cpu") == DEFAULT_TOLERANCES["float32"]
    assert config.tolerance_for("bfloat16", "aten::add", None, "cuda:0") == DEFAULT_TOLERANCES["bfloat16"]
    custom = load_config(_write(tmp_path, "tolerances:\n  float32@cuda: {rtol: 0.01}\n"))
    assert custom.tolerance_for("float32", "aten::add", None, "cuda").rtol == 0.01


def test_the_judge_and_the_light_mode_are_set_in_the_file_and_overridden_on_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "tracediff.yaml"
    path.write_text("same_inputs: true\nlight: true\n")
    config = load_config(path)
    assert config.same_inputs and config.light
    assert not config.with_overrides(light=False).light and config.with_overrides(light=None).light
    assert not Config().light and Config().same_inputs  # the defaults
    path.write_text("light: 3\n")
    with pytest.raises(UserError, match="light must be bool"):
        load_config(path)


def test_compressed_traces_are_asked_for_in_the_file_or_on_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "tracediff.yaml"
    path.write_text("compress: true\n")
    config = load_config(path)
    assert config.compress and not config.with_overrides(compress=False).compress
    assert config.with_overrides(compress=None).compress
    assert not Config().compress  # the default: plain .jsonl traces
    path.write_text("compress: zstd\n")
    with pytest.raises(UserError, match="compress must be bool"):
        load_config(path)
