"""The source line of a backward op: the forward line whose autograd node runs it.

In eager mode a backward op's Python stack ends at `loss.backward()`, which
names no op. Every autograd node gets a sequence number when its forward op
makes it, before the op reaches the dispatch mode, so the forward op seen
next claims that number; a backward op looks up the number of the node being
executed (`torch._C._current_autograd_node()`). Compiled backward graphs
carry their forward lines already (FX node meta), so both runs name the same
line, as torch's anomaly mode would, without its cost.
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from tracediff.record.source import SourceLocation

# Sequence numbers remembered: a forward's worth of autograd nodes, and more.
_WINDOW = 1_000_000


class BackwardSources:
    """Forward op source by autograd sequence number; all state on the instance."""

    def __init__(self) -> None:
        self._by_sequence: OrderedDict[int, SourceLocation] = OrderedDict()
        self._claimed = -1  # the newest sequence number claimed by a forward op

    def forward_op(self, source: SourceLocation | None) -> None:
        """A forward op was dispatched: claim the autograd node its autograd kernel just made, if any."""
        if source is None or not torch.is_grad_enabled():
            return
        sequence = torch._C._autograd._get_sequence_nr() - 1
        if sequence > self._claimed:
            self._claimed = sequence
            self._by_sequence[sequence] = source
            if len(self._by_sequence) > _WINDOW:
                self._by_sequence.popitem(last=False)

    def of(self, node: torch.autograd.graph.Node) -> SourceLocation | None:
        """The forward line that made `node` (the one a backward op runs for), if recorded."""
        return self._by_sequence.get(node._sequence_nr())
