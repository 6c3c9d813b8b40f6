"""CSV and TSV: pyarrow's reader, every column read as strings; invalid bytes found in the
cells after parsing (a record may span lines)."""

from __future__ import annotations

import io
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from cleanpipe.columns import is_utf8
from cleanpipe.io.readers.chunks import BadRecord, Chunk, Notes, ReadOptions, table_chunks
from cleanpipe.io.readers.decoding import decode_to_utf8
from cleanpipe.io.readers.opening import open_bytes
from cleanpipe.io.sources import InputError, Shard
from cleanpipe.io.utf8_repair import mend


def read_csv(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    raw = open_bytes(shard)
    data, bad_bytes, guess = decode_to_utf8(shard, raw, opts)
    delim = opts.csv_delimiter or ("\t" if shard.format == "tsv" else ",")
    if not data.strip():
        yield from table_chunks(pa.table({}), np.zeros(0, np.int64), shard, [], opts.batch_size,
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
    yield from table_chunks(table, numbers, shard, bad, opts.batch_size, len(raw), notes)


def _marked(col: pa.ChunkedArray) -> np.ndarray:
    """Which cells hold a marked invalid byte (``ED B2 xx`` or ``ED B3 xx``: never UTF-8)."""
    return _contains(col, b"\xed\xb2") | _contains(col, b"\xed\xb3")


def _csv_mend(table: pa.Table, numbers: np.ndarray, guess: bool, notes: Notes) -> pa.Table:
    """``table`` with the invalid bytes of its cells read by :func:`mend`, each noted."""
    cols = []
    for col in table.columns:
        if not is_utf8(col.type):
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
        if is_utf8(col.type):
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
