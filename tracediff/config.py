"""Options and tolerances: defaults, `tracediff.yaml`, and command-line overrides.

Tolerances are per dtype because the noise a compiler may legitimately add
(reordered reductions, fused math) scales with the dtype's precision.
Integer and bool tensors must match exactly. Per-op and per-module overrides
take precedence over the dtype defaults, most specific first.

    # tracediff.yaml
    tolerances:            # per dtype (or dtype@device): rtol, atol
      float32: {rtol: 1.0e-4, atol: 1.0e-6}
      float32@cuda: {rtol: 1.0e-3, atol: 1.0e-5}
    ops:                   # per op name (with or without overload)
      aten::softmax: {rtol: 1.0e-3}
    modules:               # per module path prefix
      Net.head: {rtol: 1.0e-3}
    ignore:
      ops: [aten::dropout]
      modules: [Net.aux]
    strict_structure: false
    seed: 0
    fallback_random: true
    timeout: 900
    noise_factor: 10       # --calibrate: allowed multiple of each op's measured noise
    same_inputs: true      # run: judge each compiled call on its own inputs (--no-same-inputs: traces only)
    light: false           # run: long runs: record compiled calls only, judge within a time budget (--light)
    compress: false        # run, bisect, fix: the run directory's traces zstd-compressed, a-eager.jsonl.zst (--compress)
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tracediff.errors import UserError
from tracediff.op_names import packet


@dataclass(frozen=True)
class Tolerance:
    """Relative and absolute tolerance; `atol` is per element."""

    rtol: float
    atol: float

    def __str__(self) -> str:
        return f"rtol={self.rtol:g}, atol={self.atol:g}"


def looser(a: Tolerance, b: Tolerance) -> Tolerance:
    """The looser of two tolerances (rtol first: it is what scales with precision)."""
    return a if (a.rtol, a.atol) >= (b.rtol, b.atol) else b


# Generous enough for reordered float reductions and fused math on small
# models, tight enough that a wrong op (cos -> sin) is orders of magnitude
# outside. Measured on clean runs (README "How it decides", docs/cuda.md): on CPU agreeing float32
# values differ by at most ~4e-7 relative; on an H100, cuDNN convolution +
# train-mode batchnorm vs one fused Triton reduction by 1.1e-4, hence the
# looser `dtype@device` entry. Keys `dtype@device` override `dtype` for
# tensors on that device type.
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(1e-7, 1e-10),
    "float32": Tolerance(1e-4, 1e-6),
    "float32@cuda": Tolerance(1e-3, 1e-5),
    "complex64": Tolerance(1e-4, 1e-6),
    "complex128": Tolerance(1e-7, 1e-10),
    "bfloat16": Tolerance(1.6e-2, 1e-3),
    "float16": Tolerance(2e-3, 1e-4),
    "float8_e4m3fn": Tolerance(1.25e-1, 1e-2),
    "float8_e5m2": Tolerance(2.5e-1, 1e-2),
}
EXACT = Tolerance(0.0, 0.0)


@dataclass(frozen=True)
class Config:
    tolerances: dict[str, Tolerance] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    op_tolerances: dict[str, Tolerance] = field(default_factory=dict)
    module_tolerances: dict[str, Tolerance] = field(default_factory=dict)
    ignore_ops: frozenset[str] = frozenset()
    ignore_modules: tuple[str, ...] = ()
    strict_structure: bool = False
    exact: bool = False
    seed: int = 0
    fallback_random: bool | None = None  # None: on for inductor
    timeout: float = 900.0
    # --calibrate: a difference may reach this many times the reference's own measured error
    noise_factor: float = 10.0
    # `tracediff run`: judge each compiled call of the candidate on its own inputs against eager and float64
    # (record/judging/); the verdict is then that judgement's, and a difference between the traces is drift.
    same_inputs: bool = True
    # `tracediff run --light`, for long runs: no op recorded, only compiled calls and the judge's checks, the calls
    # judged within a time budget (record/judging/policy.py); ops recorded in depth around the first wrong call.
    light: bool = False
    # `tracediff run/bisect/fix --compress`: the traces of the run directory written as .jsonl.zst (outputs.RunDir).
    compress: bool = False

    def tolerance_for(self, dtype: str, op: str, module: str | None, device: str = "cpu") -> Tolerance:
        """The tolerance a tensor of `dtype` on `device`, from `op` in `module`, is judged by."""
        if self.exact or not _is_floating(dtype):
            return EXACT
        for key in (op, packet(op)):
            if key in self.op_tolerances:
                return self.op_tolerances[key]
        if module:
            best = max((m for m in self.module_tolerances if _module_matches(module, m)), key=len, default=None)
            if best is not None:
                return self.module_tolerances[best]
        device_type = device.split(":", 1)[0]
        return self.tolerances.get(f"{dtype}@{device_type}") or self.tolerances.get(dtype, self.tolerances["float32"])

    @property
    def ignores_any(self) -> bool:
        """Are some ops or modules left out of the comparison (`ignore` in the config file)?"""
        return bool(self.ignore_ops or self.ignore_modules)

    def is_ignored(self, op: str, module: str | None) -> bool:
        if op in self.ignore_ops or packet(op) in self.ignore_ops:
            return True
        return module is not None and any(_module_matches(module, m) for m in self.ignore_modules)

    def with_overrides(self, **overrides: Any) -> Config:
        """Command-line options win over the file; None means 'not given'."""
        changes = {k: v for k, v in overrides.items() if v is not None}
        rtol, atol = changes.pop("rtol", None), changes.pop("atol", None)
        config = dataclasses.replace(self, **changes)
        if rtol is not None or atol is not None:
            tolerances = {
                dtype: Tolerance(rtol if rtol is not None else t.rtol, atol if atol is not None else t.atol)
                for dtype, t in config.tolerances.items()
            }
            config = dataclasses.replace(config, tolerances=tolerances)
        return config


def _is_floating(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat", "complex"))


def _module_matches(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


_TOP_KEYS = {"tolerances", "ops", "modules", "ignore", "strict_structure", "seed", "fallback_random", "timeout", "exact",
             "noise_factor", "same_inputs", "light", "compress"}


def load_config(path: str | os.PathLike[str] | None) -> Config:
    """Read `tracediff.yaml`; no path and no ./tracediff.yaml gives the defaults."""
    if path is None:
        default = Path("tracediff.yaml")
        if not default.is_file():
            return Config()
        path = default
    path = Path(path)
    if not path.is_file():
        raise UserError(f"config file {path}: no such file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"config file {path}: not valid YAML ({first})") from None
    if data is None:
        return Config()
    if not isinstance(data, dict):
        raise UserError(f"config file {path}: expected a mapping of options at the top level")
    return _parse(data, str(path))


def _parse(data: dict[str, Any], where: str) -> Config:
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise UserError(f"{where}: unknown key {sorted(unknown)[0]!r}; known keys: {', '.join(sorted(_TOP_KEYS))}")
    tolerances = dict(DEFAULT_TOLERANCES)
    for dtype, spec in _mapping(data.get("tolerances"), f"{where}: tolerances").items():
        base = tolerances.get(str(dtype)) or tolerances.get(str(dtype).split("@")[0], DEFAULT_TOLERANCES["float32"])
        tolerances[str(dtype)] = _tolerance(spec, base, f"{where}: tolerances.{dtype}")
    ops = {str(k): _tolerance(v, None, f"{where}: ops.{k}") for k, v in _mapping(data.get("ops"), f"{where}: ops").items()}
    modules = {
        str(k): _tolerance(v, None, f"{where}: modules.{k}") for k, v in _mapping(data.get("modules"), f"{where}: modules").items()
    }
    ignore = _mapping(data.get("ignore"), f"{where}: ignore")
    unknown = set(ignore) - {"ops", "modules"}
    if unknown:
        raise UserError(f"{where}: unknown key ignore.{sorted(unknown)[0]}; known: ops, modules")
    config = Config(
        tolerances=tolerances,
        op_tolerances=ops,
        module_tolerances=modules,
        ignore_ops=frozenset(_strings(ignore.get("ops"), f"{where}: ignore.ops")),
        ignore_modules=tuple(_strings(ignore.get("modules"), f"{where}: ignore.modules")),
    )
    scalars: dict[str, Any] = {}
    for key, kind in (("strict_structure", bool), ("exact", bool), ("fallback_random", bool), ("seed", int),
                      ("timeout", (int, float)), ("noise_factor", (int, float)), ("same_inputs", bool),
                      ("light", bool), ("compress", bool)):
        if key in data:
            value = data[key]
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise UserError(f"{where}: {key} must be {getattr(kind, '__name__', 'a number')}, got {value!r}")
            scalars[key] = value
    return dataclasses.replace(config, **scalars)


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{where} must be a mapping")
    return value


def _strings(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UserError(f"{where} must be a list of strings")
    return value


def _tolerance(spec: Any, base: Tolerance | None, where: str) -> Tolerance:
    spec = _mapping(spec, where)
    unknown = set(spec) - {"rtol", "atol"}
    if unknown:
        raise UserError(f"{where}: unknown key {sorted(unknown)[0]!r}; known: rtol, atol")
    base = base or DEFAULT_TOLERANCES["float32"]
    values = {}
    for key in ("rtol", "atol"):
        value = spec.get(key, getattr(base, key))
        if isinstance(value, str):  # YAML 1.1 reads 1e-4 (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise UserError(f"{where}: {key} must be a non-negative number, got {value!r}")
        values[key] = float(value)
    return Tolerance(**values)
