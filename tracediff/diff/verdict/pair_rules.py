"""The rules that judge one compared pair: a record of A and the record of B the aligner paired with it.

`judge` tries `PAIR_RULES` in order; the first that applies says what the pair is (a `Step`):

- `Diverged`: the first divergence, placed. Its `Divergence.rule` names the rule that placed it, which
  may be one a pair rule asked (changed_in_b.py, walked_back.py, updates.py): that name goes to the report.
- `NotOnePair`: the two records hold other quantities; the pair is dropped and A's record walked back over.
- `Carried`: the outputs differ by amplified noise (marked as such): no cause, not agreeing either.
- `Agreed`: the outputs agree.

Each rule's docstring gives the case it handles with a minimal example. docs/design.md §7 lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from tracediff.diff.amplified import Amplified, Amplifier, amplifies, within_a_products_reach
from tracediff.diff.compare import TensorComparison, TensorDiff
from tracediff.diff.computed import ComputedValues
from tracediff.diff.place import Place
from tracediff.diff.precision import preserves_values
from tracediff.diff.verdict.a_side import ASide, places_of
from tracediff.diff.verdict.b_side import BSideView
from tracediff.diff.verdict.changed_in_b import (
    changed_after_its_pair,
    changed_behind_unread_writes,
    changed_below_the_absolute_tolerance,
    changed_in_between,
    made_in_b_behind_views,
    made_only_in_b,
)
from tracediff.diff.verdict.comparer import Comparer, differing, far_apart, input_pair, kind_of, out_pair, worst_of
from tracediff.diff.verdict.divergence import Divergence
from tracediff.diff.verdict.loose import LooseEntries, LooseEntry, moved
from tracediff.diff.verdict.pairing import fed_by_b_only, inputs_mismatch, same_op
from tracediff.diff.verdict.refinements import unsure_if_inputs_moved
from tracediff.diff.verdict.updates import changed_before_an_unread_update
from tracediff.diff.verdict.walked_back import amplified_reached, carried_by_views, shown_by_a_move, walked_back
from tracediff.trace.schema import KERNEL, OP, REGION, Tensor, TraceRecord

Passed = list[tuple[Tensor, Tensor, TensorComparison]]  # agreeing tensor pairs (A's, B's, how)


@dataclass
class Walk:
    """What the walk over A knows when it judges a pair: both traces' producers, the values B computed,
    amplified noise, changes that came in below the tolerance, and where A's compiled regions are."""

    comparer: Comparer
    a_side: ASide
    b_side: BSideView
    b_values: ComputedValues
    amplified: Amplified
    loose_entries: LooseEntries
    seen_regions: bool = False
    open_regions: int = 0

    @property
    def outside_regions(self) -> bool:
        """A runs the current record outside every compiled region of a program that has them."""
        return self.seen_regions and not self.open_regions


@dataclass
class Pair:
    """A compared pair: A's record `a`, B's record `b`, and how their tensors compare."""

    a: TraceRecord
    b: TraceRecord
    by_name: bool  # tensors matched by argument name (else by position)
    value_tier: bool  # paired by value (align.VALUE_TIER), not on op and shapes
    out_diffs: list[TensorDiff]
    out_passed: Passed
    in_diffs: list[TensorDiff]  # inputs that differ, but for differences an earlier op amplified
    passed: Passed  # agreeing inputs
    carried: list[TensorDiff]  # inputs that differ by amplified sub-tolerance noise
    carried_origins: list[Amplifier]  # the amplifier behind each of `carried`
    loose_entry: LooseEntry | None  # the change below the tolerance its inputs carry

    @property
    def kernel(self) -> bool:
        """One side is a generated kernel: buffers compare without the order-dependent sketch."""
        return KERNEL in (self.a["t"], self.b["t"])

    @property
    def fused_kernel(self) -> bool:
        """B's record is a kernel of several ops, or of one piece of A's op's decomposition (tanh_backward's
        last `mul`): its value is A's op's, its inputs are not A's op's inputs."""
        b = self.b
        return b["t"] == KERNEL and (len(b.get("fuses") or ()) != 1 or not same_op(self.a, b))

    @property
    def made_inside(self) -> bool:
        """Outputs made by records inside it: a compiled region's exit, or a fused kernel."""
        return (self.a["t"] == REGION and self.a["ev"] == "exit") or self.fused_kernel

    @property
    def outputs_only_differ(self) -> bool:
        """Its outputs differ while its inputs agree (but for amplified noise)."""
        return bool(self.out_diffs) and not self.in_diffs

    def differing_outputs(self) -> list[Tensor]:
        return differing(self.a, self.out_diffs)


