"""The unit the engine moves around: a batch of rows with their provenance.

``data`` is the current (possibly rewritten) batch, ``orig`` the same rows as read (what the
quarantine stores), ``row_ids`` the stable id of each row and ``seq`` its position in read
order. Every operation keeps the four aligned, and the per-row values that travel with them
(``flags``; ``chars`` and ``figures``, which no written file holds).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa

from cleanpipe.contract.published import RowValues
from cleanpipe.engine.read_notes import ReadNotes
from cleanpipe.io.readers.chunks import MAX_BATCH_BYTES


@dataclass
class Rows:
    data: pa.RecordBatch
    orig: pa.RecordBatch
    row_ids: pa.Array
    seq: np.ndarray
    shard: str = ""
    #: flagged codes per row (only kept when the output asks for a flag column)
    flags: np.ndarray | None = None
    #: records of the same chunk that could not be read; travel with the batch so the
    #: quarantine's order does not depend on how far reading runs ahead of the workers
    unreadable: QuarantineRows | None = None
    #: characters per row as read (for the before/after histograms)
    chars: np.ndarray | None = None
    #: events of the changes the reader made to these rows (``{}`` stored as null); they
    #: travel with the batch, like ``unreadable``, so the events file keeps read order
    read_events: pa.Table | None = None
    #: stages' "after" figures per row (:class:`RowFigures`), totalled over the rows written
    figures: RowFigures | None = None
    #: what reading the batch found, for the driver's counters (taken when merged)
    read_notes: ReadNotes | None = None

    @property
    def num_rows(self) -> int:
        return self.data.num_rows

    @property
    def nbytes(self) -> int:
        """About the bytes the rows carry: their columns as they are now (the rows as read,
        kept for the quarantine, are not counted)."""
        return self.data.nbytes

    def split_off_columns(self) -> tuple[Rows, Rows]:
        """These rows as two parts: what the driver merges (ids, ``seq`` and what reading
        found; ``data`` and ``orig`` only count the rows, in one null column), and
        the rows to clean on (everything else), where a distributed engine leaves them.

            >>> b = pa.record_batch({"t": ["a", "b"]})
            >>> here, there = Rows(b, b, pa.array(["f:1", "f:2"]), np.arange(2)).split_off_columns()
            >>> here.num_rows, here.data.schema.names, there.data.schema.names
            (2, ['rows'], ['t'])
        """
        count = _row_count(self.num_rows)
        here = Rows(count, count, self.row_ids, self.seq, self.shard,
                    unreadable=self.unreadable, read_events=self.read_events,
                    read_notes=self.read_notes)
        there = Rows(self.data, self.orig, self.row_ids, self.seq, self.shard, self.flags,
                     chars=self.chars, figures=self.figures)
        return here, there

    def without_orig(self) -> Rows:
        """These rows with only the count of the rows as read: what a last segment hands
        back, once no stage can quarantine them. On t0 the rows as read were half of the
        bytes a last segment's task sent to the driver, for nothing.

            >>> b = pa.record_batch({"t": ["a", "b"]})
            >>> r = Rows(b, b, pa.array(["f:1", "f:2"]), np.arange(2)).without_orig()
            >>> r.data.schema.names, r.orig.schema.names, r.orig.num_rows
            (['t'], ['rows'], 2)
        """
        return replace(self, orig=_row_count(self.num_rows))

    def take_mask(self, keep: np.ndarray) -> Rows:
        mask = pa.array(keep, pa.bool_())
        return Rows(
            self.data.filter(mask), self.orig.filter(mask), self.row_ids.filter(mask),
            self.seq[keep], self.shard, None if self.flags is None else self.flags[keep],
            self.unreadable, None if self.chars is None else self.chars[keep],
            self.read_events, None if self.figures is None else self.figures.take_mask(keep),
            self.read_notes,
        )


def _same_kind(a: Rows, b: Rows) -> bool:
    """Whether ``b`` can join ``a`` in one batch: the same columns and types, the rows as
    read kept the same way, the same per-row values, and nothing the driver merges."""
    def shape(r: Rows) -> tuple[Any, ...]:
        fig = None if r.figures is None else r.figures.shape()
        return (r.orig is r.data, r.flags is None, r.chars is None, fig)

    return (a.unreadable is None and b.unreadable is None and a.read_events is None
            and b.read_events is None and a.read_notes is None and b.read_notes is None
            and shape(a) == shape(b) and a.data.schema.equals(b.data.schema, True)
            and a.orig.schema.equals(b.orig.schema, True))


def joined(parts: list[Rows]) -> Rows:
    """Consecutive batches of the same kind (:func:`coalesced`) as one; its ``shard`` is
    the first batch's (one of the files the rows came from, whose columns they all have).

        >>> b = pa.record_batch({"t": ["a", "b"]})
        >>> r = joined([Rows(b, b, pa.array(["f:1", "f:2"]), np.arange(2), "f"),
        ...             Rows(b, b, pa.array(["g:1", "g:2"]), np.arange(2, 4), "g")])
        >>> r.num_rows, r.row_ids.to_pylist(), r.seq.tolist(), r.shard, r.orig is r.data
        (4, ['f:1', 'f:2', 'g:1', 'g:2'], [0, 1, 2, 3], 'f', True)
    """
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    data = pa.concat_batches([p.data for p in parts])
    # the rows as read are often the very batch (nothing rewrote them): kept one object, so
    # pickling (Ray, the local engine's pipes) carries their bytes once
    orig = data if first.orig is first.data else pa.concat_batches([p.orig for p in parts])
    return Rows(
        data, orig, pa.concat_arrays([p.row_ids for p in parts]),
        np.concatenate([p.seq for p in parts]), first.shard,
        None if first.flags is None else np.concatenate([p.flags for p in parts]),
        chars=None if first.chars is None else np.concatenate([p.chars for p in parts]),
        figures=None if first.figures is None else RowFigures.concat(
            [p.figures for p in parts if p.figures is not None]))


def coalesced(parts: list[Rows], max_rows: int, max_bytes: int = MAX_BATCH_BYTES) -> list[Rows]:
    """``parts`` (consecutive batches, in order) with each run of batches of the same kind
    joined into one of up to ``max_rows`` rows and ``max_bytes`` bytes, the bounds of a
    batch as read (a batch over either stays as it is): where a corpus of many small files
    is read one small batch a file, what waits between two passes is a few batches a task,
    not one a file, and each costs its own pickling and bookkeeping in every pass after.
    The byte bound keeps the later stages' working memory that of a batch as read.

        >>> b, c = pa.record_batch({"t": ["a"]}), pa.record_batch({"n": [1]})
        >>> parts = [Rows(x, x, pa.array(["i"]), np.array([k])) for k, x in enumerate([b, b, c, b])]
        >>> [r.num_rows for r in coalesced(parts, 4)], [r.num_rows for r in coalesced(parts, 1)]
        ([2, 1, 1], [1, 1, 1, 1])
        >>> [r.num_rows for r in coalesced(parts[:2], 4, max_bytes=b.nbytes)]
        [1, 1]
    """
    out: list[list[Rows]] = []
    rows = nbytes = 0
    for p in parts:
        if (out and rows + p.num_rows <= max_rows and nbytes + p.nbytes <= max_bytes
                and _same_kind(out[-1][-1], p)):
            out[-1].append(p)
            rows += p.num_rows
            nbytes += p.nbytes
        else:
            out.append([p])
            rows, nbytes = p.num_rows, p.nbytes
    return [joined(run) for run in out]


def _row_count(n: int) -> pa.RecordBatch:
    # a null column keeps the row count: a batch of no columns is read back empty
    return pa.RecordBatch.from_arrays([pa.nulls(n)], names=["rows"])


@dataclass
class RowFigures:
    """The "after" figures of the stages that measured these rows, one value per row
    (``BatchResult.per_row``), by stage index, carried with the rows to the output so the
    report totals them over the rows written; and, per stage, the rows a later stage
    rewrote since it measured them (:meth:`changed`): their values are stale until
    :meth:`remeasured`.

        >>> from cleanpipe.contract.published import RowValues
        >>> f = RowFigures().measured(3, {"total_tokens_after": RowValues(np.array([5, 6, 7]))})
        >>> f = f.changed(np.array([2])).take_mask(np.array([True, False, True]))
        >>> f.stale_rows(3).tolist()
        [1]
        >>> f = f.remeasured(3, np.array([1]), {"total_tokens_after": RowValues(np.array([9]))})
        >>> f.metrics()
        {3: {'total_tokens_after': {'value': 14, 'bounded_rows': 0}}}
    """

    values: dict[int, dict[str, RowValues]] = field(default_factory=dict)
    stale: dict[int, np.ndarray] = field(default_factory=dict)

    def shape(self) -> tuple[Any, ...]:
        """The stages and figures held: batches of the same shape can be joined."""
        return tuple((i, tuple(per)) for i, per in self.values.items()) + tuple(self.stale)

    @staticmethod
    def concat(parts: list[RowFigures]) -> RowFigures:
        """The figures of consecutive batches of the same :meth:`shape`, as one batch's."""
        first = parts[0]
        return RowFigures(
            {i: {k: RowValues.concat([p.values[i][k] for p in parts]) for k in per}
             for i, per in first.values.items()},
            {i: np.concatenate([p.stale[i] for p in parts]) for i in first.stale})

    def take_mask(self, keep: np.ndarray) -> RowFigures:
        return RowFigures({i: {k: v.take(keep) for k, v in per.items()}
                           for i, per in self.values.items()},
                          {i: s[keep] for i, s in self.stale.items()})

    def measured(self, stage: int, per_row: dict[str, RowValues]) -> RowFigures:
        """With stage ``stage``'s values of every row, fresh."""
        n = len(next(iter(per_row.values())))
        return RowFigures({**self.values, stage: dict(per_row)},
                          {**self.stale, stage: np.zeros(n, dtype=bool)})

    def changed(self, positions: np.ndarray) -> RowFigures:
        """With the rows at ``positions`` rewritten: every value so far stale on them."""
        stale = {}
        for i, s in self.stale.items():
            s = s.copy()
            s[positions] = True
            stale[i] = s
        return RowFigures(self.values, stale)

    def stale_rows(self, stage: int) -> np.ndarray:
        """Positions of the rows rewritten after stage ``stage`` measured them."""
        return np.flatnonzero(self.stale[stage])

    def remeasured(self, stage: int, positions: np.ndarray,
                   per_row: dict[str, RowValues]) -> RowFigures:
        """With stage ``stage``'s values of the rows at ``positions`` measured again."""
        stale = self.stale[stage].copy()
        stale[positions] = False
        values = {k: v.put(positions, per_row[k]) for k, v in self.values[stage].items()}
        return RowFigures({**self.values, stage: values}, {**self.stale, stage: stale})

    def metrics(self) -> dict[int, dict[str, Any]]:
        """Each stage's figures as summable metrics (``RowValues.metrics``), over these rows."""
        return {i: {k: v.metrics(k) for k, v in per.items()} for i, per in self.values.items()}


@dataclass
class QuarantineRows:
    """Dropped rows as read, with why: one entry per row, reasons joined per stage."""

    orig: pa.RecordBatch | None
    row_ids: list[str]
    seq: np.ndarray
    stage: str
    reasons: list[list[str]]
    details: list[list[str]]
    raw: list[str | None] = field(default_factory=list)
