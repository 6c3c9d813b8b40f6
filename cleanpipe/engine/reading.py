"""Reading for every engine: the input's shards, in order, as :class:`Rows` with ids and
sequence numbers (or, for a big JSON Lines file, as pieces the workers parse:
:class:`PieceRead`), and the input's fingerprint.

Both engines read with this function, so row ids (``file:line``), ``seq`` and the read
counters (:mod:`cleanpipe.engine.read_notes`) are the same whichever engine runs the
stages, and wherever a batch is parsed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cleanpipe.engine.core import RunState
from cleanpipe.engine.progress import Progress
from cleanpipe.engine.read_notes import notes_of
from cleanpipe.engine.rows import QuarantineRows, Rows
from cleanpipe.fault_points import pause_point
from cleanpipe.io.filesystems import is_local, iter_blocks, read_bytes, reason
from cleanpipe.io.line_blocks import block_bytes_from_env
from cleanpipe.io.readers import Chunk, ReadOptions, read_shard
from cleanpipe.io.readers.jsonl import JsonlPiece, jsonl_pieces, piece_chunks, streams_utf8
from cleanpipe.io.schemas import with_text_fields
from cleanpipe.io.sources import WHOLE_FILE_FORMATS, InputError, Shard, resolve_sources
from cleanpipe.spec import PipelineSpec


def _row_ids(chunk: Chunk, id_field: str | None) -> pa.Array:
    if id_field:
        idx = chunk.batch.schema.get_field_index(id_field)
        if idx < 0:
            raise InputError(f"{chunk.shard.path or chunk.shard.name}: no column {id_field!r}"
                             f" (input.id_field); columns: {', '.join(chunk.batch.schema.names)}")
        return chunk.batch.column(idx).cast(pa.string())
    nums = pa.array(chunk.numbers).cast(pa.string())
    return pc.binary_join_element_wise(f"{chunk.shard.name}:", nums, "")


def _fix_events(chunk: Chunk, ids: pa.Array, seq: np.ndarray) -> pa.Table:
    """One ``fix`` event per row and field the reader changed in ``chunk``."""
    pos = np.concatenate([f.rows for f in chunk.fixes]).astype(np.int64)
    n = pos.size
    return pa.table({
        "row_id": ids.take(pa.array(pos)),
        "seq": pa.array(seq[pos], pa.int64()),
        "stage": pa.array(["read"] * n, pa.string()),
        "code": pa.array([f.code for f in chunk.fixes for _ in range(f.rows.size)], pa.string()),
        "action": pa.array(["fix"] * n, pa.string()),
        "field": pa.array([f.field for f in chunk.fixes for _ in range(f.rows.size)],
                          pa.string()),
        "detail": pa.array([f.detail for f in chunk.fixes for _ in range(f.rows.size)],
                           pa.string()),
    })


def rows_of_chunk(chunk: Chunk, base: int, id_field: str | None,
                  fields: list[str]) -> Rows:
    """``chunk`` as the engine's :class:`Rows`: ids, ``seq`` (``base`` + the line or record
    number), the text ``fields`` present, its unreadable records in ``unreadable``, the
    reader's fixes as events, and its :class:`ReadNotes` for the driver's counters. A chunk
    without rows gives empty Rows (its unreadable records and notes still count)."""
    shard = chunk.shard
    unreadable = None
    if chunk.bad:
        unreadable = QuarantineRows(
            orig=None, row_ids=[f"{b.shard}:{b.line}" for b in chunk.bad],
            seq=base + np.asarray([b.line for b in chunk.bad], dtype=np.int64),
            stage="read", reasons=[[b.code] for b in chunk.bad],
            details=[[f"{b.code}: {b.message}"] for b in chunk.bad],
            raw=[b.raw for b in chunk.bad])
    n = chunk.batch.num_rows
    if n == 0:
        empty = pa.RecordBatch.from_pylist([])
        rows = Rows(empty, empty, pa.array([], pa.string()), np.zeros(0, np.int64),
                    shard.name, None, unreadable)
        rows.read_notes = notes_of(shard.name, 0, chunk.bad, [], rows.row_ids,
                                   chunk.batch.schema)
        return rows
    ids = _row_ids(chunk, id_field)
    seq = base + np.asarray(chunk.numbers, dtype=np.int64)
    # a text field missing from a whole file reads as nulls, as a missing key does
    batch = compact(with_text_fields(chunk.batch, fields))
    rows = Rows(batch, batch, ids, seq, shard.name, None, unreadable)
    if chunk.fixes:
        rows.read_events = _fix_events(chunk, ids, seq)
    rows.read_notes = notes_of(shard.name, n, chunk.bad, chunk.fixes, ids, chunk.batch.schema)
    return rows


def _top(chunk: Chunk) -> int:
    """The last line (or record) number of ``chunk``, bad records included (0: none)."""
    return max([0, *(b.line for b in chunk.bad),
                int(chunk.numbers.max()) if chunk.batch.num_rows else 0])


@dataclass
class PieceRead:
    """Batches still to be read: one piece of a JSON Lines file (whole lines, cut on the
    driver), parsed, numbered and cut into batches by :meth:`read` wherever they are
    cleaned, so the workers parse a big file in parallel. ``num_rows``: its lines, an upper
    bound of its rows."""

    shard: Shard
    piece: JsonlPiece
    opts: ReadOptions
    base: int  # the shard's first seq
    id_field: str | None
    fields: list[str]

    @property
    def num_rows(self) -> int:
        return self.piece.lines

    @property
    def nbytes(self) -> int:
        return self.piece.stored[0] if self.piece.stored is not None else len(self.piece.data)

    def read(self) -> list[Rows]:
        return [rows_of_chunk(c, self.base, self.id_field, self.fields)
                for c in piece_chunks(self.shard, self.piece, self.opts)]


def compact(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` in buffers of its own when it is a slice of larger ones (a batch of a big
    file's table): pickling a slice sends the whole buffers, so every task, result and spill
    of a big file would carry all of its rows.

        >>> big = pa.RecordBatch.from_pydict({"t": ["x" * 100] * 1000})
        >>> part = compact(big.slice(0, 10))
        >>> part.get_total_buffer_size() < big.get_total_buffer_size() // 10
        True
    """
    if batch.get_total_buffer_size() <= 2 * batch.nbytes + 4096:
        return batch
    return batch.take(pa.array(np.arange(batch.num_rows, dtype=np.int64)))