@dataclass(frozen=True)
class Diverged:
    divergence: Divergence
    loose_entry: LooseEntry | None  # the change below the tolerance it may have grown from


@dataclass(frozen=True)
class NotOnePair:
    pass


@dataclass(frozen=True)
class Carried:
    pass


@dataclass(frozen=True)
class Agreed:
    after_an_update: bool  # look for an update whose writes were not fingerprinted (mark_an_unread_update)


Step = Diverged | NotOnePair | Carried | Agreed
PairRule = Callable[[Pair, Walk], Step | None]


def _diverged(pair: Pair, divergence: Divergence | None) -> Diverged | None:
    return Diverged(divergence, pair.loose_entry) if divergence is not None else None


def changed_before_an_unread_update_rule(pair: Pair, walk: Walk) -> Step | None:
    """Inputs that differ only by amplification from an update whose writes were not fingerprinted
    (AdamW's foreach step): B changed, by a record only B runs, a value behind that update.

    Example: a pass scales a bias gradient by 1.01 (within atol: its values are ~1e-4); the foreach
    `_foreach_addcdiv_` writes the weight, unseen; the next forward's `addmm` reads it differing."""
    if not pair.carried or pair.in_diffs:
        return None
    return _diverged(pair, changed_before_an_unread_update(pair.a, pair.b, pair.carried, pair.carried_origins,
                                                           pair.by_name, walk.a_side, walk.b_side))


def kernel_of_another_quantity(pair: Pair, walk: Walk) -> Step | None:
    """Paired on op and shapes with a fused kernel writing another quantity, while B computed A's very
    value elsewhere: no pair.

    Example: GELU's backward is several `mul`s at one line; B's kernel runs them in another order, and the
    kernel paired with A's third `mul` writes what A's second computes."""
    a, out_diffs = pair.a, pair.out_diffs
    if not (pair.fused_kernel and out_diffs and not pair.value_tier and a["t"] == OP and far_apart(out_diffs)):
        return None
    tolerance_of = partial(walk.comparer.precision.of, op=a["op"], module=a.get("m"))
    return NotOnePair() if walk.b_values.hold_all(pair.differing_outputs(), tolerance_of) else None


def compiled_outputs_agree(pair: Pair, walk: Walk) -> Step | None:
    """A compiled region's exit or a fused kernel whose outputs agree.

    Example: `Net.forward`'s exit under inductor returns the same logits as eager."""
    return Agreed(after_an_update=False) if pair.made_inside and not pair.out_diffs else None


def fused_kernel_reads_amplified_values(pair: Pair, walk: Walk) -> Step | None:
    """A fused kernel whose outputs differ and which reads amplified noise: amplified too (its ops, fused,
    were never seen).

    Example: AdamW's `sqrt(v)` step amplified rounding in a weight; B's kernel fusing the next layer's
    `addmm` epilogue with GELU reads it."""
    if not (pair.made_inside and pair.out_diffs and pair.fused_kernel):
        return None
    origin = walk.amplified.origin_of_reads(pair.a)
    if origin is None:
        return None
    walk.amplified.mark(_bad_outputs(pair), origin)
    return Carried()


