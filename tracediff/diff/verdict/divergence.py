"""What the walk finds: the first divergence (with the name of the rule that placed it) and the counts
of the comparison around it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tracediff.diff.amplified import Amplified
from tracediff.diff.compare import TensorDiff
from tracediff.diff.nan_origin import NanOrigin
from tracediff.diff.noise import Noise
from tracediff.diff.place import Place
from tracediff.diff.skeleton import Skeleton


@dataclass(frozen=True)
class Divergence:
    """The first divergence as the trace rules place it, with the name of the rule that placed it."""

    kind: str  # "output" | "nan" | "structure"
    a: Place  # the op reported as the cause (trace A)
    b: Place | None  # B's counterpart of `observed`, or B's op that changed the value
    candidates: tuple[Place, ...]
    worst: TensorDiff | None
    inputs_agree: bool
    note: str
    observed: Place | None = None  # where A first showed the difference, if not at `a`
    # The difference grew from below the tolerance: it may have been made before the first candidate.
    may_start_earlier: bool = False
    # Placed by what B did: a record only B runs read this op's agreed value and wrote another at its line.
    changed_in_b: bool = False
    # An input that no recorded op of A made differs: a program input, parameter or buffer made differently.
    program_input: bool = False
    # The rule that placed it (docs/design.md lists them): where to look when a verdict is wrong.
    rule: str = field(kw_only=True)

    @property
    def rel_diff(self) -> float | None:
        return None if self.worst is None else self.worst.comparison.rel_diff


@dataclass
class DiffResult:
    a: Skeleton
    b: Skeleton
    first: Divergence | None = None
    inherited: int = 0  # later records whose outputs also disagree
    inherited_complete: bool = True  # False: counting stopped at the limit
    read_to: int | None = None  # where reading stopped (A's record index), if it stopped at the limit
    compared: int = 0  # paired records compared
    paired: int = 0
    unpaired_a: int = 0
    unpaired_b: int = 0
    structure: list[str] = field(default_factory=list)
    structure_count: int = 0
    noise: Noise | None = None  # calibrated per-tensor noise the comparison used
    passed_by_noise: int = 0  # compared tensors beyond the tolerance but within the noise
    closest_to_noise: float = 0.0  # largest multiple of its noise a tensor passed only by noise reached
    amplified: Amplified | None = None  # values that differ only by amplified sub-tolerance differences

    @property
    def nan_origin_a(self) -> NanOrigin | None:
        return self.a.nan_origin

    @property
    def nan_origin_b(self) -> NanOrigin | None:
        return self.b.nan_origin
