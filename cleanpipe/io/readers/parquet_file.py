"""Parquet: row groups streamed in batches (a remote file is read by range, not whole)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cleanpipe.io.readers.chunks import Chunk, ReadOptions
from cleanpipe.io.readers.opening import random_access
from cleanpipe.io.sources import InputError, Shard


def read_parquet(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    source = random_access(shard)
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