def amplified_noise_reaches_a_region_rule(pair: Pair, walk: Walk) -> Step | None:
    """A compiled region's outputs differ only by amplified sub-tolerance noise, beyond the tolerance: never
    a match. Blamed on the amplifier, or reported as it would have been on the spot where the amplifier
    was a matrix product within reach of its factors' differences.

    Example: a loss returned by a compiled step, 2x the tolerance off, made of an `mm` whose factors
    agreed within the tolerance."""
    if not (pair.made_inside and pair.out_diffs and pair.a["t"] == REGION):
        return None
    bad = _bad_outputs(pair)
    origins = [walk.amplified.origin(t) for t in bad]
    if not bad or not all(origins):
        return None
    origin = origins[0]
    assert origin is not None
    if origin.reported_as is not None:
        # Where its sign only kept a close case from failing a match: as it would have been on the spot,
        # with the loose entry it read then.
        divergence, entry = origin.reported_as
        return Diverged(divergence, entry)
    return Diverged(amplified_reached(pair.a, pair.b, origin, pair.out_diffs), pair.loose_entry)


def walk_back_from_a_compiled_output(pair: Pair, walk: Walk) -> Step | None:
    """A compiled region's or fused kernel's output differs: the candidates are the records inside it,
    found by walking back from the output to values that agree (then the rules changed_after_its_pair,
    made_only_in_b and walked_back place it).

    Example: a kernel fusing `cos` and `mul` writes another value; the walk back from its output reaches
    A's `cos` and `mul`, which no record of B pairs with."""
    if not (pair.made_inside and pair.out_diffs):
        return None
    a, b, diffs = pair.a, pair.b, pair.out_diffs
    bad = [t for t in _bad_outputs(pair) if walk.amplified.origin(t) is None]
    if a["t"] == OP:
        walk.a_side.unknown(a, candidate=True)  # the chain's last op is a candidate too
    candidates = walk.a_side.walk_back(bad)
    tb = out_pair(a, b, worst_of(diffs))
    if candidates:
        found = changed_after_its_pair(a, b, tb, places_of(candidates), diffs, walk.a_side, walk.b_side, walk.comparer)
    else:
        found = made_only_in_b(a, b, diffs, walk.a_side, walk.b_side)
    return Diverged(found or walked_back(a, b, candidates, diffs, inputs_agree=True), pair.loose_entry)


def reads_amplified_values(pair: Pair, walk: Walk) -> Step | None:
    """Outputs differ only because the inputs carry amplified noise: amplified too, not a cause.

    Example: the `addmm` after AdamW's step reads a weight 1e-6 off, and its output is 2e-5 off."""
    if not (pair.outputs_only_differ and pair.carried):
        return None
    walk.amplified.mark(pair.differing_outputs(), pair.carried_origins[0])
    return Carried()


def moves_values(pair: Pair, walk: Walk) -> Step | None:
    """A view, slice or copy whose outputs differ while its inputs agree: its input held the difference,
    within the tolerance over the whole tensor (a slice keeps the part where it sits). Never the cause:
    amplified noise where there is some, else the ops that made its input (shown_by_a_move).

    Example: `x[:, -1]` of a hidden state agreeing within the tolerance, its last position 1% off."""
    a = pair.a
    if not (pair.outputs_only_differ and a["t"] == OP and preserves_values(a)):
        return None
    if walk.amplified.first is not None:
        walk.amplified.mark(pair.differing_outputs(), walk.amplified.first)
        return Carried()
    return _diverged(pair, shown_by_a_move(a, pair.b, pair.passed, pair.out_diffs, walk.a_side))


