"""MinHash LSH as table operations: sketch rows, band-key rows, bucket pairs, pair verification.

The in-memory path of :mod:`cleanpipe.stages.minhash_dedup` works on one big array of band
keys. A distributed engine cannot hold that array in one process, so this module states the
same steps over Arrow tables that can be split by key and processed piece by piece:

* a **sketch table** holds what verification needs of each row (``seq``, band keys, sorted
  shingle set, length, row id, snippet), one row per document;
* :func:`band_rows` turns it into ``(band, key, seq)`` rows, the unit of LSH grouping;
* :func:`bucket_pairs` turns the band rows of one partition (all rows sharing a
  ``(band, key)`` are in the same partition) into candidate pairs, with the same
  all-pairs/star rule as :func:`cleanpipe.dedup.kernels.bucket_pairs`;
* :func:`attach` joins rows of one table to the sketch rows their ``seq`` column names;
* :func:`verified_jaccard` is the acceptance rule shared with the in-memory path, so both
  merge exactly the same pairs.

Rows are identified by ``seq`` (ascending in input order), so "smallest seq" here is
"smallest index" there and ``keep: first`` picks the same row.

    >>> import numpy as np
    >>> keys = np.array([[1, 7], [1, 8], [2, 8]], dtype=np.uint64)
    >>> t = sketch_table(np.array([10, 11, 12]), keys, np.ones(3, bool), None, None,
    ...                  np.array([3, 3, 3]), None, None)
    >>> pairs = bucket_pairs(band_rows(t), max_all_pairs=64)
    >>> sorted(zip(pairs["left"].to_pylist(), pairs["right"].to_pylist()))
    [(10, 11), (11, 12)]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from cleanpipe.dedup import kernels, part_kernels

#: A candidate pair sharing this share of its bands, with at least SURE_MIN_BANDS of them,
#: is merged without an exact Jaccard when its band estimate clears the threshold by
#: SURE_MARGIN. At 16 bands × 8 rows (the default, threshold 0.8) that is 11+ shared bands
#: (estimate ≥ 0.954); a pair at J = 0.79 gets there with probability 2e-6, one at J = 0.7
#: with 8e-11 (binomial tail, p = J**8). All other pairs get their exact Jaccard.
SURE_MARGIN = 0.15
SURE_MIN_BANDS = 8

BAND_ROWS = pa.schema([("band", pa.int32()), ("key", pa.uint64()), ("seq", pa.int64())])
PAIRS = pa.schema([("left", pa.int64()), ("right", pa.int64())])
EDGES = pa.schema([("left", pa.int64()), ("right", pa.int64()), ("jaccard", pa.float64())])


def sketch_schema(bands: int) -> pa.Schema:
    """Columns of a sketch table with ``bands`` band keys per row."""
    return pa.schema([
        ("seq", pa.int64()), ("valid", pa.bool_()),
        ("keys", pa.list_(pa.uint64(), bands)), ("set", pa.large_list(pa.uint32())),
        ("length", pa.int64()), ("row_id", pa.large_string()), ("snippet", pa.large_string()),
    ])


def sketch_table(seq: np.ndarray, keys: np.ndarray, valid: np.ndarray,
                 sets: np.ndarray | None, set_off: np.ndarray | None, lengths: np.ndarray,
                 row_ids: pa.Array | None, snippets: pa.Array | None) -> pa.Table:
    """One row per document: what LSH grouping and pair verification need of it.

    ``sets``/``set_off`` are the sorted shingle sets (``None`` without exact verification:
    the rows then carry empty sets).
    """
    n, bands = keys.shape
    flat = pa.array(np.ascontiguousarray(keys).reshape(-1), pa.uint64())
    if sets is None or set_off is None:
        sets, set_off = np.zeros(0, np.uint32), np.zeros(n + 1, np.int64)
    set_col = pa.LargeListArray.from_arrays(pa.array(set_off.astype(np.int64)),
                                            pa.array(sets, pa.uint32()))
    ids = (pa.array(row_ids).cast(pa.large_string()) if row_ids is not None
           else pa.nulls(n, pa.large_string()))
    snips = (snippets.cast(pa.large_string()) if snippets is not None
             else pa.nulls(n, pa.large_string()))
    return pa.table([
        pa.array(np.asarray(seq, np.int64)), pa.array(np.asarray(valid, bool)),
        pa.FixedSizeListArray.from_arrays(flat, bands), set_col,
        pa.array(np.asarray(lengths, np.int64)), ids, snips,
    ], schema=sketch_schema(bands))


def _one_chunk(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


def keys_of(table: pa.Table, column: str = "keys") -> np.ndarray:
    """The ``(rows, bands)`` uint64 band keys of a sketch table column."""
    col = _one_chunk(table.column(column))
    bands = col.type.list_size
    return col.flatten().to_numpy(zero_copy_only=False).reshape(-1, bands)


def sets_of(table: pa.Table, column: str = "set") -> tuple[np.ndarray, np.ndarray]:
    """``(values, offsets)`` of a list column: row ``i`` is ``values[off[i]:off[i+1]]``."""
    col = _one_chunk(table.column(column))
    # offsets of a sliced list array index its unsliced values: take both as they are
    return (col.values.to_numpy(zero_copy_only=False).astype(np.uint32, copy=False),
            col.offsets.to_numpy(zero_copy_only=False).astype(np.int64, copy=False))


def band_rows(table: pa.Table) -> pa.Table:
    """``(band, key, seq)`` for every band of every row that has shingles.

    >>> t = sketch_table(np.array([5, 6]), np.array([[1, 2], [3, 4]], np.uint64),
    ...                  np.array([True, False]), None, None, np.array([1, 0]), None, None)
    >>> band_rows(t).to_pylist()
    [{'band': 0, 'key': 1, 'seq': 5}, {'band': 1, 'key': 2, 'seq': 5}]
    """
    keys = keys_of(table)
    valid = _one_chunk(table.column("valid")).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(valid)
    bands = keys.shape[1]
    seq = _one_chunk(table.column("seq")).to_numpy()
    return pa.table([
        pa.array(np.tile(np.arange(bands, dtype=np.int32), rows.size)),
        pa.array(keys[rows].reshape(-1)),
        pa.array(np.repeat(seq[rows], bands)),
    ], schema=BAND_ROWS)


def bucket_pairs(rows: pa.Table, max_all_pairs: int) -> pa.Table:
    """Candidate ``(left < right)`` seq pairs of the buckets in ``rows`` (band-key rows).

    Every row of a bucket must be present (the caller partitions by ``(band, key)``). A pair
    found in several bands comes out once per band; :func:`unique_pairs` removes repeats.
    """
    if rows.num_rows == 0:
        return PAIRS.empty_table()
    band = _one_chunk(rows.column("band")).to_numpy()
    key = _one_chunk(rows.column("key")).to_numpy()
    seq = _one_chunk(rows.column("seq")).to_numpy()
    # sorted by band, then key, then seq: inside a bucket, position order is seq order,
    # which is what the kernel's "sorted members, star to the first" assumes
    order = np.lexsort((seq, key, band))
    band, key, seq = band[order], key[order], seq[order]
    lefts, rights = [], []
    cuts = np.flatnonzero(np.diff(band)) + 1
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, band.size], strict=True):
        m = int(hi - lo)
        pos = np.arange(m, dtype=np.int64)
        left, right = kernels.bucket_pairs(pos, key[lo:hi], np.ones(m, dtype=bool),
                                           max_all_pairs)
        lefts.append(seq[lo:hi][left])
        rights.append(seq[lo:hi][right])
    return pa.table([pa.array(np.concatenate(lefts)), pa.array(np.concatenate(rights))],
                    schema=PAIRS)


def unique_pairs(pairs: pa.Table) -> pa.Table:
    """``pairs`` without repeated ``(left, right)``, sorted."""
    if pairs.num_rows == 0:
        return PAIRS.empty_table()
    left = _one_chunk(pairs.column("left")).to_numpy()
    right = _one_chunk(pairs.column("right")).to_numpy()
    order = np.lexsort((right, left))
    left, right = left[order], right[order]
    keep = np.ones(left.size, dtype=bool)
    keep[1:] = (left[1:] != left[:-1]) | (right[1:] != right[:-1])
    return pa.table([pa.array(left[keep]), pa.array(right[keep])], schema=PAIRS)


def attach(rows: pa.Table, on: str, sketches: pa.Table, prefix: str,
           columns: tuple[str, ...] = ("keys", "set")) -> pa.Table:
    """``rows`` with the sketch ``columns`` of the row named by ``rows[on]``, as
    ``prefix + column``; rows naming no sketch are dropped (an inner join on seq).

    >>> t = sketch_table(np.array([3, 9]), np.array([[1], [2]], np.uint64),
    ...                  np.ones(2, bool), None, None, np.array([4, 5]), None, None)
    >>> p = pa.table({"left": [9, 3, 7]})
    >>> attach(p, "left", t, "l_", ("length",)).to_pylist()
    [{'left': 9, 'l_length': 5}, {'left': 3, 'l_length': 4}]
    """
    want = _one_chunk(rows.column(on)).to_numpy()
    have = _one_chunk(sketches.column("seq")).to_numpy()
    order = np.argsort(have, kind="stable")
    pos = np.searchsorted(have[order], want)
    pos_ok = np.minimum(pos, max(have.size - 1, 0))
    found = (pos < have.size) & (have[order][pos_ok] == want) if have.size else \
        np.zeros(want.size, dtype=bool)
    out = rows.filter(pa.array(found)) if not found.all() else rows
    take = pa.array(order[pos_ok[found]] if have.size else np.zeros(0, np.int64))
    for c in columns:
        out = out.append_column(prefix + c, _one_chunk(sketches.column(c)).take(take))
    return out


def verified_jaccard(shared: np.ndarray | None, bands: int, rows: int, threshold: float,
                     train_right: np.ndarray,
                     exact: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Similarity of each candidate pair as the merge rule sees it.

    Pairs sharing nearly all bands (at least ``SURE_MIN_BANDS`` and an estimate
    ``(shared / bands) ** (1 / rows)`` ``SURE_MARGIN`` above the threshold) take the estimate,
    but only between training rows (a contamination hit reports its exact value); the
    others get ``exact(mask)``, their exact Jaccard (or -1 when provably below the
    threshold). ``shared=None`` (band counts unknown) makes every pair exact.

    >>> ex = lambda m: np.full(int(m.sum()), 0.5)
    >>> verified_jaccard(np.array([16, 3]), 16, 8, 0.8, np.array([True, True]), ex).tolist()
    [1.0, 0.5]
    """
    jac = np.full(train_right.size, np.nan)
    exact_mask = np.ones(train_right.size, dtype=bool)
    if shared is not None:
        est = (shared / bands) ** (1.0 / rows)
        sure = (est >= min(threshold + SURE_MARGIN, 1.0)) & train_right
        sure &= shared >= SURE_MIN_BANDS
        jac[sure] = est[sure]
        exact_mask = ~sure
    jac[exact_mask] = exact(exact_mask)
    return jac


