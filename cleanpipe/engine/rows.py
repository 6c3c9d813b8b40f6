"""The unit the engine moves around: a batch of rows with their provenance.

``data`` is the current (possibly rewritten) batch, ``orig`` the same rows as read (what the
quarantine stores), ``row_ids`` the stable id of each row and ``seq`` its position in read
order. Every operation keeps the four aligned.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa


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

    @property
    def num_rows(self) -> int:
        return self.data.num_rows

    def take_mask(self, keep: np.ndarray) -> Rows:
        mask = pa.array(keep, pa.bool_())
        return Rows(
            self.data.filter(mask), self.orig.filter(mask), self.row_ids.filter(mask),
            self.seq[keep], self.shard, None if self.flags is None else self.flags[keep],
            self.unreadable, None if self.chars is None else self.chars[keep],
            self.read_events,
        )


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
