"""Synthetic trace pairs for the diff-scale benchmark, shaped exactly like the recorder's.

`generate(out_dir, n)` writes `a.jsonl` and `b.jsonl` with `n` op records each
(B: about n), through `tracediff.trace.writer.TraceWriter`, plus `meta.json`
(what was planted, where). Records have the recorder's keys in its order:

    {"t","i","op","d","m","src","path","code","in","out"[,"bw"]}
    tensor {"a","id","v","dt","sh","dev","fp":{"sum","l1","l2","max","nan","inf","n"}}

Shape of the traces: a GPT-like training step (embedding, L forward layers,
head and loss, L backward layers, an optimizer pass over the parameters),
repeated until n records. The op/shape keys come from about 300 distinct
(op, shapes) entries, so the same pattern repeats every layer and every step,
as in a real model (the hard case for alignment: periodic, ambiguous).
Dataflow is real: input 0 of most ops is the previous op's output (same id,
version and fingerprint), weights are long-lived tensors with stable ids.

B equals A except:
  - `edits` scattered single-record edits, half insertions (an op name no
    record of A has, e.g. a copy a compiler added) and half deletions (an op
    of A that B does not materialize), kept apart from each other and from
    the planted divergence;
  - one value divergence in the middle: from A's record `planted` on, B's
    outputs are scaled by 1.01 (as a real divergence propagates to everything
    downstream), while the planted record's inputs still agree. The verdict
    must name exactly that record.

The pair is a pure function of (VERSION, n, edits, seed): cached by the caller.
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path
from typing import Any

from tracediff.op_names import base_op
from tracediff.trace.writer import TraceWriter

VERSION = "synth-v1"

_PATH = "/home/user/project/model.py"

# The forward of one layer: (op, submodule, source code, outputs, weight inputs); shapes are drawn below.
_FWD_LAYER = [
    ("aten::native_layer_norm", "ln_1", "h = self.ln_1(x)", 3, 2),
    ("aten::t", "attn.c_attn", "qkv = self.c_attn(h)", 1, 0),
    ("aten::addmm", "attn.c_attn", "qkv = self.c_attn(h)", 1, 2),
    ("aten::view", "attn.c_attn", "qkv = self.c_attn(h)", 1, 0),
    ("aten::split.Tensor", "attn", "q, k, v = qkv.split(C, dim=2)", 3, 0),
    ("aten::view", "attn", "q = q.view(B, T, H, C // H).transpose(1, 2)", 1, 0),
    ("aten::transpose.int", "attn", "q = q.view(B, T, H, C // H).transpose(1, 2)", 1, 0),
    ("aten::view", "attn", "k = k.view(B, T, H, C // H).transpose(1, 2)", 1, 0),
    ("aten::transpose.int", "attn", "k = k.view(B, T, H, C // H).transpose(1, 2)", 1, 0),
    ("aten::view", "attn", "v = v.view(B, T, H, C // H).transpose(1, 2)", 1, 0),
    ("aten::transpose.int", "attn", "v = v.view(B, T, H, C // H).transpose(1, 2)", 1, 0),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attn", "y = F.scaled_dot_product_attention(q, k, v, is_causal=True)", 2, 2),
    ("aten::transpose.int", "attn", "y = y.transpose(1, 2).contiguous().view(B, T, C)", 1, 0),
    ("aten::clone", "attn", "y = y.transpose(1, 2).contiguous().view(B, T, C)", 1, 0),
    ("aten::view", "attn", "y = y.transpose(1, 2).contiguous().view(B, T, C)", 1, 0),
    ("aten::t", "attn.c_proj", "return self.c_proj(y)", 1, 0),
    ("aten::addmm", "attn.c_proj", "return self.c_proj(y)", 1, 2),
    ("aten::view", "attn.c_proj", "return self.c_proj(y)", 1, 0),
    ("aten::add.Tensor", "", "x = x + self.attn(self.ln_1(x))", 1, 1),
    ("aten::native_layer_norm", "ln_2", "h = self.ln_2(x)", 3, 2),
    ("aten::t", "mlp.c_fc", "h = self.c_fc(h)", 1, 0),
    ("aten::addmm", "mlp.c_fc", "h = self.c_fc(h)", 1, 2),
    ("aten::view", "mlp.c_fc", "h = self.c_fc(h)", 1, 0),
    ("aten::gelu", "mlp", "h = F.gelu(h, approximate='tanh')", 1, 0),
    ("aten::t", "mlp.c_proj", "return self.c_proj(h)", 1, 0),
    ("aten::addmm", "mlp.c_proj", "return self.c_proj(h)", 1, 2),
    ("aten::view", "mlp.c_proj", "return self.c_proj(h)", 1, 0),
    ("aten::add.Tensor", "", "x = x + self.mlp(self.ln_2(x))", 1, 1),
]

_BWD_OPS = [
    "aten::mm", "aten::t", "aten::sum.dim_IntList", "aten::view", "aten::detach", "aten::gelu_backward",
    "aten::native_layer_norm_backward", "aten::add.Tensor", "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    "aten::transpose.int", "aten::clone", "aten::_unsafe_view", "aten::cat", "aten::mul.Tensor",
]
_OPT_OPS = [
    "aten::mul_.Tensor", "aten::lerp_.Scalar", "aten::addcmul_.Tensor", "aten::sqrt", "aten::div.Tensor",
    "aten::add_.Scalar", "aten::addcdiv_.Tensor", "aten::add_.Tensor", "aten::detach",
]
_SHAPES = [
    [4, 128, 256], [512, 256], [512, 768], [768, 256], [256, 768], [256], [768], [4, 128, 768],
    [4, 4, 128, 64], [4, 128, 1024], [512, 1024], [1024, 256], [256, 1024], [1024], [4, 128],
    [512], [4, 4, 128], [4, 128, 4, 64], [4, 128, 1], [1024, 768],
]


class _Template:
    """One op of a template: everything but values and ids."""

    __slots__ = ("op", "sub", "line", "code", "outs", "extra_in", "bw")

    def __init__(self, op: str, sub: str, line: int, code: str, outs: list[list[int]], extra_in: list[list[int]], bw: bool):
        self.op, self.sub, self.line, self.code, self.outs, self.extra_in, self.bw = op, sub, line, code, outs, extra_in, bw


def _templates(rng: random.Random) -> dict[str, list[_Template]]:
    shapes = _SHAPES
    fwd = []
    for k, (op, sub, code, nout, nextra) in enumerate(_FWD_LAYER):
        outs = [rng.choice(shapes) for _ in range(nout)]
        fwd.append(_Template(op, sub, 40 + k, code, outs, [rng.choice(shapes) for _ in range(nextra)], False))
    # Backward of one layer: 280 ops over backward op names and shapes (autograd's order).
    bwd = []
    for k in range(280):
        op = rng.choice(_BWD_OPS)
        bwd.append(_Template(op, rng.choice(["attn.c_attn", "attn.c_proj", "attn", "mlp.c_fc", "mlp.c_proj", "mlp", "ln_1", "ln_2", ""]),
                             40 + (k * 7) % 28, "x = x + self.mlp(self.ln_2(x))",
                             [rng.choice(shapes) for _ in range(3 if "backward" in op and "gelu" not in op else 1)],
                             [rng.choice(shapes) for _ in range(rng.randint(0, 2))], True))
    # Optimizer: AdamW's per-parameter loop (12 parameters per layer, 9 ops each).
    opt = []
    for _ in range(12):
        shape = rng.choice(shapes[1:7] + shapes[10:14])
        for k, op in enumerate(_OPT_OPS):
            opt.append(_Template(op, "", 200 + k, "opt.step()", [shape], [shape] * (1 if k in (1, 2, 6, 7) else 0), False))
    head = [
        _Template("aten::embedding", "wte", 20, "x = self.wte(idx) + self.wpe(pos)", [[4, 128, 256]], [[1024, 256]], False),
        _Template("aten::arange", "", 19, "pos = torch.arange(T)", [[128]], [], False),
        _Template("aten::embedding", "wpe", 20, "x = self.wte(idx) + self.wpe(pos)", [[128, 256]], [[128, 256]], False),
        _Template("aten::add.Tensor", "", 20, "x = self.wte(idx) + self.wpe(pos)", [[4, 128, 256]], [[128, 256]], False),
    ]
    tail = [
        _Template("aten::native_layer_norm", "ln_f", 24, "x = self.ln_f(x)", [[4, 128, 256], [4, 128, 1], [4, 128, 1]], [[256], [256]], False),
        _Template("aten::t", "lm_head", 25, "logits = self.lm_head(x)", [[256, 1024]], [], False),
        _Template("aten::mm", "lm_head", 25, "logits = self.lm_head(x)", [[512, 1024]], [[256, 1024]], False),
        _Template("aten::_log_softmax", "", 90, "loss = F.cross_entropy(logits, targets)", [[512, 1024]], [], False),
        _Template("aten::nll_loss_forward", "", 90, "loss = F.cross_entropy(logits, targets)", [[], []], [[512]], False),
        _Template("aten::ones_like", "", 91, "loss.backward()", [[]], [], True),
        _Template("aten::nll_loss_backward", "", 91, "loss.backward()", [[512, 1024]], [[512]], True),
        _Template("aten::_log_softmax_backward_data", "", 91, "loss.backward()", [[512, 1024]], [], True),
        _Template("aten::mm", "lm_head", 91, "loss.backward()", [[1024, 256]], [[512, 256]], True),
    ]
    return {"fwd": fwd, "bwd": bwd, "opt": opt, "head": head, "tail": tail}


def _step_plan(t: dict[str, list[_Template]], layers: int) -> list[tuple[_Template, str, int]]:
    """One training step: (template op, module path, depth) in recording order."""
    plan: list[tuple[_Template, str, int]] = []
    for tp in t["head"]:
        plan.append((tp, f"GPT.{tp.sub}" if tp.sub else "GPT", 2 if tp.sub else 1))

    def mod(layer: int, sub: str) -> tuple[str, int]:
        base = f"GPT.blocks.{layer}"
        return (f"{base}.{sub}", 3 + sub.count(".") + 1) if sub else (base, 3)

    for layer in range(layers):
        for tp in t["fwd"]:
            plan.append((tp, *mod(layer, tp.sub)))
    for tp in t["tail"]:
        plan.append((tp, f"GPT.{tp.sub}" if tp.sub else "GPT", 2 if tp.sub else 1))
    for layer in reversed(range(layers)):
        for tp in t["bwd"]:
            plan.append((tp, *mod(layer, tp.sub)))
    for _ in range(layers):
        for tp in t["opt"]:
            plan.append((tp, None, 0))  # type: ignore[arg-type]
    return plan


def _numel(shape: list[int]) -> int:
    return math.prod(shape) if shape else 1


def _fp(rng: random.Random, n: int) -> dict[str, Any]:
    l1 = n * (0.05 + rng.random())
    return {"sum": l1 * (rng.random() * 2 - 1), "l1": l1, "l2": math.sqrt(l1 * (0.2 + rng.random())),
            "max": 0.5 + 4 * rng.random(), "nan": 0, "inf": 0, "n": n}


def _scaled(fp: dict[str, Any], factor: float) -> dict[str, Any]:
    return {**fp, "sum": fp["sum"] * factor + 0.02 * fp["l1"], "l1": fp["l1"] * factor, "l2": fp["l2"] * factor,
            "max": fp["max"] * factor}


def _header(side: str) -> dict[str, Any]:
    return {
        "tracediff": "0.1.0", "torch": "2.13.0+cpu", "python": "3.11.7", "platform": "Linux-x86_64", "host": "bench",
        "device": "cpu", "backend": "eager" if side == "a" else "synthetic-b", "command": ["train.py"],
        "cwd": "/home/user/project", "seed": 0, "fingerprint": ["sum", "l1", "l2", "max", "nan", "inf", "n"],
        "exact": False, "settings": {"default_dtype": "torch.float32", "num_threads": 2}, "rank": 0, "world_size": 1,
        "started": "2026-01-01T00:00:00+00:00", "synthetic": VERSION,
    }


def generate(out_dir: str | Path, n: int, edits: int = 400, seed: int = 1234, layers: int = 12,
             progress: Any = None) -> dict[str, Any]:
    """Write out_dir/a.jsonl, out_dir/b.jsonl and out_dir/meta.json; returns meta."""
    started = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    plan = _step_plan(_templates(rng), layers)
    distinct = len({(base_op(tp.op), tuple(map(tuple, tp.outs))) for tp, _, _ in plan})

    planted = n // 2
    while plan[planted % len(plan)][0].op not in ("aten::addmm", "aten::mm", "aten::gelu"):
        planted += 1
    # Scattered edits, at least 50 records apart and 2,000 away from the planted record.
    positions: set[int] = set()
    while len(positions) < edits:
        p = rng.randrange(100, n - 100)
        if abs(p - planted) > 2000 and not any(q in positions for q in range(p - 50, p + 51)):
            positions.add(p)
    ordered = sorted(positions)
    inserts = set(ordered[0::2])  # B gets an extra record before A's record p
    deletes = set(ordered[1::2])  # B lacks A's record p

    weights: dict[tuple, tuple[int, dict]] = {}  # (slot) -> (id, fp): long-lived tensors
    next_id = 0
    prev_a: dict[str, Any] | None = None  # previous record's output 0, as A and B saw it
    prev_b: dict[str, Any] | None = None
    wa = TraceWriter(out / "a.jsonl", _header("a"))
    wb = TraceWriter(out / "b.jsonl", _header("b"))
    ia = ib = 0
    planted_b = -1
    ins_id = 10**9
    for k in range(n):
        tp, module, depth = plan[k % len(plan)]
        layer_slot = (k % len(plan), module)
        # Inputs: the previous op's output, then weights (stable ids, stable values within a step).
        ins_a: list[dict[str, Any]] = []
        ins_b: list[dict[str, Any]] = []
        if prev_a is not None and tp.op != "aten::arange":
            ins_a.append({**prev_a, "a": "self"})
            ins_b.append({**prev_b, "a": "self"})  # type: ignore[dict-item]
        for e, shape in enumerate(tp.extra_in):
            key = (layer_slot, e)
            if key not in weights:
                weights[key] = (next_id, _fp(rng, _numel(shape)))
                next_id += 1
            wid, wfp = weights[key]
            t = {"a": f"arg{e + 1}", "id": wid, "v": 1, "dt": "float32", "sh": shape, "dev": "cpu", "fp": wfp}
            ins_a.append(t)
            ins_b.append(t)
        outs_a = []
        outs_b = []
        for e, shape in enumerate(tp.outs):
            fp = _fp(rng, _numel(shape))
            t = {"a": str(e), "id": next_id, "v": 0, "dt": "float32", "sh": shape, "dev": "cpu", "fp": fp}
            next_id += 1
            outs_a.append(t)
            outs_b.append(t if k < planted else {**t, "fp": _scaled(fp, 1.01)})
        rec_common = {"op": tp.op, "d": depth, "m": module, "src": f"model.py:{tp.line}", "path": _PATH, "code": tp.code}

        if k in inserts:
            shape = tp.outs[0]
            extra = {"a": "0", "id": ins_id, "v": 0, "dt": "float32", "sh": shape, "dev": "cpu", "fp": _fp(rng, _numel(shape))}
            ins_id += 1
            rec = {"t": "op", "i": ib, **{**rec_common, "op": "aten::_to_copy"}, "in": ins_b[:1], "out": [extra]}
            wb.write(rec)
            ib += 1

        rec_a = {"t": "op", "i": ia, **rec_common, "in": ins_a, "out": outs_a}
        if tp.bw:
            rec_a["bw"] = True
        wa.write(rec_a)
        if k == planted:
            planted_a = ia
            planted_op, planted_src = tp.op, f"model.py:{tp.line}"
        ia += 1
        if k not in deletes:
            rec_b = {"t": "op", "i": ib, **rec_common, "in": ins_b, "out": outs_b}
            if tp.bw:
                rec_b["bw"] = True
            wb.write(rec_b)
            if k == planted:
                planted_b = ib
            ib += 1
        prev_a, prev_b = outs_a[0], outs_b[0]
        if progress is not None and k and k % 200_000 == 0:
            progress(f"  synth: {k:,}/{n:,} records ({time.perf_counter() - started:.0f} s)")

    footer = {"ops": n, "compile_calls": 0, "dropped_compile_options": [], "elapsed_s": 0.0, "error": None}
    wa.close(footer)
    wb.close({**footer, "ops": ib})
    meta = {
        "version": VERSION, "n": n, "edits": edits, "seed": seed, "layers": layers,
        "records_a": ia, "records_b": ib, "insertions": len(inserts), "deletions": len(deletes),
        "distinct_keys": distinct, "step_length": len(plan),
        "planted": {"index_a": planted_a, "index_b": planted_b, "op": planted_op, "source": planted_src},
        "bytes_a": (out / "a.jsonl").stat().st_size, "bytes_b": (out / "b.jsonl").stat().st_size,
        "generate_s": round(time.perf_counter() - started, 1),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta


def cached(root: str | Path, n: int, edits: int = 400, seed: int = 1234, progress: Any = None) -> tuple[Path, dict[str, Any]]:
    """The trace pair for (VERSION, trace schema, n, edits, seed) under root, generated on first use
    (a schema change makes old cached pairs unreadable, so it is part of the key)."""
    from tracediff.trace.schema import SCHEMA_VERSION

    out = Path(root) / f"{VERSION}-schema{SCHEMA_VERSION}-n{n}-e{edits}-s{seed}"
    meta_path = out / "meta.json"
    # Pairs cached before traces had digest indexes (trace/digest_index.py) are made again.
    files = ("a.jsonl", "b.jsonl", "a.jsonl.idx", "b.jsonl.idx")
    if meta_path.exists() and all((out / name).exists() for name in files):
        meta = json.loads(meta_path.read_text())
        meta["cached"] = True
        return out, meta
    if progress:
        progress(f"  synth: generating {n:,}-record trace pair in {out} (cached for later runs)")
    meta_path.unlink(missing_ok=True)  # meta.json is written last: its presence marks a complete pair
    meta = generate(out, n, edits=edits, seed=seed, progress=progress)
    meta["cached"] = False
    return out, meta