def similarity(values: np.ndarray, off: np.ndarray, left: np.ndarray, right: np.ndarray,
               at_least: float = 0.0, parts: bool = False) -> np.ndarray:
    """Jaccard of each ``(left, right)`` pair of verification records: of their shingle
    sets, or with ``parts`` of their responses
    (:func:`cleanpipe.dedup.part_kernels.pair_similarity`, which also applies the prompts'
    sentence test). With ``at_least`` > 0, -1 marks a pair that is no near duplicate at it."""
    if parts:
        return part_kernels.pair_similarity(values, off, left, right, at_least)
    return kernels.pair_jaccard(values, off, left, right, at_least)


def joined_sets(table: pa.Table, left_col: str, right_col: str) -> tuple[np.ndarray,
                                                                        np.ndarray]:
    """One ``(values, offsets)`` store for two set columns of the same rows: pair ``i`` is
    document ``i`` (left) and ``n + i`` (right), ready for ``kernels.pair_jaccard``."""
    lv, lo = sets_of(table, left_col)
    rv, ro = sets_of(table, right_col)
    lv, rv = lv[lo[0]:lo[-1]], rv[ro[0]:ro[-1]]
    off = np.concatenate([lo - lo[0], (ro[1:] - ro[0]) + lv.size])
    return np.concatenate([lv, rv]), off


