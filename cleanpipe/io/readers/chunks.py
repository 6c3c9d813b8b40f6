"""What every reader yields: :class:`Chunk` (a record batch with the line or record number
of each row, the records that could not be read, and the fixes the reader made), and how a
shard's rows are cut into chunks of a bounded size."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from cleanpipe.io.empty_objects import without_empty_objects
from cleanpipe.io.line_blocks import (
    DEFAULT_BLOCK_BYTES,
)
from cleanpipe.io.sources import InputError, Shard


@dataclass
class BadRecord:
    """A record that could not be read: where it is and why."""

    shard: str
    line: int
    code: str  # parse_error | decode_error
    message: str
    raw: str | None
    byte_offset: int | None = None


@dataclass
class ReadFix:
    """Rows the reader had to change to store them, all in the same way (a ``fix`` event
    each, so the change is on record)."""

    code: str  # empty_object | decode_repaired | decode_replaced
    field: str | None  # None: the record as a whole (a byte's field is not known)
    detail: str
    rows: np.ndarray  # positions in the chunk's batch


@dataclass
class Chunk:
    shard: Shard
    batch: pa.RecordBatch
    numbers: np.ndarray  # 1-based line or record number of each row
    bad: list[BadRecord] = field(default_factory=list)
    bytes_read: int = 0  # bytes of the shard consumed by this chunk (for progress)
    digest: bytes | None = None  # xxh3-128 of the shard's bytes (first chunk only)
    fixes: list[ReadFix] = field(default_factory=list)
    #: bytes of each row's line (JSON Lines read in blocks): batches end at a byte budget
    row_bytes: np.ndarray | None = None


#: a batch of a JSON Lines file read in blocks ends at ``batch_size`` rows or at this many
#: bytes of its lines, whichever comes first: a big file's batches are then no bigger than
#: a small shard's, so memory does not depend on how the rows are split into files
MAX_BATCH_BYTES = 1 << 20


@dataclass(frozen=True)
class ReadOptions:
    batch_size: int = 4096
    encoding: str = "utf-8"
    on_parse_error: str = "quarantine"  # quarantine | fail
    on_decode_error: str = "replace"  # replace | quarantine | fail
    csv_delimiter: str | None = None
    text_column: str = "text"
    #: JSON Lines files are read in blocks of about this many bytes (see line_blocks)
    block_bytes: int = DEFAULT_BLOCK_BYTES


def _empty_object_fixes(table: pa.Table) -> tuple[pa.Table, list[ReadFix]]:
    """``table`` with ``{}`` stored as null (Parquet has no empty struct), and the fixes
    that record which rows held one, where."""
    table, hits = without_empty_objects(table)
    return table, [ReadFix("empty_object", h.path,
                           f"{{}} at {h.path!r} stored as null: Parquet cannot store an object"
                           " with no keys", h.rows) for h in hits]


def table_chunks(table: pa.Table, numbers: np.ndarray, shard: Shard, bad: list[BadRecord],
             batch_size: int, nbytes: int, notes: Notes | None = None) -> Iterator[Chunk]:
    table, fixes = _empty_object_fixes(table)
    # one fix per noted row, in row order: each batch takes its own by bisection, so a file
    # with many repaired rows costs no more than one pass over them
    noted = _note_fixes(notes, numbers) if notes else []
    noted_at = np.asarray([f.rows[0] for f in noted], np.int64)
    n = table.num_rows
    if n and table.num_columns == 0:
        # every record is {}: there is nothing to keep, and Arrow mis-slices a table without
        # columns (each slice claims batch_size rows), so they go to the quarantine. Where
        # other records have keys, a {} record is a row of nulls, as for any missing key.
        bad = sorted(bad + [BadRecord(shard.name, int(num), "empty_record",
                                      f"record {num} is an empty object: no field to keep",
                                      "{}") for num in numbers.tolist()], key=lambda b: b.line)
        table, numbers, n = pa.table({}), numbers[:0], 0
    if n == 0:
        yield Chunk(shard, pa.RecordBatch.from_pylist([], schema=table.schema), numbers[:0],
                    bad, nbytes)
        return
    table = table.combine_chunks()
    first = True
    for start in range(0, n, batch_size):
        part = table.slice(start, batch_size)
        batch = part.to_batches()[0] if part.num_rows else None
        if batch is None:
            continue
        end = start + batch.num_rows
        here = [ReadFix(f.code, f.field, f.detail, f.rows[(f.rows >= start) & (f.rows < end)]
                        - start) for f in fixes]
        lo, hi = np.searchsorted(noted_at, [start, end]).tolist()
        here += [ReadFix(f.code, f.field, f.detail, f.rows - start) for f in noted[lo:hi]]
        # bad records and the byte count ride on the first chunk of the shard
        yield Chunk(shard, batch, numbers[start:end], bad if first else [],
                    nbytes if first else 0, fixes=[f for f in here if f.rows.size])
        first = False


def line_lengths(data: bytes) -> np.ndarray:
    """Bytes of each line of ``data`` (its line break included)."""
    ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10) + 1
    if not ends.size or ends[-1] != len(data):
        ends = np.append(ends, len(data))
    return np.diff(ends, prepend=0)


def rebatched(chunks: Iterator[Chunk], shard: Shard, batch_size: int,
               max_bytes: int) -> Iterator[Chunk]:
    """``chunks`` (of one shard, read block by block) as batches cut from the shard's start
    at ``batch_size`` rows or ``max_bytes`` bytes of lines, the last one shorter: the same
    batches, fixes and events whatever the block size. Bad records and bytes ride on the
    next batch out."""
    pending: list[Chunk] = []
    sent = False
    for chunk in chunks:
        pending.append(chunk)
        while (n := next_cut([c.row_bytes for c in pending], batch_size, max_bytes)):
            head, tail = _split_chunk(_joined(pending, shard), n)
            yield head
            sent = True
            pending = [tail]
    rows = sum(c.batch.num_rows for c in pending)
    if pending and (rows or not sent or any(c.bad or c.bytes_read for c in pending)):
        yield _joined(pending, shard)


def next_cut(sizes: list[np.ndarray | None], batch_size: int, max_bytes: int) -> int:
    """Rows in the next full batch of rows of these ``sizes`` (bytes each), 0 if none yet.

    >>> next_cut([np.array([5, 5]), np.array([5, 5, 5])], 4, 100)
    4
    >>> next_cut([np.array([60, 50, 5])], 4, 100), next_cut([np.array([60])], 4, 100)
    (2, 0)
    """
    row_bytes = np.concatenate([s for s in sizes if s is not None] or [np.zeros(0, np.int64)])
    over = int(np.searchsorted(np.cumsum(row_bytes[:batch_size]), max_bytes, side="left"))
    if over < min(row_bytes.size, batch_size):
        return over + 1
    return batch_size if row_bytes.size >= batch_size else 0


def _joined(chunks: list[Chunk], shard: Shard) -> Chunk:
    """One chunk of ``chunks`` in order (tables of different blocks unified)."""
    if len(chunks) == 1:
        return chunks[0]
    with_rows = [c for c in chunks if c.batch.num_rows] or chunks[:1]
    schemas = [c.batch.schema for c in with_rows]
    if all(sc.equals(schemas[0]) for sc in schemas):
        table = pa.Table.from_batches([c.batch for c in with_rows], schema=schemas[0])
    else:
        try:
            table = pa.concat_tables([pa.Table.from_batches([c.batch]) for c in with_rows],
                                     promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            nums = np.concatenate([c.numbers for c in chunks])
            lines = f"lines {int(nums.min())}-{int(nums.max())}" if nums.size else "the file"
            raise InputError(f"{shard.path}: a field changes type within {lines} ({e});"
                             " make each field one type in every record") from e
    table = table.combine_chunks()
    batches = table.to_batches()
    batch = batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema)
    # as one table's batches list them: an empty object's fix per path first, then the
    # fixes noted per row, in row order
    empty: dict[tuple[str | None, str], list[np.ndarray]] = {}
    noted: list[ReadFix] = []
    offset = 0
    for c in chunks:
        for f in c.fixes:
            if f.code == "empty_object":
                empty.setdefault((f.field, f.detail), []).append(f.rows + offset)
            else:
                noted.append(ReadFix(f.code, f.field, f.detail, f.rows + offset))
        offset += c.batch.num_rows
    fixes = [ReadFix("empty_object", fld, detail, np.concatenate(rows))
             for (fld, detail), rows in empty.items()] + noted
    sizes = [c.row_bytes for c in chunks if c.row_bytes is not None]
    return Chunk(shard, batch, np.concatenate([c.numbers for c in chunks]),
                 [b for c in chunks for b in c.bad], sum(c.bytes_read for c in chunks),
                 fixes=fixes, row_bytes=np.concatenate(sizes) if sizes else None)


def _split_chunk(chunk: Chunk, n: int) -> tuple[Chunk, Chunk]:
    """The first ``n`` rows of ``chunk`` (with its bad records and bytes), and the rest."""
    head = Chunk(chunk.shard, chunk.batch.slice(0, n), chunk.numbers[:n], chunk.bad,
                 chunk.bytes_read, fixes=[
                     ReadFix(f.code, f.field, f.detail, f.rows[f.rows < n])
                     for f in chunk.fixes if (f.rows < n).any()],
                 row_bytes=None if chunk.row_bytes is None else chunk.row_bytes[:n])
    tail = Chunk(chunk.shard, chunk.batch.slice(n), chunk.numbers[n:], [], 0, fixes=[
        ReadFix(f.code, f.field, f.detail, f.rows[f.rows >= n] - n)
        for f in chunk.fixes if (f.rows >= n).any()],
        row_bytes=None if chunk.row_bytes is None else chunk.row_bytes[n:])
    return head, tail


#: changes the reader made to a record before it could store it: record number ->
#: ``(code, detail)`` of each, recorded as ``fix`` events of the rows kept
Notes = dict[int, list[tuple[str, str]]]


def _note_fixes(notes: Notes, numbers: np.ndarray) -> list[ReadFix]:
    """One :class:`ReadFix` per kept record and code, in row order (a quarantined record
    keeps its raw text instead)."""
    fixes = []
    for num in sorted(notes):
        pos = int(np.searchsorted(numbers, num))
        if pos >= numbers.size or numbers[pos] != num:
            continue
        by_code: dict[str, list[str]] = {}
        for code, detail in notes[num]:
            by_code.setdefault(code, []).append(detail)
        fixes += [ReadFix(code, None, "; ".join(ds), np.array([pos], np.int64))
                  for code, ds in by_code.items()]
    return fixes
