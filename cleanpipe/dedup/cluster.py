"""Clustering for dedup: LSH candidate pairs, connected components, the keep policy.

In-memory mode sorts each band's keys with numpy and joins pairs with numba; the external
mode (:mod:`cleanpipe.dedup.external`) does the same joins with polars on spilled Parquet.
Both hand their components to :func:`choose_kept`, so they keep the same rows.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from cleanpipe.dedup import kernels

Keep = Literal["first", "last", "longest"]


def candidate_pairs(keys: np.ndarray, valid: np.ndarray,
                    max_all_pairs: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Unique ``(left < right)`` index pairs that share a key in at least one band.

    A near-duplicate pair usually shares most bands, so the bands' raw pairs repeat each
    pair several times over; they are merged into the unique set band by band, so memory
    holds the unique pairs and one band's raw pairs, never all bands' at once.

        >>> keys = np.array([[1, 5], [1, 5], [2, 5], [3, 6]], dtype=np.uint64)
        >>> left, right = candidate_pairs(keys, np.ones(4, dtype=bool))
        >>> left.tolist(), right.tolist()
        ([0, 0, 1], [1, 2, 2])
    """
    n, bands = keys.shape
    width = np.int64(max(n, 1))
    codes = np.zeros(0, np.int64)
    for j in range(bands):
        col = np.ascontiguousarray(keys[:, j])
        order = np.argsort(col, kind="stable")
        left, right = kernels.bucket_pairs(order, col[order], valid, max_all_pairs)
        del col, order
        band = _unique_sorted(left * width + right)
        del left, right
        codes = _merge_sorted(codes, band)
    return codes // width, codes % width


def _merge_sorted(codes: np.ndarray, band: np.ndarray) -> np.ndarray:
    """The union of two sorted unique arrays, in linear time after a binary search (sorting
    the concatenation again for every band cost more than the bands' own work).

        >>> _merge_sorted(np.array([1, 4, 9]), np.array([0, 4, 5, 10])).tolist()
        [0, 1, 4, 5, 9, 10]
    """
    if not codes.size:
        return band
    at = np.searchsorted(codes, band)
    seen = np.zeros(band.size, dtype=bool)
    inside = at < codes.size
    seen[inside] = codes[at[inside]] == band[inside]
    new = ~seen
    return np.insert(codes, at[new], band[new])


def _unique_sorted(code: np.ndarray) -> np.ndarray:
    # Sort-based unique: numpy's hash-based np.unique is slower on millions of int64.
    code.sort()
    keep = np.ones(code.size, dtype=bool)
    keep[1:] = code[1:] != code[:-1]
    return code[keep]


def components(n: int, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Component label of each of ``n`` documents: the smallest index in its component."""
    return kernels.union_find(n, left.astype(np.int64), right.astype(np.int64))


def choose_kept(labels: np.ndarray, lengths: np.ndarray | None, keep: Keep) -> np.ndarray:
    """For each document, the index of the member of its group that is kept.

    ``first`` keeps the earliest row, ``last`` the latest, ``longest`` the one with the most
    characters (the earliest among equals). ``rep[i] == i`` means row ``i`` is kept.
    """
    n = labels.size
    idx = np.arange(n, dtype=np.int64)
    if keep == "first":
        order = np.lexsort((idx, labels))
    elif keep == "last":
        order = np.lexsort((-idx, labels))
    elif keep == "longest":
        if lengths is None:
            raise ValueError("keep: longest needs document lengths")
        order = np.lexsort((idx, -lengths.astype(np.int64), labels))
    else:
        raise ValueError(f"unknown keep policy {keep!r}")
    sorted_labels = labels[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = sorted_labels[1:] != sorted_labels[:-1]
    group_first = order[starts]
    group_of = np.cumsum(starts) - 1
    rep = np.empty(n, dtype=np.int64)
    rep[order] = group_first[group_of]
    return rep


def sizes_histogram(sizes: np.ndarray) -> dict[str, int]:
    """How many clusters (of 2 or more rows) have each size, in readable buckets, from the
    size of each cluster (sizes below 2 are ignored).

    >>> sizes_histogram(np.array([1, 2, 2, 7, 120]))
    {'2': 2, '3': 0, '4': 0, '5-9': 1, '10-99': 0, '100+': 1}
    """
    sizes = sizes[sizes >= 2]
    edges = [(2, 2), (3, 3), (4, 4), (5, 9), (10, 99), (100, None)]
    out: dict[str, int] = {}
    for lo, hi in edges:
        name = str(lo) if hi == lo else (f"{lo}+" if hi is None else f"{lo}-{hi}")
        mask = sizes >= lo if hi is None else (sizes >= lo) & (sizes <= hi)
        out[name] = int(mask.sum())
    return out


def largest_clusters(labels: np.ndarray, rep: np.ndarray, top: int) -> list[np.ndarray]:
    """Member indices (representative first) of the ``top`` largest clusters."""
    uniq, inverse, sizes = np.unique(labels, return_inverse=True, return_counts=True)
    big = np.flatnonzero(sizes >= 2)
    if big.size == 0 or top <= 0:
        return []
    # Ties broken by the earliest representative so the report is stable.
    chosen = big[np.lexsort((uniq[big], -sizes[big]))][:top]
    out = []
    for g in chosen:
        members = np.flatnonzero(inverse == g)
        r = rep[members[0]]
        out.append(np.concatenate([[r], members[members != r]]))
    return out