def inputs_not_comparable(pair: Pair, walk: Walk) -> Step | None:
    """Outputs differ, and the inputs cannot be compared one to one (other shapes or dtypes): never
    claimed to agree. Named at the op, unless B changed a value after its pair (changed_after_its_pair).

    Example: A's `addmm(bias, x, w.t())` paired with B's `addmm` reading a padded weight."""
    a, b = pair.a, pair.b
    if not (pair.outputs_only_differ and inputs_mismatch(a, b, pair.by_name)):
        return None
    worst = worst_of(pair.out_diffs)
    note = (f"outputs differ; its inputs cannot be compared one to one with those of B's "
            f"{Place.of(b).op} (other shapes or dtypes)")
    here = Place.of(a)
    return _diverged(pair, changed_after_its_pair(a, b, out_pair(a, b, worst), (here,), pair.out_diffs, walk.a_side,
                                                  walk.b_side)
                     or Divergence(kind_of(worst), here, Place.of(b), (here,), worst, False, note,
                                   rule="inputs_not_comparable"))


def amplifies_noise(pair: Pair, walk: Walk) -> Step | None:
    """Inputs agree only within the tolerance and the op may amplify that (amplified.amplifies says why):
    marked as amplified noise, judged by whether it reaches a compiled region's output. Unless B made such
    an input by changing a value far from zero (changed_below_the_absolute_tolerance).

    Example: AdamW's `div` of two states agreeing to 1e-7 gives an update 1e-4 off."""
    if not pair.outputs_only_differ or _not_judged(pair):
        return None
    a, b = pair.a, pair.b
    why = amplifies(a, b, pair.passed, walk.outside_regions)
    if why is None:
        return None
    changed = changed_below_the_absolute_tolerance(a, b, pair.passed, pair.out_diffs, walk.a_side, walk.b_side)
    if changed is not None:
        return Diverged(changed, pair.loose_entry)
    # Possibly ill-conditioned on noise below the tolerance: judged by whether it reaches a region's exit.
    walk.amplified.mark(pair.differing_outputs(), Amplifier(Place.of(a), Place.of(b), worst_of(pair.out_diffs), why))
    walk.loose_entries.carry(a, [*pair.differing_outputs(), *moved(pair.out_passed)], pair.loose_entry)
    return Carried()


def inputs_agree_outputs_differ(pair: Pair, walk: Walk) -> Step | None:
    """The op's own inputs agree and its outputs differ: the op computes differently, pinned by value.
    A matrix product barely beyond the tolerance within reach of its factors' differences is held back
    and reported so only if its difference reaches a compiled region's output.

    Example: a backend computes `cos` as `sin`: inputs equal, outputs far apart."""
    if not pair.outputs_only_differ:
        return None
    a, b = pair.a, pair.b
    worst = worst_of(pair.out_diffs)
    on_the_spot = unsure_if_inputs_moved(
        Divergence(kind_of(worst), Place.of(a), Place.of(b), (Place.of(a),), worst, True,
                   "inputs agree, outputs differ", rule="inputs_agree_outputs_differ"), pair.passed)
    reach = None if _not_judged(pair) else within_a_products_reach(a, pair.passed, worst)
    if reach is None:
        return Diverged(on_the_spot, pair.loose_entry)
    walk.amplified.mark(pair.differing_outputs(), Amplifier(Place.of(a), Place.of(b), worst, reach,
                                                            reported_as=(on_the_spot, pair.loose_entry)))
    walk.loose_entries.carry(a, [*pair.differing_outputs(), *moved(pair.out_passed)], pair.loose_entry)
    return Carried()


def crossed_pair(pair: Pair, walk: Walk) -> Step | None:
    """Inputs differ, but B computed these very inputs and fed them to another record of the same op and
    shapes: no pair. Not when B made the input it read with an op only B runs (B changed the value).

    Example: a compiled backward computes the gradients of k and v in the other order; the aligner pairs
    A's `mm` for k's gradient with B's for v's."""
    a, b = pair.a, pair.b
    if not _input_differs(pair) or pair.value_tier or a["t"] != OP:
        return None
    # A region's record has no op: its name stands for one (never a KeyError on a region).
    tolerance_of = partial(walk.comparer.precision.of, op=a.get("op") or a.get("name") or "", module=a.get("m"))
    if fed_by_b_only(a, b, pair.in_diffs, walk.b_side, pair.by_name, tolerance_of):
        return None
    return NotOnePair() if walk.b_values.hold_all(_bad_inputs(pair), tolerance_of) else None


