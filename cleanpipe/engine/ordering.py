"""The order in which a batch's quarantined rows and events are written, so that the
quarantine and ``events.parquet`` are byte-identical for any batch size and worker count.

Each batch's results are merged in input order (``seq``), with ties (one row's several
events) kept in stage order and, within a stage, in the order the stage reported them. The
engine hands every result of one batch together — the reader's, each stage's, and the
decisions of the global stage before it — so batches only cut the stream where a sorted
stream can be cut anyway.

    >>> import numpy as np, pyarrow as pa
    >>> a = pa.table({"seq": [1, 5], "stage": ["s0", "s0"]})
    >>> b = pa.table({"seq": [1, 3], "stage": ["s1", "s1"]})
    >>> events_in_seq_order([a, b]).to_pylist()  # doctest: +NORMALIZE_WHITESPACE
    [{'seq': 1, 'stage': 's0'}, {'seq': 1, 'stage': 's1'}, {'seq': 3, 'stage': 's1'},
     {'seq': 5, 'stage': 's0'}]
    >>> q0 = QuarantineRows(None, ["f:2", "f:9"], np.array([2, 9]), "s0", [["x"], ["x"]], [[], []])
    >>> q1 = QuarantineRows(None, ["f:4"], np.array([4]), "s1", [["y"]], [[]])
    >>> [(q.stage, q.row_ids) for q in quarantine_in_seq_order([q0, q1])]
    [('s0', ['f:2']), ('s1', ['f:4']), ('s0', ['f:9'])]
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cleanpipe.engine.rows import QuarantineRows

__all__ = ["events_in_seq_order", "quarantine_in_seq_order"]


def events_in_seq_order(tables: list[pa.Table | None]) -> pa.Table | None:
    """Event tables (each with a ``seq`` column), given in stage order, as one table sorted
    by ``seq``; ``None`` when there is no event."""
    present = [t for t in tables if t is not None and t.num_rows]
    if not present:
        return None
    table = pa.concat_tables(present, promote_options="permissive")
    seq = table.column("seq").to_numpy()
    if seq.size < 2 or bool(np.all(seq[1:] >= seq[:-1])):
        return table
    return table.take(pa.array(np.argsort(seq, kind="stable")))


def quarantine_in_seq_order(parts: list[QuarantineRows | None]) -> list[QuarantineRows]:
    """Quarantined rows of several stages, given in stage order, as runs in ``seq`` order
    (a run: consecutive rows dropped by one stage)."""
    present = [q for q in parts if q is not None and len(q.row_ids)]
    if len(present) < 2:
        return [_take(q, np.argsort(q.seq, kind="stable")) for q in present]
    owner = np.concatenate([np.full(len(q.row_ids), k) for k, q in enumerate(present)])
    pos = np.concatenate([np.arange(len(q.row_ids)) for q in present])
    order = np.argsort(np.concatenate([q.seq for q in present]), kind="stable")
    owner, pos = owner[order], pos[order]
    cuts = np.flatnonzero(owner[1:] != owner[:-1]) + 1
    return [_take(present[int(o[0])], p) for o, p in
            zip(np.split(owner, cuts), np.split(pos, cuts), strict=True)]


def _take(q: QuarantineRows, idx: np.ndarray) -> QuarantineRows:
    if idx.size == len(q.row_ids) and bool(np.all(idx == np.arange(idx.size))):
        return q
    picks = idx.tolist()
    return QuarantineRows(
        orig=None if q.orig is None else q.orig.take(pa.array(idx)),
        row_ids=[q.row_ids[i] for i in picks], seq=np.asarray(q.seq)[idx], stage=q.stage,
        reasons=[q.reasons[i] for i in picks], details=[q.details[i] for i in picks],
        raw=[q.raw[i] for i in picks] if q.raw else [])
