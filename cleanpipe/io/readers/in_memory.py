"""In-memory inputs: a pyarrow Table or RecordBatch, a polars DataFrame, a ``datasets``
Dataset."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from cleanpipe.io.readers.chunks import Chunk, ReadOptions, table_chunks
from cleanpipe.io.sources import InputError, Shard


def _memory_table(obj: Any, batch_rows: int) -> Iterator[pa.Table]:
    if isinstance(obj, pa.Table):
        yield obj
        return
    if isinstance(obj, pa.RecordBatch):
        yield pa.Table.from_batches([obj])
        return
    # an object can only be a polars or datasets one if that library is loaded already;
    # importing either to find out costs seconds
    pl = sys.modules.get("polars")
    if pl is not None and isinstance(obj, (pl.DataFrame, pl.LazyFrame)):
        df = obj.collect() if isinstance(obj, pl.LazyFrame) else obj
        yield df.to_arrow()
        return
    datasets = sys.modules.get("datasets")
    if datasets is not None and isinstance(obj, datasets.Dataset):
        # through the dataset's own indexing, so a select/shuffle/filter view reads its own
        # rows in its order (the backing table holds every row of the original), a batch
        # at a time: a view's rows are gathered one by one, and all at once a 1M-row view
        # took 3 GB; without a view each batch is a slice of the backing table, not a copy
        arrow = obj.with_format("arrow")
        if len(arrow) == 0:
            yield arrow[:]  # no rows, but the columns
        yield from arrow.iter(batch_size=batch_rows)
        return
    if datasets is not None and isinstance(obj, datasets.IterableDataset):
        for b in obj.iter(batch_size=4096):
            yield pa.Table.from_pydict(b)
        return
    raise InputError(f"cannot read a {type(obj).__name__}: pass a path, a pyarrow Table, a"
                     " polars DataFrame or a datasets.Dataset")


def read_memory(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    start = 1
    for table in _memory_table(shard.obj, opts.batch_size):
        numbers = np.arange(start, start + table.num_rows, dtype=np.int64)
        start += table.num_rows
        yield from table_chunks(table, numbers, shard, [], opts.batch_size, 0)
