"""Connected components by alternating large-star and small-star steps (edge lists only).

Union-find needs every node's parent in one process. These two steps need only the edges
around one node at a time, so a distributed engine can run each step as one shuffle of the
edge list keyed by node, partition by partition (Kiveris et al., "Connected Components in
MapReduce and Beyond", SoCC 2014: O(log² n) rounds). Each step keeps the components and
the smallest node of each, and the alternation stops at a set of stars: every component
becomes its smallest node linked to each other member, so the label of a node (the
smallest node of its component, as :func:`cleanpipe.dedup.kernels.union_find` gives) is
read off its one edge.

Edges are undirected ``(hi, lo)`` with ``hi > lo``; a step takes them in both directions
(``src``/``dst``, each edge twice) so that a node sees all its neighbours.

    >>> import numpy as np
    >>> hi, lo = np.array([1, 2, 3, 9]), np.array([0, 1, 2, 8])   # a chain and a pair
    >>> nodes, labels = components(hi, lo)
    >>> dict(zip(nodes.tolist(), labels.tolist()))
    {0: 0, 1: 0, 2: 0, 3: 0, 8: 8, 9: 8}
"""

from __future__ import annotations

import numpy as np


def both_directions(hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` holding each undirected edge once in each direction."""
    return np.concatenate([hi, lo]), np.concatenate([lo, hi])


def _grouped(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Directed edges without repeats, sorted by (src, dst), and each edge's group start."""
    order = np.lexsort((dst, src))
    src, dst = src[order], dst[order]
    keep = np.ones(src.size, dtype=bool)
    keep[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    src, dst = src[keep], dst[keep]
    new = np.ones(src.size, dtype=bool)
    new[1:] = src[1:] != src[:-1]
    starts = np.flatnonzero(new)
    group = np.cumsum(new) - 1
    return src, dst, starts[group]


def large_star(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Link every larger neighbour of each node to the smallest of the node and its
    neighbours. Returns ``(hi, lo, changed)``: ``changed`` marks edges that moved.

    The edges around one ``src`` must all be present (they are when partitioned by src).

    >>> s, d = both_directions(np.array([1, 2]), np.array([0, 1]))
    >>> [a.tolist() for a in large_star(s, d)]
    [[1, 2], [0, 0], [False, True]]
    """
    if src.size == 0:
        return src.copy(), dst.copy(), np.zeros(0, dtype=bool)
    src, dst, first = _grouped(src, dst)
    # smallest neighbour per node: dst is sorted inside each src group
    m = np.minimum(dst[first], src)
    up = dst > src
    return dst[up], m[up], m[up] != src[up]


def small_star(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Link each node and its smaller neighbours to the smallest of them. Returns
    ``(hi, lo, changed)``; ``changed`` marks edges of nodes with two or more smaller
    neighbours (the only ones that move).

    >>> s, d = both_directions(np.array([2, 2]), np.array([0, 1]))
    >>> [a.tolist() for a in small_star(s, d)]
    [[2, 1], [0, 0], [False, True]]
    """
    down = dst < src
    src, dst = src[down], dst[down]
    if src.size == 0:
        return src.copy(), dst.copy(), np.zeros(0, dtype=bool)
    src, dst, first = _grouped(src, dst)
    m = dst[first]
    is_first = np.zeros(src.size, dtype=bool)
    is_first[np.unique(first)] = True
    many = np.bincount(first, minlength=src.size)[first] >= 2
    # the node itself, once, to its group minimum; the other smaller neighbours likewise
    own_hi, own_lo = src[is_first], m[is_first]
    rest = ~is_first
    hi = np.concatenate([own_hi, dst[rest]])
    lo = np.concatenate([own_lo, m[rest]])
    changed = np.concatenate([np.zeros(own_hi.size, dtype=bool), many[rest]])
    return hi, lo, changed


def labels_of(hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and their component label from converged star edges (each ``hi`` once)."""
    nodes = np.unique(np.concatenate([hi, lo]))
    labels = nodes.copy()
    labels[np.searchsorted(nodes, hi)] = lo
    return nodes, labels


def components(hi: np.ndarray, lo: np.ndarray,
               max_rounds: int = 10_000) -> tuple[np.ndarray, np.ndarray]:
    """Every node on an edge and the smallest node of its component, in one process (the
    reference for the distributed loop, which runs the same steps partition by partition).
    """
    hi, lo = np.asarray(hi, np.int64), np.asarray(lo, np.int64)
    for _ in range(max_rounds):
        hi, lo, c1 = large_star(*both_directions(hi, lo))
        hi, lo, c2 = small_star(*both_directions(hi, lo))
        if not c1.any() and not c2.any():
            return labels_of(*_dedup(hi, lo))
    raise RuntimeError(f"components did not converge in {max_rounds} rounds")


def _dedup(hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if hi.size == 0:
        return hi, lo
    code = np.unique(np.stack([hi, lo], axis=1), axis=0)
    return code[:, 0], code[:, 1]
