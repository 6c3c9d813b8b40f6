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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from cleanpipe.io.sources import InputError, Shard, resolve_sources


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
class Chunk:
    shard: Shard
    batch: pa.RecordBatch
    numbers: np.ndarray  # 1-based line or record number of each row
    bad: list[BadRecord] = field(default_factory=list)
    bytes_read: int = 0  # bytes of the shard consumed by this chunk (for progress)
    digest: bytes | None = None  # xxh3-128 of the shard's bytes (first chunk only)


@dataclass(frozen=True)
class ReadOptions:
    batch_size: int = 4096
    encoding: str = "utf-8"
    on_parse_error: str = "quarantine"  # quarantine | fail
    on_decode_error: str = "replace"  # replace | quarantine | fail
    csv_delimiter: str | None = None
    text_column: str = "text"


def _open_bytes(shard: Shard) -> bytes:
    assert shard.path is not None
    try:
        raw = Path(shard.path).read_bytes()
    except OSError as e:
        raise InputError(f"{shard.path}: cannot read: {e.strerror or e}") from e
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


def _decode_to_utf8(shard: Shard, data: bytes, opts: ReadOptions) -> tuple[bytes, list[int]]:
    """UTF-8 bytes of ``data`` and the byte offsets of any invalid sequences.

    A UTF-8 BOM is removed. Other encodings (``input.encoding``) are transcoded first.
    """
    enc = opts.encoding.lower().replace("_", "-")
    if data.startswith(codecs.BOM_UTF8):
        data = data[3:]
    if enc not in ("utf-8", "utf8"):
        try:
            return data.decode(opts.encoding).encode("utf-8"), []
        except (UnicodeDecodeError, LookupError) as e:
            raise InputError(f"{shard.path}: cannot decode as {opts.encoding}: {e}") from e
    try:
        data.decode("utf-8")
        return data, []
    except UnicodeDecodeError as e:
        first = e.start
    bad_offsets = _invalid_utf8_offsets(data, first)
    if opts.on_decode_error == "fail":
        line = data.count(b"\n", 0, first) + 1
        raise InputError(
            f"{shard.path}:{line}: invalid UTF-8 at byte offset {first}; if the file is in"
            " another encoding set input.encoding (e.g. gb18030, utf-16), or set"
            " input.on_decode_error to replace or quarantine"
        )
    return data, bad_offsets


def _invalid_utf8_offsets(data: bytes, first: int) -> list[int]:
    out = []
    pos = first
    while True:
        try:
            data[pos:].decode("utf-8")
            return out
        except UnicodeDecodeError as e:
            out.append(pos + e.start)
            pos = pos + e.end


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


def _batches(table: pa.Table, numbers: np.ndarray, shard: Shard, bad: list[BadRecord],
             batch_size: int, nbytes: int) -> Iterator[Chunk]:
    n = table.num_rows
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
        # bad records and the byte count ride on the first chunk of the shard
        yield Chunk(shard, batch, numbers[start:start + batch.num_rows],
                    bad if first else [], nbytes if first else 0)
        first = False


def _fast_json(data: bytes) -> pa.Table | None:
    """pyarrow's multithreaded JSON reader, or None when the file needs the careful path."""
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


