"""128-bit content hashes of whole documents, as an (n, 2) uint64 numpy array."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import xxhash

from cleanpipe.dedup.text import buffers


def hash128(texts: pa.Array) -> np.ndarray:
    """XXH3-128 of each string's UTF-8 bytes; row ``i`` is ``(low, high)`` 64-bit halves.

    xxhash has no array API, so this is one C call per row over a zero-copy memoryview of
    the Arrow buffer (no Python ``str`` is built).
    """
    data, offsets = buffers(texts)
    view = memoryview(data)
    digest = xxhash.xxh3_128_digest
    n = len(offsets) - 1
    raw = b"".join(digest(view[offsets[i]:offsets[i + 1]]) for i in range(n))
    return np.frombuffer(raw, dtype=np.uint64).reshape(n, 2) if n else np.zeros((0, 2),
                                                                               np.uint64)


def group_labels(hashes: np.ndarray) -> np.ndarray:
    """For each row, the index of the first row with the same hash."""
    n = hashes.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((np.arange(n), hashes[:, 1], hashes[:, 0]))
    h = hashes[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = np.any(h[1:] != h[:-1], axis=1)
    first = order[starts]
    labels = np.empty(n, dtype=np.int64)
    labels[order] = first[np.cumsum(starts) - 1]
    return labels


def lookup(hashes: np.ndarray, table: np.ndarray) -> np.ndarray:
    """For each row of ``hashes``, the index of an equal row of ``table`` (or -1)."""
    out = np.full(hashes.shape[0], -1, dtype=np.int64)
    if table.shape[0] == 0 or hashes.shape[0] == 0:
        return out
    both = np.concatenate([table, hashes])
    labels = group_labels(both)
    m = table.shape[0]
    first = labels[m:]
    hit = first < m
    out[hit] = first[hit]
    return out
