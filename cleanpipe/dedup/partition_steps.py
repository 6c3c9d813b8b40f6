"""The per-partition work of distributed MinHash dedup, as plain functions of Arrow tables.

A distributed engine hash-partitions its inputs by a key (band key, seq, node) and calls
one of these functions per partition with a dict of the tables that met there (``None``
for an input with no rows anywhere). Each function sees only its partition, so none needs
the whole corpus, and each can be tested without a cluster. The steps, in order:

1. :func:`bucket_step` — band-key rows partitioned by ``(band, key)`` → candidate pairs;
2. :func:`attach_left_step` — pairs and sketches partitioned by ``left`` / ``seq`` →
   unique pairs carrying the left row's band keys and shingle set;
3. :func:`verify_step` — the same by ``right`` → verified edges ``(left, right, jaccard)``;
4. :func:`large_star_step` / :func:`small_star_step` — edges partitioned by node, until no
   edge moves → stars (each node linked to the smallest of its component);
5. :func:`attach_leaf_step` then :func:`members_step` — stars by leaf, then by centre →
   one row per clustered document with its representative (the ``keep`` rule) and the
   Jaccard to it;
6. :func:`contamination_step` — training-to-reference edges by training row → its most
   similar reference row.

    >>> import numpy as np, pyarrow as pa
    >>> stars = {"e": pa.table({"hi": [5, 7], "lo": [2, 2], "changed": [0, 0]})}
    >>> s = bands.sketch_table(np.array([2, 5, 7]), np.zeros((3, 1), np.uint64),
    ...                        np.ones(3, bool), None, None, np.array([1, 9, 9]),
    ...                        pa.array(["a:1", "a:2", "a:3"]), None)
    >>> leaves = attach_leaf_step({"e": stars["e"], "s": s})
    >>> m = members_step({"e": leaves, "s": s}, keep="longest", exact=False)
    >>> [(r["seq"], r["rep"], r["rank"]) for r in m.to_pylist()]
    [(2, 5, 0), (5, 5, -1), (7, 5, 1)]
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cleanpipe.dedup import bands, cluster, hashing, stars

Tables = dict[str, "pa.Table | None"]

STARS = pa.schema([("hi", pa.int64()), ("lo", pa.int64()), ("changed", pa.int64())])
DIRECTED = pa.schema([("src", pa.int64()), ("dst", pa.int64())])
LEAF_COLUMNS = ("set", "length", "row_id", "snippet")
MEMBERS = pa.schema([
    ("seq", pa.int64()), ("label", pa.int64()), ("rep", pa.int64()),
    ("jaccard", pa.float64()), ("size", pa.int64()), ("rank", pa.int64()),
    ("row_id", pa.large_string()), ("snippet", pa.large_string()),
    ("rep_row_id", pa.large_string()),
])
LEAVES = pa.schema([
    ("hi", pa.int64()), ("lo", pa.int64()), ("h_set", pa.large_list(pa.uint32())),
    ("h_length", pa.int64()), ("h_row_id", pa.large_string()),
    ("h_snippet", pa.large_string()),
])
HASH_ROWS_SCHEMA = pa.schema([
    ("seq", pa.int64()), ("h0", pa.uint64()), ("h1", pa.uint64()), ("length", pa.int64()),
    ("row_id", pa.large_string()), ("snippet", pa.large_string()),
])
CONTAMINATION = pa.schema([
    ("seq", pa.int64()), ("ref", pa.int64()), ("jaccard", pa.float64()),
    ("row_id", pa.large_string()), ("snippet", pa.large_string()),
])


def _np(table: pa.Table, column: str) -> np.ndarray:
    return table.column(column).to_numpy()


def band_key_hash(rows: pa.Table) -> np.ndarray:
    """One integer per band-key row, equal for equal ``(band, key)`` (the partition key)."""
    with np.errstate(over="ignore"):
        return _np(rows, "key") ^ (_np(rows, "band").astype(np.uint64)
                                   * np.uint64(0xC2B2AE3D27D4EB4F))


def bucket_step(tables: Tables, max_all_pairs: int) -> pa.Table:
    rows = tables.get("b")
    return bands.PAIRS.empty_table() if rows is None else bands.bucket_pairs(rows,
                                                                             max_all_pairs)


def attach_left_step(tables: Tables) -> pa.Table:
    pairs, sketches = tables.get("p"), tables.get("s")
    if pairs is None or sketches is None:
        return _empty_attached(("l_",))
    return bands.attach(bands.unique_pairs(pairs), "left", sketches, "l_")


def _empty_attached(prefixes: tuple[str, ...]) -> pa.Table:
    # the band count is unknown here: a list of any size is fine for an empty table
    fields = list(bands.PAIRS)
    for p in prefixes:
        fields += [pa.field(p + "keys", pa.list_(pa.uint64())),
                   pa.field(p + "set", pa.large_list(pa.uint32()))]
    return pa.schema(fields).empty_table()


def verify_step(tables: Tables, n_bands: int, rows_per_band: int, threshold: float,
                first_ref: int, exact: bool, by_parts: bool = False) -> pa.Table:
    pairs, sketches = tables.get("p"), tables.get("s")
    if pairs is None or sketches is None or pairs.num_rows == 0:
        return bands.EDGES.empty_table()
    both = bands.attach(pairs, "right", sketches, "r_")
    return bands.verify_pairs(both, n_bands, rows_per_band, threshold, first_ref, exact,
                              by_parts)


def directed(edges: pa.Table) -> pa.Table:
    """Each undirected ``(hi, lo)`` edge as ``src → dst`` in both directions."""
    src, dst = stars.both_directions(_np(edges, "hi"), _np(edges, "lo"))
    return pa.table([pa.array(src), pa.array(dst)], schema=DIRECTED)


def _star_table(hi: np.ndarray, lo: np.ndarray, changed: np.ndarray) -> pa.Table:
    return pa.table([pa.array(hi, pa.int64()), pa.array(lo, pa.int64()),
                     pa.array(changed.astype(np.int64))], schema=STARS)


def large_star_step(tables: Tables) -> pa.Table:
    e = tables.get("e")
    if e is None or e.num_rows == 0:
        return STARS.empty_table()
    return _star_table(*stars.large_star(_np(e, "src"), _np(e, "dst")))


def small_star_step(tables: Tables) -> pa.Table:
    e = tables.get("e")
    if e is None or e.num_rows == 0:
        return STARS.empty_table()
    return _star_table(*stars.small_star(_np(e, "src"), _np(e, "dst")))


def attach_leaf_step(tables: Tables) -> pa.Table:
    """Star edges (partitioned by ``hi``, the leaf) without repeats, with the leaf's sketch
    columns as ``h_*``."""
    e, sketches = tables.get("e"), tables.get("s")
    if e is None or sketches is None or e.num_rows == 0:
        return LEAVES.empty_table()
    hi, lo = _np(e, "hi"), _np(e, "lo")
    order = np.lexsort((lo, hi))
    keep = np.ones(hi.size, dtype=bool)
    keep[1:] = (hi[order][1:] != hi[order][:-1]) | (lo[order][1:] != lo[order][:-1])
    e = e.select(["hi", "lo"]).take(pa.array(order[keep]))
    return bands.attach(e, "hi", sketches, "h_", LEAF_COLUMNS)


def members_step(tables: Tables, keep: cluster.Keep, exact: bool,
                 by_parts: bool = False) -> pa.Table:
    """One row per member of each star centred in this partition: its cluster label (the
    smallest seq), the kept row ``rep``, its Jaccard to ``rep`` (NaN for ``rep`` itself or
    without exact verification), the cluster size and its rank among the non-kept members
    in row order (-1 for ``rep``)."""
    leaves, sketches = tables.get("e"), tables.get("s")
    if leaves is None or sketches is None or leaves.num_rows == 0:
        return MEMBERS.empty_table()
    centres = pa.table({"lo": np.unique(_np(leaves, "lo"))})
    centres = bands.attach(centres, "lo", sketches, "h_", LEAF_COLUMNS)
    cols = ["h_" + c for c in LEAF_COLUMNS]
    both = pa.concat_tables([
        leaves.select(["hi", "lo", *cols]).rename_columns(["seq", "label", *LEAF_COLUMNS]),
        centres.select(["lo", "lo", *cols]).rename_columns(["seq", "label", *LEAF_COLUMNS]),
    ]).combine_chunks()
    seq, label = _np(both, "seq"), _np(both, "label")
    both = both.take(pa.array(np.lexsort((seq, label))))
    return _members(both, keep, exact, by_parts)


def _members(rows: pa.Table, keep: cluster.Keep, exact: bool,
             parts: bool = False) -> pa.Table:
    """:data:`MEMBERS` of ``rows`` (``seq``, ``label``, ``length``, ``row_id``, ``snippet``
    and, when ``exact``, ``set``: part records with ``parts``), sorted by label then
    seq."""
    seq, label, length = _np(rows, "seq"), _np(rows, "label"), _np(rows, "length")
    # positions follow seq inside each cluster, so choose_kept's ties go to the first row
    rep_pos = cluster.choose_kept(label, length, keep)
    pos = np.arange(seq.size)
    other = rep_pos != pos
    jac = np.full(seq.size, np.nan)
    if exact and other.any():
        values, off = bands.sets_of(rows, "set")
        jac[other] = bands.similarity(values, off, pos[other], rep_pos[other], 0.0, parts)
    starts = np.ones(seq.size, dtype=bool)
    starts[1:] = label[1:] != label[:-1]
    group = np.cumsum(starts) - 1
    sizes = np.bincount(group)[group]
    done = np.cumsum(other)
    before = (done - other)[np.flatnonzero(starts)][group]
    rank = np.where(other, done - before - 1, -1)
    row_id = rows.column("row_id").combine_chunks()
    return pa.table([
        pa.array(seq), pa.array(label), pa.array(seq[rep_pos]), pa.array(jac),
        pa.array(sizes.astype(np.int64)), pa.array(rank.astype(np.int64)), row_id,
        rows.column("snippet").combine_chunks(), row_id.take(pa.array(rep_pos)),
    ], schema=MEMBERS)


# -- exact dedup: one "band", the content hash -------------------------------------------

def _hash_order(rows: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """``rows`` sorted by (h0, h1, seq) and a mask of the first row of each hash."""
    h0, h1, seq = _np(rows, "h0"), _np(rows, "h1"), _np(rows, "seq")
    order = np.lexsort((seq, h1, h0))
    rows = rows.take(pa.array(order))
    h0, h1 = h0[order], h1[order]
    first = np.ones(h0.size, dtype=bool)
    first[1:] = (h0[1:] != h0[:-1]) | (h1[1:] != h1[:-1])
    return rows, first


def hash_groups_step(tables: Tables, keep: cluster.Keep, first_ref: int) -> pa.Table:
    """:data:`MEMBERS` of every group of two or more training rows with equal content
    hashes in this partition (partitioned by hash); the label is the group's first seq.

        >>> h = pa.table({"seq": [1, 2, 3, 9], "h0": [5, 6, 5, 5], "h1": [0, 0, 0, 0],
        ...               "length": [1, 1, 1, 1], "row_id": ["a", "b", "c", "r"],
        ...               "snippet": ["", "", "", ""]}).cast(HASH_ROWS_SCHEMA)
        >>> m = hash_groups_step({"h": h}, keep="first", first_ref=9)
        >>> [(r["seq"], r["rep"], r["rep_row_id"]) for r in m.to_pylist()]
        [(1, 1, 'a'), (3, 1, 'a')]
    """
    rows = tables.get("h")
    if rows is None:
        return MEMBERS.empty_table()
    rows = rows.filter(pa.array(_np(rows, "seq") < first_ref))
    if rows.num_rows == 0:
        return MEMBERS.empty_table()
    rows, first = _hash_order(rows)
    group = np.cumsum(first) - 1
    size = np.bincount(group)[group]
    label = _np(rows, "seq")[np.flatnonzero(first)][group]
    rows = rows.append_column("label", pa.array(label)).filter(pa.array(size >= 2))
    if rows.num_rows == 0:
        return MEMBERS.empty_table()
    # groups are contiguous and seq-ordered: sorted by (label, seq) already
    return _members(rows, keep, exact=False)


def hash_contamination_step(tables: Tables, first_ref: int) -> pa.Table:
    """For each training row whose content hash equals a reference row's, the first such
    reference row (``ref`` counted from the first reference row)."""
    rows = tables.get("h")
    if rows is None:
        return CONTAMINATION.empty_table()
    is_ref = _np(rows, "seq") >= first_ref
    train, refs = rows.filter(pa.array(~is_ref)), rows.filter(pa.array(is_ref))
    if train.num_rows == 0 or refs.num_rows == 0:
        return CONTAMINATION.empty_table()
    refs = refs.take(pa.array(np.argsort(_np(refs, "seq"), kind="stable")))
    hit = hashing.lookup(np.stack([_np(train, "h0"), _np(train, "h1")], axis=1),
                         np.stack([_np(refs, "h0"), _np(refs, "h1")], axis=1))
    found = np.flatnonzero(hit >= 0)
    train = train.take(pa.array(found))
    return pa.table([
        train.column("seq"), pa.array(_np(refs, "seq")[hit[found]] - first_ref),
        pa.array(np.full(found.size, np.nan)), train.column("row_id"),
        train.column("snippet"),
    ], schema=CONTAMINATION)


def contamination_step(tables: Tables) -> pa.Table:
    """For each training row with edges to reference rows, its most similar reference
    row (ties: the earliest), with the row's name and snippet for the report."""
    e, sketches = tables.get("e"), tables.get("s")
    if e is None or sketches is None or e.num_rows == 0:
        return CONTAMINATION.empty_table()
    left, right, jac = _np(e, "left"), _np(e, "right"), _np(e, "jaccard")
    order = np.lexsort((right, -np.nan_to_num(jac, nan=0.0), left))
    first = np.ones(order.size, dtype=bool)
    first[1:] = left[order][1:] != left[order][:-1]
    best = order[first]
    out = pa.table({"seq": left[best], "ref": right[best], "jaccard": jac[best]})
    out = bands.attach(out, "seq", sketches, "", ("row_id", "snippet"))
    return out.cast(CONTAMINATION)
