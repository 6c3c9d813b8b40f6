"""Co-grouping Ray datasets by a hashed key: the shuffle under distributed dedup.

``co_group`` sends every row of one or more datasets to the partition its key hashes to,
through Ray Data's ``groupby(...).map_groups``, and calls a function once per partition
with all rows of each input that landed there. That one primitive gives grouping by band
key (one input) and joins on ``seq`` (two inputs, e.g. candidate pairs and the sketch
rows they name), with the per-partition work done by plain numpy functions that can be
tested without Ray.

Rows travel as Arrow IPC pieces, one ``(part, name, blob)`` row per input block and
partition, so the shuffle sorts a handful of rows per block instead of every row, and the
inputs need no common schema.

    >>> import pyarrow as pa
    >>> t = pa.table({"k": [1, 2, 3, 4]})
    >>> pieces = split_block(t, name="x", key="k", parts=2)
    >>> sorted(pieces.column("part").to_pylist()), pieces.num_rows
    ([0, 1], 2)
    >>> sum(from_ipc(b).num_rows for b in pieces.column("blob").to_pylist())
    4
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

PIECES = pa.schema([("part", pa.int64()), ("name", pa.string()), ("blob", pa.binary())])

Key = str | Callable[[pa.Table], np.ndarray]
PartitionFn = Callable[..., pa.Table]


def partition_of(values: np.ndarray, parts: int) -> np.ndarray:
    """Partition of each integer key: a multiplicative (Fibonacci) hash, so that runs of
    neighbouring seqs spread over all partitions.

    >>> np.bincount(partition_of(np.arange(1000), 4)).tolist()
    [250, 250, 250, 250]
    """
    with np.errstate(over="ignore"):
        h = np.asarray(values).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return ((h >> np.uint64(32)) % np.uint64(parts)).astype(np.int64)


def to_ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def from_ipc(blob: bytes) -> pa.Table:
    return ipc.open_stream(blob).read_all()


def key_values(table: pa.Table, key: Key) -> np.ndarray:
    if callable(key):
        return key(table)
    return table.column(key).to_numpy()


def split_block(block: pa.Table, *, name: str, key: Key, parts: int) -> pa.Table:
    """One piece of ``block`` per partition (empty ones too, so each partition learns the
    input's schema)."""
    part = partition_of(key_values(block, key), parts)
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(parts + 1))
    sorted_block = block.take(pa.array(order))
    blobs = [to_ipc(sorted_block.slice(bounds[p], bounds[p + 1] - bounds[p]))
             for p in range(parts)]
    return pa.table([pa.array(np.arange(parts, dtype=np.int64)), pa.array([name] * parts),
                     pa.array(blobs, pa.binary())], schema=PIECES)


def run_partition(group: pa.Table, *, fn: PartitionFn, names: list[str],
                  kwargs: dict[str, Any]) -> pa.Table:
    """Reassemble each input's rows of this partition and call ``fn(tables, **kwargs)``;
    an input with no block at all comes as ``None``."""
    name_col = group.column("name").to_pylist()
    blobs = group.column("blob").to_pylist()
    tables: dict[str, pa.Table | None] = {}
    for n in names:
        parts = [from_ipc(b) for nm, b in zip(name_col, blobs, strict=True) if nm == n]
        tables[n] = pa.concat_tables(parts) if parts else None
    return fn(tables, **kwargs)


def use_sort_shuffle(ds: Any) -> None:
    """Have ``ds`` (and the datasets derived from it) shuffle with Ray Data's pull-based
    sort shuffle.

    The keys are already hashed into a few partitions, so a shuffle here only moves one
    small row per block and partition; the sort-based exchange does that in plain tasks,
    while the default strategies start aggregator actors (seconds per shuffle on a small
    cluster, tenths with this one). A dataset carries the context it was created with, so
    this is set on the dataset, not on the global context.
    """
    from ray.data.context import ShuffleStrategy

    ds.context.shuffle_strategy = ShuffleStrategy.SORT_SHUFFLE_PULL_BASED


def co_group(inputs: list[tuple[str, Any, Key]], fn: PartitionFn, parts: int,
             **kwargs: Any) -> Any:
    """A Ray dataset of ``fn``'s outputs, one call per partition of the hashed keys.

    ``inputs`` are ``(name, dataset, key)``: key a column name or a function of a block
    returning one integer per row. Rows of all inputs with equal keys meet in one call.
    """
    split = [ds.map_batches(split_block, fn_kwargs={"name": name, "key": key, "parts": parts},
                            batch_size=None, batch_format="pyarrow", zero_copy_batch=True)
             for name, ds, key in inputs]
    pieces = split[0].union(*split[1:]) if len(split) > 1 else split[0]
    use_sort_shuffle(pieces)
    return pieces.groupby("part", num_partitions=parts).map_groups(
        run_partition, batch_format="pyarrow",
        fn_kwargs={"fn": fn, "names": [n for n, _, _ in inputs], "kwargs": kwargs})