def verify_pairs(pairs: pa.Table, bands: int, rows: int, threshold: float, first_ref: int,
                 exact: bool, parts: bool = False) -> pa.Table:
    """Edges among candidate pairs carrying both sketches (``l_keys``, ``l_set``, ``r_keys``,
    ``r_set``): ``(left, right, jaccard)`` of the pairs that reach ``threshold`` (all pairs,
    Jaccard NaN, when ``exact`` is false). Seqs from ``first_ref`` on are reference rows.
    ``parts``: the sets are part records, each pair is checked exactly part by part."""
    if pairs.num_rows == 0:
        return EDGES.empty_table()
    left = _one_chunk(pairs.column("left")).to_numpy()
    right = _one_chunk(pairs.column("right")).to_numpy()
    if not exact:
        return pa.table([pa.array(left), pa.array(right),
                         pa.array(np.full(left.size, np.nan))], schema=EDGES)
    shared = (keys_of(pairs, "l_keys") == keys_of(pairs, "r_keys")).sum(axis=1)
    values, off = joined_sets(pairs, "l_set", "r_set")
    n = left.size
    idx = np.arange(n, dtype=np.int64)

    def exact_fn(mask: np.ndarray) -> np.ndarray:
        return similarity(values, off, idx[mask], idx[mask] + n, threshold, parts)

    jac = verified_jaccard(None if parts else shared.astype(np.int64), bands, rows,
                           threshold, right < first_ref, exact_fn)
    ok = jac >= threshold
    return pa.table([pa.array(left[ok]), pa.array(right[ok]), pa.array(jac[ok])],
                    schema=EDGES)
