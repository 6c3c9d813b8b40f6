"""Which Ray node runs which task group: runs of consecutive groups to each node, so a
node's caches see neighbouring rows and a later pass finds its rows where they are.

Stages keep caches per process that pay off on repeated text: ``context_length`` counts a
long text as the sum of its pieces' cached token counts
(:mod:`cleanpipe.templating.piece_counts`), and a corpus puts one passage under several
prompt templates in neighbouring rows. Handed to whichever node is free first, consecutive
groups alternate between nodes and every node encodes the same passages: on t0 with two
worker nodes the default SFT pipeline's last pass encoded 5.1 M characters, against 3.0 M
on one node; given the two halves of the groups, 3.0 M. A pass after a dedup runs each
group where the previous pass left its rows, so the first pass sets the runs for all.

So a node takes a *block* of consecutive groups and runs it in order; when its block is
used up it takes the next block, and when none is left it takes the last group not yet
started of the node with the most left (from the far end: the rest of that node's run
stays consecutive), so no node idles while another has groups waiting. Groups are taken
from their iterator a block at a time. A block holds the (expected) groups divided evenly
over the CPUs, and all blocks together at most :data:`AHEAD_GROUPS` groups: the driver
takes results in input order, so what nodes run ahead of it waits in the object store.

    >>> plan = NodeBlocks(iter("abcdefghij"), {"n1": 1, "n2": 1}, expected=10)
    >>> [plan.next_for("n1") for _ in range(3)], [plan.next_for("n2") for _ in range(3)]
    ([(0, 'a'), (1, 'b'), (2, 'c')], [(5, 'f'), (6, 'g'), (7, 'h')])
    >>> [plan.next_for("n2")[0] for _ in range(3)]  # n2's block is used up: n1's last
    [8, 9, 4]
    >>> plan.next_for("n1"), plan.next_for("n1")
    ((3, 'd'), None)
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator
from typing import Generic, TypeVar

#: most task groups the blocks of all nodes hold together, and (the Ray engine's bound)
#: most results that may wait for the driver before a node takes another block: groups of
#: up to ``task_groups.TASK_BYTES`` (4 MiB) of input, so 128 MiB of rows the driver read
#: itself and has not handed out yet, and about as much in the object store
AHEAD_GROUPS = 32

T = TypeVar("T")


class NodeBlocks(Generic[T]):
    """The task groups of ``items`` (about ``expected`` of them), handed to ``nodes``
    (node id -> CPUs) in blocks of consecutive groups as the nodes ask for work
    (:meth:`next_for`). A group is held here from when its block is taken from the
    iterator until it is handed out."""

    def __init__(self, items: Iterator[T], nodes: dict[str, int], expected: int) -> None:
        cpus = max(1, sum(nodes.values()))
        #: groups a block holds per CPU of the node that takes it
        self.per_cpu = max(1, min(math.ceil(expected / cpus), AHEAD_GROUPS // cpus))
        self.nodes = dict(nodes)
        self.taken = 0  # groups taken from the iterator so far
        self._source: Iterator[T] | None = items
        self.own: dict[str, deque[tuple[int, T]]] = {n: deque() for n in nodes}

    @property
    def done(self) -> bool:
        """Whether every group is handed out."""
        return self._source is None and not any(self.own.values())

    def next_for(self, node: str, more: bool = True) -> tuple[int, T] | None:
        """The group ``node`` should start next and its index in the iterator's order, or
        ``None`` when every group is handed out. With ``more`` false, only the rest of the
        node's own block: no new block, nothing from another node's."""
        own = self.own.setdefault(node, deque())
        if not own and not more:
            return None
        if not own and self._source is not None:
            size = self.per_cpu * self.nodes.get(node, 1)
            for item in self._source:
                own.append((self.taken, item))
                self.taken += 1
                if len(own) >= size:
                    break
            else:
                self._source = None
        if own:
            return own.popleft()
        victim = max(self.own.values(), key=len)
        return victim.pop() if victim else None
