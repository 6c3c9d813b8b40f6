"""Read shards as Arrow record batches, with the line/row number of every record.

Each reader yields :class:`Chunk` objects: a record batch, the 1-based line (JSONL) or record
number (other formats) of each row, and the records that could not be parsed, so the engine
can quarantine them with file, line and the parser's message instead of losing them.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.jsonl"
    >>> _ = p.write_bytes(b'{"a": "1"}\\n\\n{"a": "2\\xe2\\x80\\xa8"}\\n{oops\\n')
    >>> t = read_table(p)
    >>> t.column("a").to_pylist()
    ['1', '2\\u2028']
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from cleanpipe.io.empty_objects import without_empty_objects
from cleanpipe.io.filesystems import is_local, read_bytes, reason
from cleanpipe.io.line_blocks import (
    DEFAULT_BLOCK_BYTES,
    decompressing,
    line_blocks,
)
from cleanpipe.io.sources import InputError, Shard, resolve_sources
from cleanpipe.io.type_clashes import (
    first_clashes,
    first_out_of_range,
    float_paths,
    json_kind,
    parse_float,
)
from cleanpipe.io.utf8_repair import invalid_ranges, mend


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


def _open_stream(shard: Shard) -> Any:
    """The shard's stored bytes as a binary file object (to read in blocks)."""
    if shard.prefetched is not None:
        return io.BytesIO(shard.prefetched)
    try:
        if is_local(shard.filesystem):
            return open(shard.open_path, "rb")
        return shard.filesystem.open_input_stream(shard.open_path, compression=None)
    except OSError as e:
        raise InputError(f"{shard.path}: cannot read: {reason(e)}") from e


def _open_bytes(shard: Shard) -> bytes:
    try:
        raw = (shard.prefetched if shard.prefetched is not None
               else read_bytes(shard.filesystem, shard.open_path))
    except OSError as e:
        raise InputError(f"{shard.path}: cannot read: {reason(e)}") from e
    try:
        if shard.compression == "gzip":
            return gzip.decompress(raw) if raw else raw
        if shard.compression == "zstd":
            import zstandard

            if not raw:
                return raw
            return zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)).read()
        if shard.compression == "bz2":
            return bz2.decompress(raw)
    except Exception as e:  # corrupt archive: name the file, not the codec internals
        raise InputError(f"{shard.path}: cannot decompress ({shard.compression}): {e}") from e
    return raw


#: deeper records cannot go through Arrow, Parquet and the field walkers safely; real
#: fine-tuning records are a few levels deep (conversations[*].content is 3)
MAX_NESTING = 64
#: more invalid bytes than this share of a file means it is not UTF-8 with a few bad
#: sequences but another encoding altogether: say so instead of replacing half the text
NOT_UTF8_SHARE = 0.005
NOT_UTF8_MIN = 64
_GUESS_ENCODINGS = ("gb18030", "big5", "shift_jis", "euc-kr", "cp1252")


def _bad_utf8_bytes(data: bytes) -> np.ndarray:
    """Offset of every byte that is part of an invalid UTF-8 sequence (ascending)."""
    ranges = invalid_ranges(data)
    if not ranges:
        return np.zeros(0, np.int64)
    return np.concatenate([np.arange(s, e, dtype=np.int64) for s, e in ranges])


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _guess_encoding(data: bytes) -> str | None:
    sample = data[: 1 << 20]
    for enc in _GUESS_ENCODINGS:
        try:
            sample.decode(enc)
        except UnicodeDecodeError as e:
            if e.start < len(sample) - 4:  # a cut multi-byte character at the end is fine
                continue
        return enc
    return None


def _decode_to_utf8(shard: Shard, data: bytes, opts: ReadOptions, line_base: int = 0,
                    byte_base: int = 0, first: bool = True
                    ) -> tuple[bytes, np.ndarray, bool]:
    """UTF-8 bytes of ``data``, the offset of every byte of an invalid sequence, and whether
    the file is UTF-8 (so its invalid bytes may be read by :mod:`utf8_repair`'s rule).

    A BOM is removed (UTF-8; UTF-16/32 BOMs also select that encoding). Other encodings
    (``input.encoding``) are transcoded first, bytes that are not valid in them kept as
    invalid UTF-8 bytes, so each reader replaces them per record, with an event;
    ``on_decode_error: fail`` names the line and byte offset of the first bad sequence, in
    the file as it is on disk. For a block of a file (:mod:`line_blocks`), ``line_base``
    and ``byte_base`` count the lines and bytes before it, and ``first`` says whether it
    starts the file (only a file's start holds a BOM and shows whether it is UTF-8 at all).
    """
    enc = codecs.lookup(opts.encoding).name if _known(opts.encoding) else None
    if enc is None:
        raise InputError(f"{shard.path}: unknown encoding {opts.encoding!r} (input.encoding);"
                         " use a Python codec name such as utf-8, gb18030, gbk, utf-16")
    if first and enc == "utf-8" and data.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        enc = "utf-32"
    elif first and enc == "utf-8" and data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        enc = "utf-16"
    if enc == "utf-8":
        if first and data.startswith(codecs.BOM_UTF8):
            data = data[3:]
        bad = _bad_utf8_bytes(data)
        if bad.size == 0:
            return data, bad, True
        at = int(bad[0])
        where = f"{shard.path}:{line_base + _line_of(data, at)}"
        if first and bad.size > max(NOT_UTF8_MIN, NOT_UTF8_SHARE * len(data)):
            guess = _guess_encoding(data)
            hint = f"it looks like {guess}: set input.encoding: {guess}" if guess else (
                "set input.encoding to the file's encoding (e.g. gb18030, gbk, utf-16)")
            raise InputError(f"{where}: not UTF-8 ({bad.size:,} invalid bytes, the first at"
                             f" byte offset {byte_base + at}); {hint}")
        if opts.on_decode_error == "fail":
            raise InputError(
                f"{where}: invalid UTF-8 at byte offset {byte_base + at}; if the file is in"
                " another encoding set input.encoding (e.g. gb18030, utf-16), or set"
                " input.on_decode_error to replace or quarantine")
        return data, bad, True
    try:
        text = data.decode(enc)
    except UnicodeDecodeError as e:
        if opts.on_decode_error == "fail":
            raise InputError(f"{shard.path}:{_line_of(data, e.start)}: not valid {enc} at byte"
                             f" offset {e.start}; check input.encoding, or set"
                             " input.on_decode_error to replace or quarantine") from None
        # the bad bytes are marked as lone surrogates, which the UTF-8 encoding below turns
        # back into invalid bytes: each reader then replaces (with an event) or quarantines
        # the records holding them
        text = data.decode(enc, errors="surrogateescape")
    text = text.removeprefix("\ufeff")
    out = text.encode("utf-8", errors="surrogateescape")
    return out, _bad_utf8_bytes(out), False


