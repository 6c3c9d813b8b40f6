"""Where a run's rows go: the output folder's layout, and the in-memory result.

``cleanpipe run`` writes (into a temporary folder that replaces the output at the end)::

    data/             kept rows: train-*.parquet or .jsonl parts, or an HF dataset (format: hf)
    quarantine/       dropped rows as read, plus _cleanpipe_* columns (the data's format)
    events.parquet    one row per change, drop and flag (output.events)
    README.md         a dataset card naming both (not with format: hf, which has its own)

(the reports next to them are written by :mod:`cleanpipe.report`). Rows arrive through the
three sinks an engine calls (``kept``, ``quarantine``, ``events``, as in
:class:`cleanpipe.engine.core.Sinks`): :class:`OutputFolder` writes them, :class:`InMemory`
keeps them for :meth:`cleanpipe.Pipeline.clean`. Both take any object with the engine's
row attributes (:class:`KeptRows`, :class:`DroppedRows`).

    >>> import tempfile
    >>> from types import SimpleNamespace as Rows
    >>> tmp = Path(tempfile.mkdtemp())
    >>> out = OutputFolder(tmp, fmt="jsonl", rows_per_part=1000, flag_column=None, events=False)
    >>> out.kept(Rows(data=pa.record_batch({"text": ["a"]}), flags=None, shard="in.jsonl"))
    >>> out.close(None)
    >>> sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.is_file())
    ['README.md', 'data/train-00000-of-00001.jsonl', 'quarantine/quarantine-00000-of-00001.jsonl']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cleanpipe.io.writers import FixedGroupWriter, PartWriter, dataset_card, write_hf_dataset

EVENTS_SCHEMA = pa.schema([
    ("row_id", pa.string()), ("seq", pa.int64()), ("stage", pa.string()), ("code", pa.string()),
    ("action", pa.string()), ("field", pa.string()), ("detail", pa.string()),
])


class KeptRows(Protocol):
    """Kept rows as an engine hands them on (:class:`cleanpipe.engine.rows.Rows`)."""

    data: pa.RecordBatch
    #: flagged codes per row, when the output asks for a flag column
    flags: np.ndarray | None
    #: the input shard the rows came from
    shard: str


class DroppedRows(Protocol):
    """Quarantined rows (:class:`cleanpipe.engine.rows.QuarantineRows`)."""

    orig: pa.RecordBatch | None
    row_ids: list[str]
    stage: str
    reasons: list[list[str]]
    details: list[list[str]]
    raw: list[str | None]


def _quarantine_columns(orig: pa.RecordBatch | None, row_ids: Sequence[str], stage: str,
                        reasons: Sequence[list[str]], details: Sequence[list[str]],
                        raw: Sequence[str | None]) -> pa.RecordBatch:
    n = len(row_ids)
    meta = {
        "_cleanpipe_row_id": pa.array(row_ids, pa.string()),
        "_cleanpipe_stage": pa.array([stage] * n, pa.string()),
        "_cleanpipe_reasons": pa.array(reasons, pa.list_(pa.string())),
        "_cleanpipe_details": pa.array(details, pa.list_(pa.string())),
        "_cleanpipe_raw": pa.array(raw if raw else [None] * n, pa.string()),
    }
    if orig is None:
        return pa.RecordBatch.from_pydict(meta)
    cols = list(orig.columns) + list(meta.values())
    names = list(orig.schema.names) + list(meta)
    return pa.RecordBatch.from_arrays(cols, names=names)


def quarantine_batch(q: DroppedRows) -> pa.RecordBatch:
    """Dropped rows as read, plus row id, dropping stage, reason codes, details, raw text."""
    return _quarantine_columns(q.orig, q.row_ids, q.stage, q.reasons, q.details, q.raw)


def empty_quarantine() -> pa.RecordBatch:
    """A quarantine batch with no rows: the schema of a quarantine with nothing in it.

        >>> empty_quarantine().schema.names[-1]
        '_cleanpipe_raw'
    """
    return _quarantine_columns(None, [], "", [], [], [])


def kept_batch(rows: KeptRows, flag_column: str | None) -> pa.RecordBatch:
    """Kept rows as written: with ``flag_column`` (the row's flag codes) when configured."""
    if not flag_column:
        return rows.data
    flags = rows.flags if rows.flags is not None else np.empty(rows.data.num_rows, dtype=object)
    arr = pa.array([f if f is not None else [] for f in flags.tolist()], pa.list_(pa.string()))
    return rows.data.append_column(flag_column, arr)


def kept_schema(input_schema: pa.Schema | None, flag_column: str | None) -> pa.Schema | None:
    """The schema of an empty result: the input's, plus the flag column when configured."""
    if input_schema is not None and flag_column:
        return input_schema.append(pa.field(flag_column, pa.list_(pa.string())))
    return input_schema


class OutputFolder:
    """The sinks of a run writing into ``root`` (see the module docstring for the layout).

    ``fmt`` is ``parquet``, ``jsonl`` or ``hf``; ``rows_per_part`` bounds a data part;
    ``flag_column`` adds each kept row's flag codes; ``events`` writes events.parquet.
    :meth:`close` finishes every file once the run is over.
    """

    def __init__(self, root: Path, *, fmt: str, rows_per_part: int,
                 flag_column: str | None, events: bool) -> None:
        self.root = root
        self.fmt = fmt
        self.flag_column = flag_column
        # the quarantine in the data's format: datasets reads one format per dataset card
        self.ext = "jsonl" if fmt == "jsonl" else "parquet"
        self.data_dir = root / "data"
        # an HF dataset is built from parquet parts once they are all written
        self.parts_dir = root / ".hf-parts" if fmt == "hf" else self.data_dir
        self.data_w = PartWriter(self.parts_dir, "train", self.ext, rows_per_part)
        self.quarantine_w = PartWriter(root / "quarantine", "quarantine", self.ext)
        self.write_events = events
        self.events_w: FixedGroupWriter | None = None

    def kept(self, rows: KeptRows) -> None:
        self.data_w.write(kept_batch(rows, self.flag_column), rows.shard)

    def quarantine(self, q: DroppedRows) -> None:
        self.quarantine_w.write(quarantine_batch(q), q.stage)

    def events(self, table: pa.Table) -> None:
        if self.events_w is None:
            self.events_w = FixedGroupWriter(self.root / "events.parquet", EVENTS_SCHEMA,
                                             compression="zstd")
        self.events_w.write_table(table.cast(EVENTS_SCHEMA))

    @property
    def events_sink(self) -> Callable[[pa.Table], None] | None:
        """:meth:`events` when the output keeps events, else ``None`` (none are built)."""
        return self.events if self.write_events else None

    def close(self, input_schema: pa.Schema | None) -> None:
        """Finish every file; ``input_schema`` gives an empty result its columns."""
        parts = self.data_w.close(kept_schema(input_schema, self.flag_column))
        q_parts = self.quarantine_w.close(empty_quarantine().schema)
        if self.events_w is not None:
            self.events_w.close()
        elif self.write_events:
            pq.write_table(EVENTS_SCHEMA.empty_table(), self.root / "events.parquet")
        if self.fmt == "hf":
            write_hf_dataset(parts, self.data_dir)
            for p in parts:
                p.unlink()
            self.parts_dir.rmdir()
            return
        (self.root / "README.md").write_text(
            dataset_card(f"data/*.{self.ext}", f"quarantine/*.{self.ext}",
                         self.data_w.schema, self.quarantine_w.schema if q_parts else None),
            encoding="utf-8")


class InMemory:
    """The sinks of a run kept in memory: kept and dropped rows as record batches."""

    def __init__(self, flag_column: str | None) -> None:
        self.flag_column = flag_column
        self.kept_batches: list[pa.RecordBatch] = []
        self.dropped_batches: list[pa.RecordBatch] = []

    def kept(self, rows: KeptRows) -> None:
        self.kept_batches.append(kept_batch(rows, self.flag_column))

    def quarantine(self, q: DroppedRows) -> None:
        self.dropped_batches.append(quarantine_batch(q))
