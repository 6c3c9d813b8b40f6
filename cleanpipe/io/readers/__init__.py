"""Read shards as Arrow record batches, with the line/row number of every record.

Each reader yields :class:`Chunk` objects: a record batch, the 1-based line (JSONL) or record
number (other formats) of each row, and the records that could not be parsed, so the engine
can quarantine them with file, line and the parser's message instead of losing them.

One module per format (:mod:`.jsonl`, :mod:`.json_doc`, :mod:`.csv_file`, :mod:`.text_lines`,
:mod:`.parquet_file`, :mod:`.arrow_ipc`, :mod:`.hf_disk`, :mod:`.in_memory`); what they share
is in :mod:`.chunks`, :mod:`.opening`, :mod:`.decoding` and :mod:`.records`.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.jsonl"
    >>> _ = p.write_bytes(b'{"a": "1"}\\n\\n{"a": "2\\xe2\\x80\\xa8"}\\n{oops\\n')
    >>> t = read_table(p)
    >>> t.column("a").to_pylist()
    ['1', '2\\u2028']
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from cleanpipe.io.readers.arrow_ipc import read_arrow
from cleanpipe.io.readers.chunks import MAX_BATCH_BYTES, BadRecord, Chunk, ReadFix, ReadOptions
from cleanpipe.io.readers.csv_file import read_csv
from cleanpipe.io.readers.hf_disk import read_hf
from cleanpipe.io.readers.in_memory import read_memory
from cleanpipe.io.readers.json_doc import read_json
from cleanpipe.io.readers.jsonl import read_jsonl
from cleanpipe.io.readers.parquet_file import read_parquet
from cleanpipe.io.readers.text_lines import read_text
from cleanpipe.io.sources import Shard, resolve_sources

__all__ = ["MAX_BATCH_BYTES", "BadRecord", "Chunk", "ReadFix", "ReadOptions", "iter_batches",
           "iter_chunks", "read_shard", "read_table"]

_READERS = {
    "jsonl": read_jsonl, "json": read_json, "csv": read_csv, "tsv": read_csv,
    "parquet": read_parquet, "arrow": read_arrow, "hf": read_hf, "memory": read_memory,
    "text": read_text,
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
    """All of an input as one Table, shards unified
    (:func:`~cleanpipe.io.schemas.unify_tables`)."""
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
