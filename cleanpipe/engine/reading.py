"""Reading for every engine: the input's shards, in order, as :class:`Rows` with ids and
sequence numbers, and the input's fingerprint.

Both engines read on the driver with this function, so row ids (``file:line``), ``seq`` and
the read counters are the same whichever engine runs the stages.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cleanpipe.engine.core import RunState
from cleanpipe.engine.progress import Progress
from cleanpipe.engine.rows import QuarantineRows, Rows
from cleanpipe.fault_points import pause_point
from cleanpipe.io.filesystems import is_local, iter_blocks, read_bytes, reason
from cleanpipe.io.line_blocks import block_bytes_from_env
from cleanpipe.io.readers import Chunk, ReadOptions, read_shard
from cleanpipe.io.schemas import check_fields_seen, with_text_fields
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


def _read_fix_events(chunk: Chunk, ids: pa.Array, seq: np.ndarray, state: RunState,
                     examples: list[dict[str, Any]]) -> pa.Table:
    """Count the reader's changes to ``chunk`` and return one ``fix`` event per row and
    field; the first few go to ``examples`` (a shard's, added after its unreadable records)."""
    pos = np.concatenate([f.rows for f in chunk.fixes]).astype(np.int64)
    for f in chunk.fixes:
        entry = state.read_fixes.setdefault(f.code, [0, 0])
        entry[0] += int(f.rows.size)
        shown = sum(1 for e in (*state.read_examples, *examples) if e["code"] == f.code)
        for p in f.rows[:max(0, 5 - shown)].tolist():
            examples.append({
                "stage": "read", "code": f.code, "action": "fix", "row_id": ids[p].as_py(),
                "field": f.field, "detail": f.detail, "before": None, "after": None})
    for code in {f.code for f in chunk.fixes}:
        rows = [f.rows for f in chunk.fixes if f.code == code]
        state.read_fixes[code][1] += int(np.unique(np.concatenate(rows)).size)
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


def read_rows(spec: PipelineSpec, source: Any, state: RunState,
              progress: Progress) -> Iterator[Rows]:
    """Rows of every shard in order, with ids and sequence numbers; records that cannot be
    read ride along in ``Rows.unreadable``."""
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
    seen: set[str] = set()  # columns some file has: a text field in none is a typo
    for shard in shards:
        state.shards += 1
        shard = _fetch_once(shard)
        _fingerprint_shard(state, shard)
        top = 0
        # examples of the reader's fixes follow the shard's unreadable records, wherever
        # in the file (in whichever block) those are found
        fix_examples: list[dict[str, Any]] = []
        for chunk in read_shard(shard, opts):
            progress.advance_bytes(chunk.bytes_read)
            n = chunk.batch.num_rows
            unreadable = None
            if chunk.bad:
                state.read += len(chunk.bad)
                for b in chunk.bad:
                    state.read_codes[b.code] = state.read_codes.get(b.code, 0) + 1
                    if sum(1 for e in state.read_examples if e["code"] == b.code) < 5:
                        state.read_examples.append({
                            "stage": "read", "code": b.code, "action": "drop",
                            "row_id": f"{b.shard}:{b.line}", "field": None,
                            "detail": b.message, "before": (b.raw or "")[:300], "after": None})
                unreadable = (QuarantineRows(
                    orig=None, row_ids=[f"{b.shard}:{b.line}" for b in chunk.bad],
                    seq=base + np.asarray([b.line for b in chunk.bad], dtype=np.int64),
                    stage="read", reasons=[[b.code] for b in chunk.bad],
                    details=[[f"{b.code}: {b.message}"] for b in chunk.bad],
                    raw=[b.raw for b in chunk.bad]))
            if state.input_schema is None and chunk.batch.num_columns:
                # an empty file with a header still says what an empty output looks like
                state.input_schema = chunk.batch.schema
            top = max([top, *(b.line for b in chunk.bad),
                       int(chunk.numbers.max()) if n else 0])
            if n == 0:
                if unreadable is not None:
                    empty = pa.RecordBatch.from_pylist([])
                    yield Rows(empty, empty, pa.array([], pa.string()), np.zeros(0, np.int64),
                               shard.name, None, unreadable)
                continue
            ids = _row_ids(chunk, inp.id_field)
            seq = base + np.asarray(chunk.numbers, dtype=np.int64)
            seen.update(chunk.batch.schema.names)
            # a text field missing from a whole file reads as nulls, as a missing key does
            batch = compact(with_text_fields(chunk.batch, spec.fields or state.text_fields))
            rows = Rows(batch, batch, ids, seq, shard.name, None, unreadable)
            if chunk.fixes:
                rows.read_events = _read_fix_events(chunk, ids, seq, state, fix_examples)
            state.read += n
            progress.advance_rows(n)
            if state.read > n:  # the second batch: the workers have the first
                pause_point("read")
            yield rows
        state.read_examples.extend(fix_examples)
        base += top + 1
    if spec.fields and seen:
        check_fields_seen(spec.fields, seen)
