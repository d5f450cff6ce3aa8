"""Per-op noise: how far the reference's own float32 values are from a float64 re-run.

`tracediff run --calibrate` records the reference a second time with every op
computed in float64 (record/upcast.py). For each tensor of the reference
trace, the noise is the largest relative difference of its fingerprint
statistics from the float64 run's: the rounding error the reference carries
at that point, accumulated through everything before it. A candidate run
that computes the same math in another order carries an error of similar
size, so a difference between the two runs is judged against
`max(tolerance, factor * noise)` instead of the tolerance alone.

The two traces are paired like any two recordings, on keys without the dtype
(op family and output shapes): the float64 run has the same ops, plus the
casts autograd inserts where float64 gradients meet float32 parameters.
Tensors without a partner, or with NaN/Inf, get no noise and keep the plain
tolerance.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracediff.diff.compare import sketch_distance
from tracediff.diff.sequence import align_sequences
from tracediff.diff.skeleton import alignable, chain_op
from tracediff.op_names import base_op, is_in_place
from tracediff.trace.reader import Trace
from tracediff.trace.schema import REGION, Fingerprint, Tensor, TraceRecord

# (reference record index, "input" | "output", argument name)
TensorKey = tuple[int, str, str]


@dataclass
class Noise:
    """Relative noise of the reference's tensors, measured against a float64 re-run."""

    trace: str
    factor: float
    per_tensor: dict[TensorKey, float] = field(default_factory=dict)
    paired: int = 0  # reference records paired with a record of the float64 run
    records: int = 0  # alignable records of the reference

    def get(self, index: int, side: str, arg: str) -> float | None:
        return self.per_tensor.get((index, side, arg))

    def summary(self) -> dict[str, Any]:
        values = sorted(self.per_tensor.values())
        return {
            "method": "reference re-run with every floating op in float64 (record/upcast.py); "
                      "noise = largest relative fingerprint difference per tensor",
            "noise_trace": self.trace,
            "factor": self.factor,
            "paired_records": self.paired,
            "records": self.records,
            "tensors": len(values),
            "median_noise": values[len(values) // 2] if values else None,
            "max_noise": values[-1] if values else None,
        }


def _key(record: TraceRecord) -> tuple:
    if record["t"] == REGION:
        return ("region", record["ev"], record["name"], record["r"], record["call"])
    shapes = tuple(tuple(t["sh"]) for t in record.get("out") or ())
    return (base_op(chain_op(record) or record.get("name", "")), shapes)


def _alignable(path: str | Path) -> Iterator[TraceRecord]:
    return (r for r in Trace(path) if alignable(r))


_STATS = (("sum", "l1"), ("l1", "l1"), ("l2", "l2"), ("max", "max"))


def relative_noise(a: Fingerprint | None, c: Fingerprint | None) -> float | None:
    """Largest |a - c| / scale over the fingerprint statistics (sum relative to l1); None if not comparable."""
    if not a or not c or a.get("n") != c.get("n") or a.get("nan") or a.get("inf") or c.get("nan") or c.get("inf"):
        return None
    worst = 0.0
    stats_a: Mapping[str, Any] = a  # read by the statistics' names in `_STATS`
    stats_c: Mapping[str, Any] = c
    for stat, scale_stat in _STATS:
        if stat not in a or stat not in c:
            return None
        scale = max(abs(stats_a[scale_stat]), abs(stats_c[scale_stat]))
        if scale > 0:
            worst = max(worst, abs(stats_a[stat] - stats_c[stat]) / scale)
    distance, scale = sketch_distance(a, c), max(abs(a["l2"]), abs(c["l2"]))
    if distance is not None and scale > 0:
        worst = max(worst, distance / scale)
    return worst


def _value(t: Tensor) -> tuple[int | None, int | None]:
    return t.get("id"), t.get("v")


def _floating(t: Tensor) -> bool:
    return str(t.get("dt", "")).startswith(("float", "bfloat", "complex"))


def measure_noise(reference: str | Path, float64_run: str | Path, factor: float) -> Noise:
    """Pair the reference with its float64 re-run and measure each tensor's noise."""
    noise = Noise(str(float64_run), factor)
    for key, t, partner_t in paired_tensors(reference, float64_run, noise):
        value = relative_noise(t.get("fp"), partner_t.get("fp"))
        if value is not None:
            noise.per_tensor[key] = value
    return noise


def paired_tensors(reference: str | Path, float64_run: str | Path,
                   counts: Noise | None = None) -> Iterator[tuple[TensorKey, Tensor, Tensor]]:
    """Each floating tensor of the reference with its partner in the float64 re-run, in trace order.

    `counts`, if given, gets the numbers of paired and alignable records.
    """
    keys_a = [_key(r) for r in _alignable(reference)]
    keys_c = [_key(r) for r in _alignable(float64_run)]
    partner = dict(align_sequences(keys_a, keys_c))
    if counts is not None:
        counts.paired, counts.records = len(partner), len(keys_a)
    records_c = _alignable(float64_run)
    position_c = -1
    current_c: TraceRecord | None = None
    garbage: set[tuple[int | None, int | None]] = set()  # values of uninitialized memory (torch.empty): no noise to measure
    i = -1
    for record in Trace(reference):
        outs = record.get("out") or ()
        garbage.update(_value(t) for t in outs if t.get("uninit"))
        if not alignable(record):  # detach/alias of garbage (nn.Parameter(torch.empty(...))) is garbage too
            if any(_value(t) in garbage for t in record.get("in") or ()):
                garbage.update(_value(t) for t in outs)
            continue
        i += 1
        j = partner.get(i)
        if j is None:
            continue
        while position_c < j:  # pairs are increasing in both traces: stream C alongside A
            current_c = next(records_c)
            position_c += 1
        assert current_c is not None
        # What an in-place op overwrites (uniform_ on a new parameter) may be garbage: keep the plain tolerance.
        in_place = is_in_place(str(record.get("op", "")))
        for side, tensors, tensors_c in (("input", record.get("in"), current_c.get("in")),
                                         ("output", record.get("out"), current_c.get("out"))):
            by_name = {t["a"]: t for t in tensors_c or ()}
            for t in tensors or ():
                partner_t = by_name.get(t["a"])
                if partner_t is None or not _floating(t) or t.get("uninit") or _value(t) in garbage:
                    continue
                if in_place and side == "input" and t["a"] == "self":
                    continue
                yield (record["i"], side, t["a"]), t, partner_t
