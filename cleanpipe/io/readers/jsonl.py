"""JSON Lines: read in blocks of lines (UTF-8) or whole (other encodings); pyarrow's
multithreaded reader first, line by line only where a line is broken or odd."""

from __future__ import annotations

import codecs
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pjson
from xxhash import xxh3_64_intdigest

from cleanpipe.io.line_blocks import LineBlock, decompressing, line_blocks
from cleanpipe.io.readers.chunks import (
    MAX_BATCH_BYTES,
    BadRecord,
    Chunk,
    Notes,
    ReadOptions,
    line_lengths,
    next_cut,
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
    if not streams_utf8(opts):
        raw = open_bytes(shard)
        data, bad_bytes, guess = decode_to_utf8(shard, raw, opts)
        yield from jsonl_chunks(shard, len(raw), data, bad_bytes, opts, guess)
        return
    chunks = (c for piece in jsonl_pieces(shard, opts) for c in piece_chunks(shard, piece, opts))
    yield from rebatched(chunks, shard, opts.batch_size, MAX_BATCH_BYTES)


def streams_utf8(opts: ReadOptions) -> bool:
    """Whether a JSON Lines file is read in pieces (:func:`jsonl_pieces`): UTF-8 input (a
    file in another encoding is transcoded whole, as a multi-byte encoding has no cheap
    line boundary)."""
    return known_encoding(opts.encoding) and codecs.lookup(opts.encoding).name == "utf-8"


@dataclass
class JsonlPiece:
    """Whole lines of a UTF-8 JSON Lines file, to be parsed on their own
    (:func:`piece_chunks`), anywhere: lines and byte offsets are numbered as in the whole
    file, so every record, bad record and event is the same as when the file is read whole.

        >>> p = JsonlPiece(b'{"a": 1}\\n\\n', lines_before=4, bytes_before=90, raw_bytes=10,
        ...                first=False, bom=0, lines=2)
        >>> p.last_record_line()
        5
    """

    data: bytes
    lines_before: int  # line breaks before the piece: its first line is lines_before + 1
    bytes_before: int  # (decompressed) bytes before the piece, a BOM included
    raw_bytes: int  # bytes of the file as stored consumed since the previous piece
    first: bool  # the piece starts the file (where a BOM is, and the UTF-8 check looks)
    bom: int  # bytes of the file's UTF-8 BOM (0 or 3): byte offsets count from after it
    lines: int  # lines in the piece (the file's last one may lack its line break)
    #: a UTF-16/32 file (its BOM says so), or an empty one: the whole file, transcoded and
    #: parsed in one go
    whole: bool = False
    #: of a piece sent without its bytes (:meth:`by_range`): their length and xxh3-64 digest
    stored: tuple[int, int] | None = None

    def by_range(self) -> JsonlPiece:
        """This piece of an uncompressed local file without its bytes: where it is parsed,
        :meth:`bytes_of` reads them again (``bytes_before`` is their offset in the file),
        so a worker on this machine is sent a few numbers instead of the lines, and checks
        they are the lines cut here.

            >>> p = JsonlPiece(b'{"a": 1}\\n', 0, 0, 9, True, 0, 1).by_range()
            >>> p.data, p.stored[0]
            (b'', 9)
        """
        return replace(self, data=b"", stored=(len(self.data), xxh3_64_intdigest(self.data)))

    def bytes_of(self, shard: Shard) -> bytes:
        """The piece's lines: its bytes, or those read again from ``shard`` (a piece sent
        :meth:`by_range`); a file changed since it was cut is an error, not other rows."""
        if self.stored is None:
            return self.data
        length, digest = self.stored
        with open_stream(shard) as fh:
            fh.seek(self.bytes_before)
            data = fh.read(length)
        if len(data) != length or xxh3_64_intdigest(data) != digest:
            raise InputError(f"{shard.path}: the file changed while it was read (bytes"
                             f" {self.bytes_before:,} to {self.bytes_before + length:,})")
        return data

    def last_record_line(self) -> int:
        """The number of the piece's last line holding a record (not blank: a byte other
        than space, tab, CR or LF), 0 when it has none; a whole file's is not known
        before it is parsed (-1)."""
        if self.whole:
            return -1
        end = len(self.data.rstrip(b" \t\r\n"))
        if end <= (self.bom if self.first else 0):
            return 0
        # the piece's line breaks are known (``lines``): count only those after the end
        return self.lines_before + _breaks(self.data, self.lines) \
            - self.data.count(b"\n", end) + 1


#: lines in a piece at most (:func:`jsonl_pieces`): the default batch size, so that by default
#: a piece is a batch. Not the run's batch size: a value's type is settled per piece, and the
#: output must not depend on the batch size
PIECE_LINES = 4096


def jsonl_pieces(shard: Shard, opts: ReadOptions, batches: bool = False
                 ) -> Iterator[JsonlPiece]:
    """A UTF-8 JSON Lines file (plain, gzip, zstd, bz2) as consecutive pieces of whole
    lines, read as a stream (:mod:`line_blocks`): the blocks of ``opts.block_bytes``, or with
    ``batches`` pieces of at most :data:`PIECE_LINES` lines and about
    :data:`MAX_BATCH_BYTES` bytes of lines, cut from the file's start (a worker can parse
    and clean one without the others, and where a piece ends depends on the file alone)."""
    with open_stream(shard) as raw:
        stream = decompressing(raw, shard.compression)
        try:
            head = stream.read(4)
            if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE,
                                codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
                # a UTF-16/32 file (its BOM says so) is transcoded whole, as in another
                # encoding its line breaks are not single bytes
                yield JsonlPiece(head + stream.read(), 0, 0, shard.size, True, 0, 0, True)
                return
        except Exception as e:
            raise _decompress_error(shard, e) from e
        blocks = line_blocks(stream, opts.block_bytes, raw, head)
        pieces = _Pieces((PIECE_LINES, MAX_BATCH_BYTES) if batches else None)
        while True:
            try:
                block = next(blocks)
            except StopIteration:
                break
            except Exception as e:
                raise _decompress_error(shard, e) from e
            yield from pieces.add(block)
        yield from pieces.flush()
        if pieces.bom is None:  # an empty file is still a shard: one empty chunk counts it
            yield JsonlPiece(b"", 0, 0, shard.size, True, 0, 0, True)


class _Pieces:
    """Line blocks re-cut into pieces (see :func:`jsonl_pieces`): a piece ends where a
    batch of ``rows`` lines or ``bytes`` bytes of lines would (the rule :func:`rebatched`
    applies to the records), the lines left over wait for the next block."""

    def __init__(self, cut: tuple[int, int] | None) -> None:
        self.cut = cut
        self.bom: int | None = None
        self.carry = b""
        #: lines in ``carry``, and their lengths where known (None: not measured yet)
        self.carry_lines = 0
        self.carry_sizes: np.ndarray | None = np.zeros(0, np.int64)
        self.lines = self.done = self.raw = 0

    def add(self, block: LineBlock) -> Iterator[JsonlPiece]:
        if self.bom is None:
            self.bom = len(codecs.BOM_UTF8) if block.data.startswith(codecs.BOM_UTF8) else 0
        self.raw += block.raw_bytes
        lines = block.breaks + (0 if block.data.endswith(b"\n") else 1)
        if self.cut is None:
            yield self._piece(block.data, lines)
            return
        data = self.carry + block.data if self.carry else block.data
        rows, max_bytes = self.cut
        if self.carry_lines + lines < rows and len(data) < max_bytes:
            # no piece can end here (next_cut would find none): a small file is one piece,
            # its lines never measured
            self.carry, self.carry_lines, self.carry_sizes = data, self.carry_lines + lines, None
            return
        before = self.carry_sizes if self.carry_sizes is not None else line_lengths(self.carry)
        sizes = np.concatenate((before, line_lengths(block.data)))
        off = at = 0
        while n := next_cut([sizes[at:]], *self.cut):
            size = int(sizes[at:at + n].sum())
            yield self._piece(data[off:off + size], n)
            off, at = off + size, at + n
        self.carry, self.carry_sizes = data[off:], sizes[at:]
        self.carry_lines = int(self.carry_sizes.size)

    def flush(self) -> Iterator[JsonlPiece]:
        if self.carry:
            yield self._piece(self.carry, self.carry_lines)
            self.carry = b""

    def _piece(self, data: bytes, lines: int) -> JsonlPiece:
        assert self.bom is not None
        piece = JsonlPiece(data, self.lines, self.done, self.raw, self.done == 0, self.bom, lines)
        self.raw = 0
        self.lines += _breaks(data, lines)
        self.done += len(data)
        return piece


def _breaks(data: bytes, lines: int) -> int:
    """Line breaks in ``data`` of ``lines`` whole lines (the file's last may lack its
    break), without counting them again.

        >>> _breaks(b"a\\nb\\n", 2), _breaks(b"a\\nb", 2), _breaks(b"", 0)
        (2, 1, 0)
    """
    return lines - (1 if data and not data.endswith(b"\n") else 0)


def piece_chunks(shard: Shard, piece: JsonlPiece, opts: ReadOptions) -> Iterator[Chunk]:
    """Chunks of one piece of a JSON Lines file (:func:`jsonl_pieces`), each row with the
    bytes of its line (``Chunk.row_bytes``)."""
    if piece.whole:
        data, bad_bytes, guess = decode_to_utf8(shard, piece.bytes_of(shard), opts)
        yield from jsonl_chunks(shard, piece.raw_bytes, data, bad_bytes, opts, guess)
        return
    # offsets count from after a BOM, as when the file is read whole
    base = max(0, piece.bytes_before - piece.bom)
    data, bad_bytes, guess = decode_to_utf8(shard, piece.bytes_of(shard), opts,
                                             piece.lines_before, base, piece.first)
    line_bytes = line_lengths(data)
    for chunk in jsonl_chunks(shard, piece.raw_bytes, data, bad_bytes, opts, guess,
                               piece.lines_before, base):
        chunk.row_bytes = line_bytes[chunk.numbers - piece.lines_before - 1]
        yield chunk


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