def _known(encoding: str) -> bool:
    try:
        codecs.lookup(encoding)
    except LookupError:
        return False
    return True


def _line_numbers(data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start offset, end offset and 1-based number of every non-blank line."""
    buf = np.frombuffer(data, dtype=np.uint8)
    nl = np.flatnonzero(buf == 10)
    starts = np.concatenate(([0], nl + 1))
    ends = np.concatenate((nl, [len(buf)]))
    ws = (buf == 32) | (buf == 9) | (buf == 13) | (buf == 10)
    content = np.concatenate(([0], np.cumsum(~ws, dtype=np.int64)))
    nonblank = content[ends] - content[starts] > 0
    numbers = np.flatnonzero(nonblank) + 1
    return starts[nonblank], ends[nonblank], numbers


def _first_bad_in(bad: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each [start, end) span, the first bad byte offset inside it, or -1."""
    if bad.size == 0:
        return np.full(starts.size, -1, np.int64)
    i = np.searchsorted(bad, starts, side="left")
    cand = bad[np.minimum(i, bad.size - 1)]
    return np.where((i < bad.size) & (cand < ends), cand, -1)


def _empty_object_fixes(table: pa.Table) -> tuple[pa.Table, list[ReadFix]]:
    """``table`` with ``{}`` stored as null (Parquet has no empty struct), and the fixes
    that record which rows held one, where."""
    table, hits = without_empty_objects(table)
    return table, [ReadFix("empty_object", h.path,
                           f"{{}} at {h.path!r} stored as null: Parquet cannot store an object"
                           " with no keys", h.rows) for h in hits]


def _batches(table: pa.Table, numbers: np.ndarray, shard: Shard, bad: list[BadRecord],
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


def _line_lengths(data: bytes) -> np.ndarray:
    """Bytes of each line of ``data`` (its line break included)."""
    ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10) + 1
    if not ends.size or ends[-1] != len(data):
        ends = np.append(ends, len(data))
    return np.diff(ends, prepend=0)


def _rebatched(chunks: Iterator[Chunk], shard: Shard, batch_size: int,
               max_bytes: int) -> Iterator[Chunk]:
    """``chunks`` (of one shard, read block by block) as batches cut from the shard's start
    at ``batch_size`` rows or ``max_bytes`` bytes of lines, the last one shorter: the same
    batches, fixes and events whatever the block size. Bad records and bytes ride on the
    next batch out."""
    pending: list[Chunk] = []
    sent = False
    for chunk in chunks:
        pending.append(chunk)
        while (n := _next_cut([c.row_bytes for c in pending], batch_size, max_bytes)):
            head, tail = _split_chunk(_joined(pending, shard), n)
            yield head
            sent = True
            pending = [tail]
    rows = sum(c.batch.num_rows for c in pending)
    if pending and (rows or not sent or any(c.bad or c.bytes_read for c in pending)):
        yield _joined(pending, shard)


def _next_cut(sizes: list[np.ndarray | None], batch_size: int, max_bytes: int) -> int:
    """Rows in the next full batch of rows of these ``sizes`` (bytes each), 0 if none yet.

    >>> _next_cut([np.array([5, 5]), np.array([5, 5, 5])], 4, 100)
    4
    >>> _next_cut([np.array([60, 50, 5])], 4, 100), _next_cut([np.array([60])], 4, 100)
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


def _mend_line(line: bytes, num: int, start: int, guess: bool, notes: Notes) -> str:
    """A line's text with its invalid bytes read (:func:`mend`), each change noted."""
    text, mends = mend(line, guess)
    notes[num] = [(m.code, m.describe(f"line {num}, byte offset {start + m.offset}" if guess
                                      else f"line {num}")) for m in mends]
    return text


def _fast_json(data: bytes) -> pa.Table | None:
    """pyarrow's multithreaded JSON reader, or None when the file needs the careful path."""
    table = _pyarrow_json(data)
    if table is None:
        return None
    try:
        # pyarrow's JSON reader (26.0) builds an invalid list array when a list starts with
        # null ([null, "x"]); the structural check costs nothing next to the parse and
        # sends such files to the careful path instead of crashing later (pickle, Parquet)
        table.validate()
    except pa.ArrowInvalid:
        return None
    return table


def _pyarrow_json(data: bytes) -> pa.Table | None:
    try:
        # small blocks parse in parallel; a record longer than a block needs a bigger one
        return pjson.read_json(io.BytesIO(data))
    except pa.ArrowInvalid as e:
        if "straddling" not in str(e) and "block" not in str(e):
            return None
    except pa.ArrowNotImplementedError:
        return None
    try:
        return pjson.read_json(io.BytesIO(data),
                               read_options=pjson.ReadOptions(block_size=len(data) + 1))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _decode_bad(shard: Shard, line: bytes, num: int, off: int) -> BadRecord:
    return BadRecord(shard.name, num, "decode_error",
                     f"invalid UTF-8 at line {num}, byte offset {off}",
                     line.decode("utf-8", errors="replace"), off)


def _read_jsonl(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    if not _streams_utf8(opts):
        raw = _open_bytes(shard)
        data, bad_bytes, guess = _decode_to_utf8(shard, raw, opts)
        yield from _jsonl_chunks(shard, len(raw), data, bad_bytes, opts, guess)
        return
    yield from _rebatched(_jsonl_block_chunks(shard, opts), shard, opts.batch_size,
                          MAX_BATCH_BYTES)


def _streams_utf8(opts: ReadOptions) -> bool:
    """Whether a JSON Lines file is read in blocks: UTF-8 input (a file in another encoding
    is transcoded whole, as a multi-byte encoding has no cheap line boundary)."""
    return _known(opts.encoding) and codecs.lookup(opts.encoding).name == "utf-8"


def _jsonl_block_chunks(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    """Chunks of a JSON Lines file read block by block (:mod:`line_blocks`): lines and byte
    offsets are numbered as in the whole file, so every record, bad record and event is
    the same as when the file is read whole."""
    with _open_stream(shard) as raw:
        stream = decompressing(raw, shard.compression)
        try:
            head = stream.read(4)
            if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE,
                                codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
                # a UTF-16/32 file (its BOM says so) is transcoded whole, as in another
                # encoding its line breaks are not single bytes
                whole = head + stream.read()
                data, bad_bytes, guess = _decode_to_utf8(shard, whole, opts)
                yield from _jsonl_chunks(shard, shard.size, data, bad_bytes, opts, guess)
                return
        except Exception as e:
            raise _decompress_error(shard, e) from e
        blocks = line_blocks(stream, opts.block_bytes, raw, head)
        first = True
        bom = 0
        while True:
            try:
                block = next(blocks)
            except StopIteration:
                break
            except Exception as e:
                raise _decompress_error(shard, e) from e
            if first:
                bom = len(codecs.BOM_UTF8) if block.data.startswith(codecs.BOM_UTF8) else 0
            # offsets count from after a BOM, as when the file is read whole
            base = max(0, block.bytes_before - bom)
            data, bad_bytes, guess = _decode_to_utf8(shard, block.data, opts,
                                                     block.lines_before, base, first)
            line_bytes = _line_lengths(data)
            for chunk in _jsonl_chunks(shard, block.raw_bytes, data, bad_bytes, opts, guess,
                                       block.lines_before, base):
                chunk.row_bytes = line_bytes[chunk.numbers - block.lines_before - 1]
                yield chunk
            first = False
        if first:  # an empty file is still a shard: one empty chunk counts it
            yield from _jsonl_chunks(shard, shard.size, b"", np.zeros(0, np.int64), opts)


def _decompress_error(shard: Shard, e: Exception) -> Exception:
    """A corrupt archive names the file, not the codec's internals; other errors as they
    are."""
    if shard.compression is None or isinstance(e, InputError):
        return e
    return InputError(f"{shard.path}: cannot decompress ({shard.compression}): {e}")


def _jsonl_chunks(shard: Shard, nbytes: int, data: bytes, bad_bytes: np.ndarray,
                  opts: ReadOptions, guess: bool = True, line_base: int = 0,
                  byte_base: int = 0) -> Iterator[Chunk]:
    """Chunks of JSON Lines ``data`` (UTF-8): the whole file, or one block of it whose
    first line is line ``line_base + 1`` and first byte at offset ``byte_base``."""
    bad: list[BadRecord] = []
    if not data.strip():
        yield from _batches(pa.table({}), np.zeros(0, np.int64), shard, bad, opts.batch_size,
                            nbytes)
        return
    if not bad_bytes.size:
        table = _fast_json(data)
        if table is not None and _LONG_INT_BYTES.search(data) and _any_type(
                table.schema, pa.types.is_floating):
            table = None  # a long integer may have been rounded to a float: check each
        if table is not None:
            n_lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
            if table.num_rows == n_lines:
                # no blank lines: record k is line k (the common case, no per-line scan)
                numbers = np.arange(1, n_lines + 1, dtype=np.int64) + line_base
            else:
                numbers = _line_numbers(data)[2] + line_base
            if table.num_rows == len(numbers) and _type_depth(table.schema) <= MAX_NESTING:
                yield from _batches(table, numbers, shard, bad, opts.batch_size, nbytes)
                return
    starts, ends, numbers = _line_numbers(data)
    numbers = numbers + line_base
    first_bad = _first_bad_in(bad_bytes, starts, ends)
    # Slow path, only for files with a broken line, invalid UTF-8 or types pyarrow cannot
    # infer in one go: parse line by line so one bad line costs one record, not the file.
    records: list[Any] = []
    raws: list[str] = []
    good: list[int] = []
    notes: Notes = {}
    decoder = _decoder(data)
    for s, e, num, off in zip(starts.tolist(), ends.tolist(), numbers.tolist(),
                              first_bad.tolist(), strict=True):
        line = data[s:e]
        if off >= 0:
            if opts.on_decode_error == "quarantine":
                bad.append(_decode_bad(shard, line, num, byte_base + off))
                continue
            text = _mend_line(line, num, byte_base + s, guess, notes)
        else:
            text = line.decode("utf-8")
        try:
            rec = decoder.decode(text)
        except json.JSONDecodeError as err:
            if opts.on_parse_error == "fail":
                raise InputError(f"{shard.path}:{num}: not valid JSON: {err.msg} (column"
                                 f" {err.colno}); set input.on_parse_error: quarantine to"
                                 " keep going") from err
            bad.append(BadRecord(shard.name, num, "parse_error",
                                 f"not valid JSON: {err.msg} (line {num}, column {err.colno})",
                                 text, byte_base + s))
            continue
        except RecursionError:
            if opts.on_parse_error == "fail":
                raise InputError(f"{shard.path}:{num}: JSON nested too deeply to read; set"
                                 " input.on_parse_error: quarantine to keep going") from None
            bad.append(BadRecord(shard.name, num, "parse_error",
                                 f"JSON nested too deeply to read (line {num})", text,
                                 byte_base + s))
            continue
        if not isinstance(rec, dict):
            bad.append(BadRecord(shard.name, num, "parse_error",
                                 f"a JSON {json_kind(rec)} where an object was expected"
                                 f" (line {num})", text, byte_base + s))
            continue
        records.append(rec)
        raws.append(text)
        good.append(num)
    table, records_bad = _table_from_records(shard, records, good, opts, raws,
                                             bool(_SUSPECT_BYTES.search(data)), notes)
    bad = sorted(bad + records_bad, key=lambda b: b.line)
    yield from _batches(table, np.asarray(good, dtype=np.int64), shard, bad, opts.batch_size,
                        nbytes, notes)


#: what pyarrow raises when Python values do not fit one Arrow type (or any: a lone
#: surrogate cannot be UTF-8, an integer over 64 bits cannot be int64)
_CONVERT_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError,
                   OverflowError, UnicodeEncodeError)


def _table_from_records(shard: Shard, records: list[Any], numbers: list[int],
                        opts: ReadOptions, raws: list[str] | None = None,
                        suspect: bool = False, notes: Notes | None = None
                        ) -> tuple[pa.Table, list[BadRecord]]:
    """A table of ``records``; the records that cannot share it become bad records.

    A record whose value at some path has another JSON type than most values there (a
    number where text is expected, an object where a list is, a boolean among numbers) is a
    ``type_mismatch``; a number that cannot be stored as written is a
    ``number_out_of_range``; see :mod:`cleanpipe.io.type_clashes`. One odd record costs
    that record, not the file. ``suspect`` (the text holds bare booleans or huge numbers)
    checks the records even when Arrow takes them all, since it would store ``true`` among
    numbers as ``1.0`` and ``1e400`` as ``inf``. ``numbers`` is updated in place to the
    records kept.
    """
    texts: list[str | None] = list(raws) if raws is not None else [None] * len(records)
    records, too_deep = _drop_too_deep(shard, records, numbers, texts)
    try:
        table = _from_pylist(records)
        if not (suspect and _has_numbers(table.schema)):
            return table, too_deep
    except _CONVERT_ERRORS:
        pass  # what follows only runs for files whose records do not fit one table
    bad: list[BadRecord] = []
    keep_recs: list[Any] = []
    keep_nums: list[int] = []
    keep_texts: list[str | None] = []
    floats = float_paths(records)
    for rec, num, raw, clash in zip(records, numbers, texts, first_clashes(records),
                                    strict=True):
        unfit = first_out_of_range(rec, floats) if clash is None else None
        if clash is None and unfit is None:
            keep_recs.append(rec)
            keep_nums.append(num)
            keep_texts.append(raw)
            continue
        if opts.on_parse_error == "fail":
            raise InputError(f"{shard.path}:{num}: field {clash or unfit}; make it one type"
                             " in every record or set input.on_parse_error: quarantine")
        if clash is not None:
            bad.append(BadRecord(shard.name, num, "type_mismatch",
                                 f"field {clash} of {shard.name} (line {num}); a column keeps"
                                 " one type", raw if raw is not None else _dumps(rec)))
        else:
            bad.append(BadRecord(shard.name, num, "number_out_of_range",
                                 f"field {unfit} ({shard.name}, line {num}); write it as a"
                                 " string to keep it as written",
                                 raw if raw is not None else _dumps(rec)))
    try:
        table = _from_pylist(keep_recs)
    except _CONVERT_ERRORS:
        table, unstorable = _without_unstorable(shard, keep_recs, keep_nums, keep_texts, opts,
                                                notes if notes is not None else {})
        bad += unstorable
    numbers[:] = keep_nums
    return table, bad + too_deep


def _failing_alone(records: list[Any]) -> list[tuple[int, BaseException]]:
    """The records Arrow cannot store even alone, with the error: bisection finds the few
    such records with a handful of conversions, not one per record."""
    failing: list[tuple[int, BaseException]] = []
    spans = [(0, len(records))] if records else []
    while spans:
        lo, hi = spans.pop()
        try:
            _from_pylist(records[lo:hi])
            continue
        except _CONVERT_ERRORS as e:
            if hi - lo == 1:
                failing.append((lo, e))
                continue
        mid = (lo + hi) // 2
        spans.extend(((mid, hi), (lo, mid)))
    return failing


def _without_unstorable(shard: Shard, records: list[Any], numbers: list[int],
                        texts: list[str | None], opts: ReadOptions, notes: Notes
                        ) -> tuple[pa.Table, list[BadRecord]]:
    """The table of the records Arrow can store; the others become bad records (an
    integer over 64 bits) or are repaired (a lone surrogate with ``on_decode_error:
    replace``). ``records``, ``numbers`` and ``texts`` are updated in place."""
    bad: list[BadRecord] = []
    drop: set[int] = set()
    for i, err in _failing_alone(records):
        num, rec = numbers[i], records[i]
        raw = texts[i] if texts[i] is not None else _dumps(rec)
        if isinstance(err, UnicodeEncodeError):
            # a \ud800 escape is valid JSON but not text (a lone surrogate has no UTF-8):
            # treated like undecodable bytes, by input.on_decode_error
            if opts.on_decode_error == "fail":
                raise InputError(f"{shard.path}:{num}: a lone surrogate escaped in a string"
                                 " is not text; set input.on_decode_error to replace or"
                                 " quarantine")
            if opts.on_decode_error == "replace":
                records[i] = _no_surrogates(rec)
                notes.setdefault(num, []).append((
                    "decode_replaced", f"a lone surrogate escaped in a string (line {num}) is"
                    " not text: replaced by U+FFFD"))
                continue
            bad.append(BadRecord(shard.name, num, "decode_error",
                                 f"a lone surrogate escaped in a string (line {num}) is not"
                                 " text", raw))
        else:
            if opts.on_parse_error == "fail":
                raise InputError(f"{shard.path}:{num}: the record cannot be stored ({err});"
                                 " set input.on_parse_error: quarantine to keep going")
            bad.append(BadRecord(shard.name, num, "type_mismatch",
                                 f"record {num} of {shard.name} cannot be stored: {err}", raw))
        drop.add(i)
    keep = [i for i in range(len(records)) if i not in drop]
    records[:] = [records[i] for i in keep]
    numbers[:] = [numbers[i] for i in keep]
    texts[:] = [texts[i] for i in keep]
    try:
        return _from_pylist(records), bad
    except _CONVERT_ERRORS as e:
        # each record stores alone and none clashes in type: not expected; still one line
        raise InputError(f"{shard.path}: its records do not fit one table ({e}); make each"
                         " field one type, or convert the file to Parquet first") from e


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _no_surrogates(rec: Any) -> Any:
    """``rec`` with every lone surrogate (keys included) replaced by U+FFFD.

    >>> _no_surrogates({"a\\ud800": ["x\\udfff"]})
    {'a�': ['x�']}
    """
    return json.loads(_LONE_SURROGATE.sub("\ufffd", json.dumps(rec, ensure_ascii=False)))


def _type_depth(schema: pa.Schema | pa.DataType) -> int:
    """How many levels of struct/list nesting a schema has (iteratively: no recursion)."""
    stack = [(f.type, 1) for f in schema] if isinstance(schema, pa.Schema) else [(schema, 1)]
    depth = 0
    while stack:
        t, d = stack.pop()
        depth = max(depth, d)
        if pa.types.is_struct(t):
            stack.extend((t.field(i).type, d + 1) for i in range(t.num_fields))
        elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            stack.append((t.value_type, d + 1))
        elif pa.types.is_map(t):
            stack.extend(((t.key_type, d + 1), (t.item_type, d + 1)))
    return depth


def _has_numbers(schema: pa.Schema) -> bool:
    """Whether any field, at any depth, is an integer or a float."""
    return _any_type(schema, lambda t: pa.types.is_integer(t) or pa.types.is_floating(t))


def _any_type(schema: pa.Schema, pred: Any) -> bool:
    stack = [f.type for f in schema]
    while stack:
        t = stack.pop()
        if pred(t):
            return True
        if pa.types.is_struct(t):
            stack.extend(t.field(i).type for i in range(t.num_fields))
        elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            stack.append(t.value_type)
        elif pa.types.is_map(t):
            stack.extend((t.key_type, t.item_type))
    return False


#: a bare JSON boolean, and an exponent no 64-bit float can hold: where the text has one,
#: Arrow may store a record with another value than it holds (true as 1.0, 1e400 as inf)
_BARE_BOOL = r"[:\[,]\s*(?:true|false)\s*[,\]}]"
_BIG_EXPONENT = r"\d[eE]\+?0*[1-9]\d{2}"
_SUSPECT = re.compile(f"{_BARE_BOOL}|{_BIG_EXPONENT}")
_SUSPECT_BYTES = re.compile(_SUSPECT.pattern.encode())
#: an integer literal of 16+ digits: pyarrow's reader stores it as a (rounded) float when
#: its column also holds floats, and an integer over 64 bits as a float always
_LONG_INT_BYTES = re.compile(rb"[:\[,]\s*-?\d{16,}\s*[,\]}]")


def _decoder(text: str | bytes) -> json.JSONDecoder:
    """A JSON decoder that marks numbers too large for a float (see :class:`HugeNumber`)
    where the text may hold one; the plain, faster one elsewhere."""
    big = re.search(_BIG_EXPONENT if isinstance(text, str) else _BIG_EXPONENT.encode(), text)
    return json.JSONDecoder(parse_float=parse_float) if big else json.JSONDecoder()


def _value_depth(v: Any) -> int:
    depth = 0
    stack = [(v, 0)]
    while stack:
        x, d = stack.pop()
        depth = max(depth, d)
        if isinstance(x, dict):
            stack.extend((y, d + 1) for y in x.values())
        elif isinstance(x, list):
            stack.extend((y, d + 1) for y in x)
    return depth


def _drop_too_deep(shard: Shard, records: list[Any], numbers: list[int],
                   raws: list[str | None]) -> tuple[list[Any], list[BadRecord]]:
    """Records nested deeper than :data:`MAX_NESTING` become bad records (``numbers`` and
    ``raws`` are updated in place). Records are only walked when one holds a nested value at all."""
    if not any(isinstance(v, (dict, list)) for r in records for v in r.values()):
        return records, []
    keep, nums, texts, bad = [], [], [], []
    for rec, num, raw in zip(records, numbers, raws, strict=True):
        d = _value_depth(rec)
        if d > MAX_NESTING:
            bad.append(BadRecord(shard.name, num, "too_deep",
                                 f"record {num} is nested {d} levels deep; at most"
                                 f" {MAX_NESTING} levels can be stored: flatten it",
                                 raw if raw is not None else _dumps(rec)))
            continue
        keep.append(rec)
        nums.append(num)
        texts.append(raw)
    numbers[:] = nums
    raws[:] = texts
    return keep, bad


def _dumps(rec: Any) -> str | None:
    try:
        return json.dumps(rec, ensure_ascii=False)[:100_000]
    except RecursionError:  # deeper than json can write: the row id still says where it was
        return None


def _from_pylist(records: list[Any]) -> pa.Table:
    """One table of the records: its columns are the keys of all records.

    ``pa.Table.from_pylist`` takes the columns from the first record alone, so a key that
    first appears later was silently dropped (and a ``{}`` record made no row); an array of
    the records infers the union of their keys, in order of appearance.

    >>> _from_pylist([{"a": 1}, {"b": "x", "a": 2}, {}]).to_pylist()
    [{'a': 1, 'b': None}, {'a': 2, 'b': 'x'}, {'a': None, 'b': None}]
    """
    return pa.Table.from_struct_array(pa.array(records)) if records else pa.table({})


_SURROGATE = re.compile("[\udc80-\udcff]")


def _read_json(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    """A JSON array of objects, one object (``{"split": [records]}`` is unwrapped, as
    datasets' ``field=`` would), or JSON lines in a ``.json`` file."""
    raw = _open_bytes(shard)
    data, bad_bytes, guess = _decode_to_utf8(shard, raw, opts)
    # invalid bytes survive decoding as lone surrogates, so the records holding them
    # can be found after parsing (quarantine) or read by the repair rule (replace)
    text = data.decode("utf-8", errors="surrogateescape" if bad_bytes.size else "strict")
    stripped = text.lstrip()
    if not stripped:
        yield from _batches(pa.table({}), np.zeros(0, np.int64), shard, [], opts.batch_size,
                            len(raw))
        return
    try:
        obj = _decoder(text).decode(text)
    except json.JSONDecodeError as err:
        if stripped.startswith("{") and (err.msg == "Extra data" or "\n" in stripped.strip()):
            # a .json file that holds JSON lines: one bad line costs one record
            yield from _jsonl_chunks(shard, len(raw), data, bad_bytes, opts, guess)
            return
        raise InputError(f"{shard.path}:{err.lineno}: not valid JSON: {err.msg} (column"
                         f" {err.colno}); fix the file, or write it as JSON lines so that a"
                         " bad record costs only that record") from None
    except RecursionError:
        raise InputError(f"{shard.path}: JSON nested too deeply to read") from None
    if isinstance(obj, dict):
        lists = [v for v in obj.values() if isinstance(v, list)]
        obj = lists[0] if len(obj) == 1 and len(lists) == 1 else [obj]
    if not isinstance(obj, list):
        raise InputError(f"{shard.path}: holds a JSON {json_kind(obj)}; expected an array of"
                         " objects, an object, or JSON lines")
    bad: list[BadRecord] = []
    records, numbers = [], []
    notes: Notes = {}
    surrogates = _SURROGATE if bad_bytes.size else None
    bad_i = 0
    for i, rec in enumerate(obj, start=1):
        if surrogates is not None:
            dumped = json.dumps(rec, ensure_ascii=False)
            n_bad = len(surrogates.findall(dumped))
            if n_bad:
                # records are in file order, so the k-th bad byte belongs to the record
                # holding the k-th surrogate
                off = int(bad_bytes[min(bad_i, bad_bytes.size - 1)])
                bad_i += n_bad
                if opts.on_decode_error == "quarantine":
                    line = _line_of(data, off)
                    bad.append(BadRecord(
                        shard.name, i, "decode_error",
                        f"invalid UTF-8 at line {line}, byte offset {off} (record {i})",
                        _fffd(dumped)[:100_000], off))
                    continue
                fixed, mends = mend(dumped.encode("utf-8", errors="surrogateescape"), guess)
                rec = json.loads(fixed)
                notes[i] = [(m.code, m.describe(f"record {i}, near byte offset {off}"))
                            for m in mends]
        if isinstance(rec, dict):
            records.append(rec)
            numbers.append(i)
        else:
            bad.append(BadRecord(shard.name, i, "parse_error",
                                 f"record {i} is a JSON {json_kind(rec)}, not an object",
                                 json.dumps(rec, ensure_ascii=False)[:100_000]))
    table, records_bad = _table_from_records(shard, records, numbers, opts,
                                             suspect=bool(_SUSPECT.search(text)), notes=notes)
    bad = sorted(bad + records_bad, key=lambda b: b.line)
    yield from _batches(table, np.asarray(numbers, np.int64), shard, bad, opts.batch_size,
                        len(raw), notes)


def _fffd(s: str) -> str:
    return _SURROGATE.sub("\ufffd", s)


def _read_csv(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    raw = _open_bytes(shard)
    data, bad_bytes, guess = _decode_to_utf8(shard, raw, opts)
    delim = opts.csv_delimiter or ("\t" if shard.format == "tsv" else ",")
    if not data.strip():
        yield from _batches(pa.table({}), np.zeros(0, np.int64), shard, [], opts.batch_size,
                            len(raw))
        return
    if bad_bytes.size:
        # CSV records may span lines, so bad bytes cannot be tied to a record before
        # parsing: each becomes the three bytes of its surrogate escape (U+DC80-U+DCFF,
        # which valid input cannot hold), found in the cells after parsing
        data = data.decode("utf-8", errors="surrogateescape").encode(
            "utf-8", errors="surrogatepass")
    try:
        table = pcsv.read_csv(
            io.BytesIO(data),
            parse_options=pcsv.ParseOptions(delimiter=delim, newlines_in_values=True),
            # strings stay strings: a label column "007" must not become 7
            convert_options=pcsv.ConvertOptions(strings_can_be_null=False,
                                                check_utf8=not bad_bytes.size),
        )
    except pa.ArrowInvalid as e:
        raise InputError(f"{shard.path}: not valid CSV: {e}; check input.csv_delimiter and"
                         " the quoting") from e
    numbers = np.arange(1, table.num_rows + 1, dtype=np.int64)
    bad: list[BadRecord] = []
    notes: Notes = {}
    if bad_bytes.size and opts.on_decode_error == "quarantine":
        table, numbers, bad = _csv_quarantine(shard, table, numbers, bad_bytes)
    elif bad_bytes.size:
        table = _csv_mend(table, numbers, guess, notes)
    yield from _batches(table, numbers, shard, bad, opts.batch_size, len(raw), notes)


def _marked(col: pa.ChunkedArray) -> np.ndarray:
    """Which cells hold a marked invalid byte (``ED B2 xx`` or ``ED B3 xx``: never UTF-8)."""
    return _contains(col, b"\xed\xb2") | _contains(col, b"\xed\xb3")


def _csv_mend(table: pa.Table, numbers: np.ndarray, guess: bool, notes: Notes) -> pa.Table:
    """``table`` with the invalid bytes of its cells read by :func:`mend`, each noted."""
    cols = []
    for col in table.columns:
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            cols.append(col)
            continue
        hit = _marked(col)
        if not hit.any():
            cols.append(col)
            continue
        cells = col.cast(pa.large_binary()).to_pylist()
        out: list[str | None] = []
        for i, cell in enumerate(cells):
            if cell is None or not hit[i]:
                out.append(cell.decode("utf-8") if cell is not None else None)
                continue
            orig = cell.decode("utf-8", errors="surrogatepass").encode(
                "utf-8", errors="surrogateescape")
            text, mends = mend(orig, guess)
            num = int(numbers[i])
            notes.setdefault(num, []).extend(
                (m.code, m.describe(f"record {num}")) for m in mends)
            out.append(text)
        cols.append(pa.chunked_array([pa.array(out, col.type)]))
    return pa.Table.from_arrays(cols, names=table.column_names)


def _csv_quarantine(shard: Shard, table: pa.Table, numbers: np.ndarray,
                    bad_bytes: np.ndarray) -> tuple[pa.Table, np.ndarray, list[BadRecord]]:
    """Move the records holding a marked (invalid) byte to bad records."""
    hit = np.zeros(table.num_rows, dtype=bool)
    for col in table.columns:
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            hit |= _marked(col)
    bad = []
    for k, r in enumerate(np.flatnonzero(hit).tolist()):
        num = int(numbers[r])
        # the k-th bad record holds at least the k-th bad sequence: a lower bound that is
        # exact when each record holds one
        off = int(bad_bytes[min(k, bad_bytes.size - 1)])
        bad.append(BadRecord(shard.name, num, "decode_error",
                             f"invalid UTF-8 in record {num} (near byte offset {off})", None,
                             off))
    keep = ~hit
    return table.filter(pa.array(keep)), numbers[keep], bad


def _contains(col: pa.ChunkedArray, needle: bytes) -> np.ndarray:
    as_bin = col.cast(pa.binary()) if not pa.types.is_binary(col.type) else col
    return pc.fill_null(pc.match_substring(as_bin, needle), False).to_numpy(
        zero_copy_only=False)


def _read_text(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    raw = _open_bytes(shard)
    data, bad_bytes, guess = _decode_to_utf8(shard, raw, opts)
    starts, ends, numbers = _line_numbers(data)
    bad: list[BadRecord] = []
    if bad_bytes.size and opts.on_decode_error == "quarantine":
        first_bad = _first_bad_in(bad_bytes, starts, ends)
        for s, e, num, off in zip(starts[first_bad >= 0].tolist(), ends[first_bad >= 0].tolist(),
                                  numbers[first_bad >= 0].tolist(),
                                  first_bad[first_bad >= 0].tolist(), strict=True):
            bad.append(_decode_bad(shard, data[s:e], num, off))
        keep = first_bad < 0
        starts, ends, numbers = starts[keep], ends[keep], numbers[keep]
    notes: Notes = {}
    first_bad = _first_bad_in(bad_bytes, starts, ends)
    lines = [(data[s:e].decode("utf-8") if off < 0 else
              _mend_line(data[s:e], num, s, guess, notes)).rstrip("\r")
             for s, e, num, off in zip(starts.tolist(), ends.tolist(), numbers.tolist(),
                                       first_bad.tolist(), strict=True)]
    table = pa.table({opts.text_column: pa.array(lines, pa.string())})
    yield from _batches(table, numbers, shard, bad, opts.batch_size, len(raw), notes)


def _random_access(shard: Shard) -> Any:
    """What pyarrow's Parquet/IPC readers open: the local path, or a seekable remote file
    (Parquet then fetches the footer and the row groups it reads, not the whole object)."""
    if is_local(shard.filesystem):
        return shard.open_path
    try:
        return shard.filesystem.open_input_file(shard.open_path)
    except OSError as e:
        raise InputError(f"{shard.path}: cannot read: {reason(e)}") from e


def _read_parquet(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    source = _random_access(shard)
    try:
        pf = pq.ParquetFile(source)
    except (pa.ArrowInvalid, OSError) as e:
        raise InputError(f"{shard.path}: not a readable Parquet file: {e}") from e
    start = 1
    first = True
    any_rows = False
    for batch in pf.iter_batches(batch_size=opts.batch_size):
        if batch.num_rows == 0:
            continue
        any_rows = True
        yield Chunk(shard, batch, np.arange(start, start + batch.num_rows, dtype=np.int64),
                    [], shard.size if first else 0)
        first = False
        start += batch.num_rows
    if not any_rows:
        yield Chunk(shard, pa.RecordBatch.from_pylist([], schema=pf.schema_arrow),
                    np.zeros(0, np.int64), [], shard.size)


def _open_ipc(shard: Shard) -> Any:
    if is_local(shard.filesystem):
        return pa.memory_map(shard.open_path)
    return _random_access(shard)


def _read_arrow(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    try:
        source = _open_ipc(shard)
        try:
            table = pa.ipc.open_file(source).read_all()
        except pa.ArrowInvalid:
            source = _open_ipc(shard)
            table = pa.ipc.open_stream(source).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise InputError(f"{shard.path}: not a readable Arrow IPC/Feather file: {e}") from e
    numbers = np.arange(1, table.num_rows + 1, dtype=np.int64)
    yield from _batches(table, numbers, shard, [], opts.batch_size, shard.size)


def _read_hf(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    if not is_local(shard.filesystem):
        yield from _read_memory(Shard(shard.path, shard.name, "memory",
                                      obj=_remote_hf_table(shard)), opts)
        return
    import datasets

    try:
        ds = datasets.load_from_disk(shard.path)
    except Exception as e:  # datasets raises several kinds; the message is what matters
        raise InputError(f"{shard.path}: not a readable datasets.save_to_disk folder: {e}") from e
    if isinstance(ds, datasets.DatasetDict):
        raise InputError(f"{shard.path}: holds a DatasetDict ({', '.join(ds)}); point at one"
                         " split's folder")
    yield from _read_memory(Shard(shard.path, shard.name, "memory", obj=ds), opts)


def _remote_hf_table(shard: Shard) -> pa.Table:
    """A save_to_disk folder on an object store, read with pyarrow alone: ``state.json``
    lists its Arrow stream files in order (``save_to_disk`` has already applied any index
    mapping, so the files hold the rows as they are)."""
    fs, base = shard.filesystem, shard.open_path
    try:
        with fs.open_input_stream(f"{base}/state.json", compression=None) as fh:
            state = json.loads(fh.readall())
        files = [f["filename"] for f in state.get("_data_files", [])]
        tables = []
        for name in files:
            with fs.open_input_stream(f"{base}/{name}", compression=None) as fh:
                tables.append(pa.ipc.open_stream(fh).read_all())
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{shard.path}: not a readable datasets.save_to_disk folder:"
                         f" {reason(e)}") from e
    if state.get("_indices_data_files"):
        raise InputError(f"{shard.path}: a save_to_disk folder with an indices mapping; save it"
                         " again after dataset.flatten_indices()")
    if not tables:
        raise InputError(f"{shard.path}: a save_to_disk folder with no data file")
    return pa.concat_tables(tables, promote_options="default")


def _memory_table(obj: Any) -> Iterator[pa.Table]:
    if isinstance(obj, pa.Table):
        yield obj
        return
    if isinstance(obj, pa.RecordBatch):
        yield pa.Table.from_batches([obj])
        return
    try:
        import polars as pl

        if isinstance(obj, (pl.DataFrame, pl.LazyFrame)):
            df = obj.collect() if isinstance(obj, pl.LazyFrame) else obj
            yield df.to_arrow()
            return
    except ImportError:  # pragma: no cover
        pass
    try:
        import datasets

        if isinstance(obj, datasets.Dataset):
            if obj._indices is not None:
                obj = obj.flatten_indices()
            yield obj.data.table
            return
        if isinstance(obj, datasets.IterableDataset):
            for b in obj.iter(batch_size=4096):
                yield pa.Table.from_pydict(b)
            return
    except ImportError:  # pragma: no cover
        pass
    raise InputError(f"cannot read a {type(obj).__name__}: pass a path, a pyarrow Table, a"
                     " polars DataFrame or a datasets.Dataset")


def _read_memory(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    start = 1
    for table in _memory_table(shard.obj):
        numbers = np.arange(start, start + table.num_rows, dtype=np.int64)
        start += table.num_rows
        yield from _batches(table, numbers, shard, [], opts.batch_size, 0)


_READERS = {
    "jsonl": _read_jsonl, "json": _read_json, "csv": _read_csv, "tsv": _read_csv,
    "parquet": _read_parquet, "arrow": _read_arrow, "hf": _read_hf, "memory": _read_memory,
    "text": _read_text,
}


def read_shard(shard: Shard, opts: ReadOptions | None = None) -> Iterator[Chunk]:
    """Chunks of one shard; an empty shard yields one empty chunk (so it is counted)."""
    return _READERS[shard.format](shard, opts or ReadOptions())


def iter_chunks(source: Any, opts: ReadOptions | None = None, fmt: str = "auto") -> Iterator[Chunk]:
    for shard in resolve_sources(source, fmt):
        yield from read_shard(shard, opts)


def iter_batches(source: Any, batch_size: int = 4096, fmt: str = "auto",
                 **options: Any) -> Iterator[pa.RecordBatch]:
    """Record batches of any supported input (bad records skipped: use the engine to keep them)."""
    opts = ReadOptions(batch_size=batch_size, **options)
    for chunk in iter_chunks(source, opts, fmt):
        if chunk.batch.num_rows:
            yield chunk.batch


def read_table(source: Any, fmt: str = "auto", **options: Any) -> pa.Table:
    """All of an input as one Table, shards unified (see :func:`unify_schemas`)."""
    opts = ReadOptions(**options)
    tables = []
    names = []
    for chunk in iter_chunks(source, opts, fmt):
        if chunk.batch.num_rows or chunk.batch.num_columns:
            tables.append(pa.Table.from_batches([chunk.batch]))
            names.append(chunk.shard.name)
    if not tables:
        return pa.table({})
    from cleanpipe.io.schemas import unify_tables

    return unify_tables(tables, names)
