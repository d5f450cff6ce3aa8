"""Updates whose writes are not fingerprinted (a foreach optimizer step writing the weights in place on
CUDA): what they wrote is taken for amplified noise, unless B changed, with a record only B runs, a
value behind them (rule "coherent_change_before_an_update", or "changed_behind_unread_writes").
"""

from __future__ import annotations

from tracediff.diff.amplified import Amplified, Amplifier, amplifies
from tracediff.diff.compare import TensorDiff
from tracediff.diff.place import Place
from tracediff.diff.verdict.a_side import ASide
from tracediff.diff.verdict.b_side import BSideView
from tracediff.diff.verdict.changed_in_b import (
    changed_behind_unread_writes,
)
from tracediff.diff.verdict.comparer import (
    input_pair,
    kind_of,
)
from tracediff.diff.verdict.divergence import Divergence
from tracediff.diff.verdict.loose import loosely_agreeing
from tracediff.trace.schema import TraceRecord


def mark_an_unread_update(ra: TraceRecord, rb: TraceRecord, passed: list, amplified: Amplified, a_side: ASide,
                           outside_regions: bool) -> None:
    """A paired record whose writes were not fingerprinted (AdamW's foreach step) and whose inputs agree
    only within the tolerance, as an amplifier's do (amplified.amplifies): what it wrote is amplified
    noise until shown otherwise, as for AdamW's one-tensor ops, whose outputs are compared. Where it read
    a value changed coherently by more than rtol within the absolute tolerance (loosely_agreeing), remember who made
    it: rounding does not do that (1e-7 relative on a clean run, 1e-4 from a 1% change of a bias gradient)."""
    unread = [t for t in ra.get("out", ()) if t.get("unread")]
    why = amplifies(ra, rb, passed, outside_regions) if unread and passed else None
    if why is None:
        return
    ta, tb, comparison = max(passed, key=lambda p: p[2].rel_diff)
    worst = TensorDiff("input", ta["a"], ta["dt"], tuple(ta["sh"]), ta["fp"], tb["fp"], comparison)
    # An earlier update's coherent change read again (AdamW's `div_` reading `sqrt` of the state `addcmul_`
    # wrote) is still that change: keep its maker.
    earlier = next((o.loose_maker for o in map(amplified.origin, ra.get("in", ())) if o and o.loose_maker), None)
    maker = earlier or (a_side.maker(ta) if loosely_agreeing([(ta, tb, comparison)]) else None)
    amplified.mark(unread, Amplifier(Place.of(ra), Place.of(rb), worst, f"{why}; its writes are not fingerprinted",
                                     unread=True, loose_maker=maker), observed=False)


def changed_before_an_unread_update(ra: TraceRecord, rb: TraceRecord, carried: list[TensorDiff], origins: list[Amplifier],
                                     by_name: bool, a_side: ASide, b_side: BSideView) -> Divergence | None:
    """`ra`'s inputs differ only by amplification, from a record whose writes were not fingerprinted (see
    mark_an_unread_update): unless B changed, with a record only B runs, a value that agreed only
    within the absolute tolerance on the way to that record (changed_behind_unread_writes)."""
    for d, origin in zip(carried, origins):
        if not origin.unread:
            continue
        ta, tb = input_pair(ra, rb, d, by_name)
        found = changed_behind_unread_writes(ra, rb, tb, a_side.walk_back([ta]), [d], a_side, b_side)
        if found is not None:
            return found
        if origin.loose_maker is not None:
            maker, seen = origin.loose_maker, Place.of(ra)
            rel = origin.worst.comparison.rel_diff
            note = (f"{origin.place.op} (#{origin.place.index}), whose writes are not fingerprinted, read the value "
                    f"{maker.op} (#{maker.index}) made changed by more than rtol ({rel:.3g}), within the absolute "
                    f"tolerance: a coherent change, not rounding; its update carried it "
                    f"to {seen.op} (#{seen.index}), where the difference shows")
            return Divergence(kind_of(d), maker, None, (maker, origin.place), d, False, note, observed=seen,
                              may_start_earlier=True, rule="coherent_change_before_an_update")
    return None