def _fingerprint_shard(state: RunState, shard: Shard) -> None:
    h = state.fingerprint
    h.update(shard.name.encode())
    if shard.revision is not None:  # a streamed Hub dataset: its commit names its content
        state.revisions[shard.name] = shard.revision
        h.update(shard.revision.encode())
        return
    if shard.path is None:
        return
    if shard.prefetched is not None:
        h.update(shard.prefetched)
        return
    try:
        for block in iter_blocks(shard.filesystem, shard.open_path):
            h.update(block)
    except OSError as e:
        raise InputError(f"{shard.path}: cannot read: {reason(e)}") from e


def _fetch_once(shard: Shard) -> Shard:
    """A remote shard whose reader takes all its bytes anyway, with the bytes attached: one
    download serves the fingerprint and the reader (local files are read from disk twice,
    which the page cache makes cheap)."""
    if is_local(shard.filesystem) or shard.format not in WHOLE_FILE_FORMATS:
        return shard
    try:
        return replace(shard, prefetched=read_bytes(shard.filesystem, shard.open_path))
    except OSError as e:
        raise InputError(f"{shard.path}: cannot read: {reason(e)}") from e


def read_rows(spec: PipelineSpec, source: Any, state: RunState, progress: Progress,
              by_range: bool = False) -> Iterator[Rows | PieceRead]:
    """Every shard's batches in order: :class:`Rows` with ids and sequence numbers (records
    that cannot be read ride along in ``Rows.unreadable``), each with the
    :class:`~cleanpipe.engine.read_notes.ReadNotes` the driver counts when it merges the
    batch's results.

    A UTF-8 JSON Lines file is cut here into pieces of a batch's lines; once a batch with
    rows was read here (its schema names the text fields, its rows warm the workers up), the
    pieces go out unparsed (:class:`PieceRead`), to be parsed where they are cleaned. With
    ``by_range`` (the workers run on this machine) a piece of an uncompressed local file goes
    out without its bytes: the worker reads them from the file (``JsonlPiece.by_range``)."""
    inp = spec.input
    opts = ReadOptions(batch_size=spec.batch_size, encoding=inp.encoding,
                       on_parse_error=inp.on_parse_error, on_decode_error=inp.on_decode_error,
                       csv_delimiter=inp.csv_delimiter, text_column=inp.text_column,
                       block_bytes=block_bytes_from_env())
    shards = resolve_sources(source, inp.format)
    state.input_bytes = sum(s.size for s in shards)
    progress.set_total_bytes(state.input_bytes)
    # seq = the shard's base + the record's line (or record) number: ordered, unique, and
    # independent of the batch size (bad records of a shard ride on its first chunk, so a
    # running counter would number them differently with every batch size)
    base = 0
    sent = 0  # batches with rows (or still to read) handed out
    for shard in shards:
        state.shards += 1
        shard = _fetch_once(shard)
        _fingerprint_shard(state, shard)
        top = 0
        for unit in _units(shard, opts):
            if isinstance(unit, JsonlPiece):
                progress.advance_bytes(unit.raw_bytes)
                if sent and not unit.whole:
                    top = max(top, unit.last_record_line())
                    sent = _hand_out(sent)
                    sent_shard = replace(shard, prefetched=None, obj=None)
                    if by_range and shard.compression is None and is_local(shard.filesystem) \
                            and shard.prefetched is None:
                        unit = unit.by_range()
                        # a worker may run in another folder (a Ray node started elsewhere)
                        sent_shard = replace(sent_shard,
                                             fs_path=os.path.abspath(shard.open_path))
                    # the task carries what parsing needs, not the shard's prefetched bytes
                    yield PieceRead(sent_shard, unit, opts, base, inp.id_field,
                                    spec.fields or state.text_fields)
                    continue
                chunks = piece_chunks(shard, unit, opts)
            else:
                progress.advance_bytes(unit.bytes_read)
                chunks = iter((unit,))
            for chunk in chunks:
                top = max(top, _top(chunk))
                rows = rows_of_chunk(chunk, base, inp.id_field, spec.fields or state.text_fields)
                if rows.num_rows:
                    sent = _hand_out(sent)
                yield rows
        base += top + 1


def _hand_out(sent: int) -> int:
    """The count of batches handed out, one more; before the second, the fault point
    ``read`` (the first is read; it may still wait to share a task with the next ones)."""
    if sent == 1:
        pause_point("read")
    return sent + 1


def _units(shard: Shard, opts: ReadOptions) -> Iterator[Chunk | JsonlPiece]:
    """A shard as the reader's chunks, or, for a UTF-8 JSON Lines file, as pieces of a
    batch's lines each."""
    if shard.format == "jsonl" and streams_utf8(opts):
        return jsonl_pieces(shard, opts, batches=True)
    return read_shard(shard, opts)