def input_differs(pair: Pair, walk: Walk) -> Step | None:
    """An input already differs: the cause lies upstream. Walk back from it through A's records that no
    record of B pairs with; then, in order: only views between (made_in_b_behind_views, carried_by_views),
    candidates (changed_after_its_pair, changed_behind_unread_writes, walked_back), or none: B changed the
    value after A made it, or it is a program input (changed_in_between).

    Example: `sin` is fused into a kernel with `mul`; A's `mul` reads a differing `sin` that no record of
    B pairs with: the walk back names `sin`."""
    if not _input_differs(pair):
        return None
    a, b, a_side, b_side = pair.a, pair.b, walk.a_side, walk.b_side
    diffs = pair.out_diffs or pair.in_diffs
    candidates = a_side.walk_back(_bad_inputs(pair))
    _, tb = input_pair(a, b, worst_of(pair.in_diffs), pair.by_name)
    if candidates and all(c.moves for c in candidates):
        # Views cannot change a value: if B changed it with records only B ran, name those.
        made_in_b = b_side.walk_back(tb) if tb is not None else []
        found = (made_in_b_behind_views(a, b, pair.in_diffs, candidates, a_side, made_in_b, b_side)
                 or carried_by_views(a, b, candidates, diffs, a_side, made_in_b)
                 or walked_back(a, b, candidates, diffs, inputs_agree=False))
    elif candidates:
        found = (changed_after_its_pair(a, b, tb, places_of(candidates), diffs, a_side, b_side, walk.comparer)
                 or changed_behind_unread_writes(a, b, tb, candidates, diffs, a_side, b_side)
                 or walked_back(a, b, candidates, diffs, inputs_agree=False))
    else:
        found = changed_in_between(a, b, pair.in_diffs, a_side, b_side, pair.by_name)
    return Diverged(found, pair.loose_entry)


def outputs_agree(pair: Pair, walk: Walk) -> Step | None:
    """The outputs agree (the last rule: whatever no earlier rule took).

    Example: `addmm` under eager and inductor's extern `mm` plus bias, 1e-7 apart."""
    return Agreed(after_an_update=True)


# In order: the first that applies judges the pair.
PAIR_RULES: tuple[PairRule, ...] = (
    changed_before_an_unread_update_rule,
    kernel_of_another_quantity,
    compiled_outputs_agree,
    fused_kernel_reads_amplified_values,
    amplified_noise_reaches_a_region_rule,
    walk_back_from_a_compiled_output,
    reads_amplified_values,
    moves_values,
    inputs_not_comparable,
    amplifies_noise,
    inputs_agree_outputs_differ,
    crossed_pair,
    input_differs,
    outputs_agree,
)


def judge(pair: Pair, walk: Walk) -> Step:
    for rule in PAIR_RULES:
        step = rule(pair, walk)
        if step is not None:
            return step
    raise AssertionError("outputs_agree takes every pair")  # pragma: no cover


def _bad_outputs(pair: Pair) -> list[Tensor]:
    args = {d.arg for d in pair.out_diffs}
    return [t for t in pair.a.get("out", []) if t["a"] in args]


def _bad_inputs(pair: Pair) -> list[Tensor]:
    args = {d.arg for d in pair.in_diffs}
    return [t for t in pair.a.get("in", []) if t["a"] in args]


def _input_differs(pair: Pair) -> bool:
    return bool(pair.in_diffs) and (bool(pair.out_diffs) or pair.a["t"] == REGION)


def _not_judged(pair: Pair) -> bool:
    """Not judged as an amplifier or a product: inputs not comparable, or a NaN/Inf difference."""
    return inputs_mismatch(pair.a, pair.b, pair.by_name) or worst_of(pair.out_diffs).comparison.nonfinite
