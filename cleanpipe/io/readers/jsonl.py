"""JSON Lines: read in blocks of lines (UTF-8) or whole (other encodings); pyarrow's
multithreaded reader first, line by line only where a line is broken or odd."""

from __future__ import annotations

import codecs
import io
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pjson

from cleanpipe.io.line_blocks import (
    decompressing,
    line_blocks,
)
from cleanpipe.io.readers.chunks import (
    MAX_BATCH_BYTES,
    BadRecord,
    Chunk,
    Notes,
    ReadOptions,
    line_lengths,
    rebatched,
    table_chunks,
)
from cleanpipe.io.readers.decoding import (
    decode_bad,
    decode_to_utf8,
    first_bad_in,
    known_encoding,
    line_numbers,
    mend_line,
)
from cleanpipe.io.readers.opening import open_bytes, open_stream
from cleanpipe.io.readers.records import (
    LONG_INT_BYTES,
    MAX_NESTING,
    SUSPECT_BYTES,
    json_decoder,
    table_from_records,
    type_depth,
)
from cleanpipe.io.schemas import any_type
from cleanpipe.io.sources import InputError, Shard
from cleanpipe.io.type_clashes import (
    json_kind,
)


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


def read_jsonl(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    if not _streams_utf8(opts):
        raw = open_bytes(shard)
        data, bad_bytes, guess = decode_to_utf8(shard, raw, opts)
        yield from jsonl_chunks(shard, len(raw), data, bad_bytes, opts, guess)
        return
    yield from rebatched(_jsonl_block_chunks(shard, opts), shard, opts.batch_size,
                          MAX_BATCH_BYTES)


def _streams_utf8(opts: ReadOptions) -> bool:
    """Whether a JSON Lines file is read in blocks: UTF-8 input (a file in another encoding
    is transcoded whole, as a multi-byte encoding has no cheap line boundary)."""
    return known_encoding(opts.encoding) and codecs.lookup(opts.encoding).name == "utf-8"


def _jsonl_block_chunks(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    """Chunks of a JSON Lines file read block by block (:mod:`line_blocks`): lines and byte
    offsets are numbered as in the whole file, so every record, bad record and event is
    the same as when the file is read whole."""
    with open_stream(shard) as raw:
        stream = decompressing(raw, shard.compression)
        try:
            head = stream.read(4)
            if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE,
                                codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
                # a UTF-16/32 file (its BOM says so) is transcoded whole, as in another
                # encoding its line breaks are not single bytes
                whole = head + stream.read()
                data, bad_bytes, guess = decode_to_utf8(shard, whole, opts)
                yield from jsonl_chunks(shard, shard.size, data, bad_bytes, opts, guess)
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
            data, bad_bytes, guess = decode_to_utf8(shard, block.data, opts,
                                                     block.lines_before, base, first)
            line_bytes = line_lengths(data)
            for chunk in jsonl_chunks(shard, block.raw_bytes, data, bad_bytes, opts, guess,
                                       block.lines_before, base):
                chunk.row_bytes = line_bytes[chunk.numbers - block.lines_before - 1]
                yield chunk
            first = False
        if first:  # an empty file is still a shard: one empty chunk counts it
            yield from jsonl_chunks(shard, shard.size, b"", np.zeros(0, np.int64), opts)


def _decompress_error(shard: Shard, e: Exception) -> Exception:
    """A corrupt archive names the file, not the codec's internals; other errors as they
    are."""
    if shard.compression is None or isinstance(e, InputError):
        return e
    return InputError(f"{shard.path}: cannot decompress ({shard.compression}): {e}")


def jsonl_chunks(shard: Shard, nbytes: int, data: bytes, bad_bytes: np.ndarray,
                  opts: ReadOptions, guess: bool = True, line_base: int = 0,
                  byte_base: int = 0) -> Iterator[Chunk]:
    """Chunks of JSON Lines ``data`` (UTF-8): the whole file, or one block of it whose
    first line is line ``line_base + 1`` and first byte at offset ``byte_base``."""
    bad: list[BadRecord] = []
    if not data.strip():
        yield from table_chunks(pa.table({}), np.zeros(0, np.int64), shard, bad, opts.batch_size,
                            nbytes)
        return
    if not bad_bytes.size:
        table = _fast_json(data)
        # the schema first: the scan reads every byte (~70 MB/s), the schema is free
        if table is not None and any_type(table.schema, pa.types.is_floating) \
                and LONG_INT_BYTES.search(data):
            table = None  # a long integer may have been rounded to a float: check each
        if table is not None:
            n_lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
            if table.num_rows == n_lines:
                # no blank lines: record k is line k (the common case, no per-line scan)
                numbers = np.arange(1, n_lines + 1, dtype=np.int64) + line_base
            else:
                numbers = line_numbers(data)[2] + line_base
            if table.num_rows == len(numbers) and type_depth(table.schema) <= MAX_NESTING:
                yield from table_chunks(table, numbers, shard, bad, opts.batch_size, nbytes)
                return
    starts, ends, numbers = line_numbers(data)
    numbers = numbers + line_base
    first_bad = first_bad_in(bad_bytes, starts, ends)
    # Slow path, only for files with a broken line, invalid UTF-8 or types pyarrow cannot
    # infer in one go: parse line by line so one bad line costs one record, not the file.
    records: list[Any] = []
    raws: list[str] = []
    good: list[int] = []
    notes: Notes = {}
    decoder = json_decoder(data)
    for s, e, num, off in zip(starts.tolist(), ends.tolist(), numbers.tolist(),
                              first_bad.tolist(), strict=True):
        line = data[s:e]
        if off >= 0:
            if opts.on_decode_error == "quarantine":
                bad.append(decode_bad(shard, line, num, byte_base + off))
                continue
            text = mend_line(line, num, byte_base + s, guess, notes)
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
    table, records_bad = table_from_records(shard, records, good, opts, raws,
                                             bool(SUSPECT_BYTES.search(data)), notes)
    bad = sorted(bad + records_bad, key=lambda b: b.line)
    yield from table_chunks(table, np.asarray(good, dtype=np.int64), shard, bad, opts.batch_size,
                        nbytes, notes)