def _read_jsonl(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    raw = _open_bytes(shard)
    data, bad_offsets = _decode_to_utf8(shard, raw, opts)
    bad: list[BadRecord] = []
    if not data.strip():
        yield from _batches(pa.table({}), np.zeros(0, np.int64), shard, bad, opts.batch_size,
                            len(raw))
        return
    if not bad_offsets:
        table = _fast_json(data)
        if table is not None:
            n_lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
            if table.num_rows == n_lines:
                # no blank lines: record k is line k (the common case, no per-line scan)
                numbers = np.arange(1, n_lines + 1, dtype=np.int64)
            else:
                numbers = _line_numbers(data)[2]
            if table.num_rows == len(numbers):
                yield from _batches(table, numbers, shard, bad, opts.batch_size, len(raw))
                return
    starts, ends, numbers = _line_numbers(data)
    # Slow path, only for files with a broken line, invalid UTF-8 or types pyarrow cannot
    # infer in one go: parse line by line so one bad line costs one record, not the file.
    records: list[Any] = []
    good: list[int] = []
    bad_set = np.asarray(bad_offsets, dtype=np.int64)
    for s, e, num in zip(starts.tolist(), ends.tolist(), numbers.tolist(), strict=True):
        line = data[s:e]
        has_bad = bad_set.size and np.any((bad_set >= s) & (bad_set < e))
        if has_bad:
            off = int(bad_set[(bad_set >= s) & (bad_set < e)][0])
            text = line.decode("utf-8", errors="replace")
            if opts.on_decode_error == "quarantine":
                bad.append(BadRecord(shard.name, num, "decode_error",
                                     f"invalid UTF-8 at byte offset {off}", text, off))
                continue
        else:
            text = line.decode("utf-8")
        try:
            rec = json.loads(text)
        except json.JSONDecodeError as err:
            if opts.on_parse_error == "fail":
                raise InputError(f"{shard.path}:{num}: not valid JSON: {err.msg} (column"
                                 f" {err.colno}); set input.on_parse_error: quarantine to"
                                 " keep going") from err
            bad.append(BadRecord(shard.name, num, "parse_error",
                                 f"not valid JSON: {err.msg} (column {err.colno})", text, s))
            continue
        if not isinstance(rec, dict):
            bad.append(BadRecord(shard.name, num, "parse_error",
                                 f"a JSON {type(rec).__name__} where an object was expected",
                                 text, s))
            continue
        records.append(rec)
        good.append(num)
    table = _table_from_records(shard, records, good)
    yield from _batches(table, np.asarray(good, dtype=np.int64), shard, bad, opts.batch_size,
                        len(raw))


def _table_from_records(shard: Shard, records: list[Any], numbers: list[int]) -> pa.Table:
    try:
        return pa.Table.from_pylist(records)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        # name the column and the first record whose type disagrees
        col, line = _first_type_conflict(records, numbers)
        where = f"{shard.path}:{line}" if line else str(shard.path)
        raise InputError(
            f"{where}: column {col!r} mixes types ({e}); make the column one type or read it"
            " as a string"
        ) from e


def _first_type_conflict(records: list[Any], numbers: list[int]) -> tuple[str, int | None]:
    seen: dict[str, type] = {}
    for rec, num in zip(records, numbers, strict=False):
        for k, v in rec.items():
            if v is None:
                continue
            t = type(v)
            if t in (int, float):
                t = float
            if k in seen and seen[k] is not t:
                return k, num
            seen.setdefault(k, t)
    return "?", None


def _read_json(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    raw = _open_bytes(shard)
    data, _ = _decode_to_utf8(shard, raw, opts)
    text = data.decode("utf-8", errors="replace")
    stripped = text.lstrip()
    if not stripped:
        yield from _batches(pa.table({}), np.zeros(0, np.int64), shard, [], opts.batch_size,
                            len(raw))
        return
    if not stripped.startswith("["):
        # a .json file that holds JSON lines
        yield from _read_jsonl(Shard(shard.path, shard.name, "jsonl", shard.compression,
                                     shard.size), opts)
        return
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{shard.path}:{err.lineno}: not valid JSON: {err.msg} (column"
                         f" {err.colno})") from err
    bad = []
    records, numbers = [], []
    for i, rec in enumerate(obj, start=1):
        if isinstance(rec, dict):
            records.append(rec)
            numbers.append(i)
        else:
            bad.append(BadRecord(shard.name, i, "parse_error",
                                 f"record {i} is a JSON {type(rec).__name__}, not an object",
                                 json.dumps(rec, ensure_ascii=False)[:10000]))
    table = _table_from_records(shard, records, numbers)
    yield from _batches(table, np.asarray(numbers, np.int64), shard, bad, opts.batch_size,
                        len(raw))


def _read_csv(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    raw = _open_bytes(shard)
    data, _ = _decode_to_utf8(shard, raw, opts)
    delim = opts.csv_delimiter or ("\t" if shard.format == "tsv" else ",")
    if not data.strip():
        yield from _batches(pa.table({}), np.zeros(0, np.int64), shard, [], opts.batch_size,
                            len(raw))
        return
    try:
        table = pcsv.read_csv(
            io.BytesIO(data),
            parse_options=pcsv.ParseOptions(delimiter=delim, newlines_in_values=True),
            # strings stay strings: a label column "007" must not become 7
            convert_options=pcsv.ConvertOptions(strings_can_be_null=False),
        )
    except pa.ArrowInvalid as e:
        raise InputError(f"{shard.path}: not valid CSV: {e}") from e
    numbers = np.arange(1, table.num_rows + 1, dtype=np.int64)
    yield from _batches(table, numbers, shard, [], opts.batch_size, len(raw))


def _read_text(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    raw = _open_bytes(shard)
    data, _ = _decode_to_utf8(shard, raw, opts)
    starts, ends, numbers = _line_numbers(data)
    lines = [data[s:e].decode("utf-8", errors="replace").rstrip("\r")
             for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
    table = pa.table({opts.text_column: pa.array(lines, pa.string())})
    yield from _batches(table, numbers, shard, [], opts.batch_size, len(raw))


def _read_parquet(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    assert shard.path is not None
    try:
        pf = pq.ParquetFile(shard.path)
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


def _read_arrow(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    assert shard.path is not None
    try:
        source = pa.memory_map(shard.path)
        try:
            table = pa.ipc.open_file(source).read_all()
        except pa.ArrowInvalid:
            source = pa.memory_map(shard.path)
            table = pa.ipc.open_stream(source).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise InputError(f"{shard.path}: not a readable Arrow IPC/Feather file: {e}") from e
    numbers = np.arange(1, table.num_rows + 1, dtype=np.int64)
    yield from _batches(table, numbers, shard, [], opts.batch_size, shard.size)


def _read_hf(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    import datasets

    try:
        ds = datasets.load_from_disk(shard.path)
    except Exception as e:  # datasets raises several kinds; the message is what matters
        raise InputError(f"{shard.path}: not a readable datasets.save_to_disk folder: {e}") from e
    if isinstance(ds, datasets.DatasetDict):
        raise InputError(f"{shard.path}: holds a DatasetDict ({', '.join(ds)}); point at one"
                         " split's folder")
    yield from _read_memory(Shard(shard.path, shard.name, "memory", obj=ds), opts)


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
