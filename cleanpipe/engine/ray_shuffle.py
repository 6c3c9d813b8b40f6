"""Co-grouping datasets of Arrow blocks by a hashed key, with plain Ray tasks: the shuffle
under distributed dedup.

A :class:`Blocks` is a list of object refs to Arrow tables; its ``map_batches`` runs a
function on each block in a Ray task, and :func:`co_group` sends every row of one or more
of them to the partition its key hashes to and calls a function once per partition with
all rows of each input that landed there. That one primitive gives grouping by band key
(one input) and joins on ``seq`` (two inputs, e.g. candidate pairs and the sketch rows they
name), with the per-partition work done by plain numpy functions that can be tested
without Ray.

Plain tasks, not Ray Data: each Ray Data execution (a map, a shuffle, a count) costs about a
second of planning and scheduling on a small cluster whatever the data, and a dedup grouping
takes about twenty of them. Here a shuffle is one task per input block, which splits the
block into one Arrow IPC piece per partition (``num_returns``: each piece is its own object),
and one task per partition, which gets exactly its pieces.

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

from cleanpipe.engine.ray_fetch import fetch

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


def _map_block(fn: Callable[..., pa.Table], block: pa.Table,
               kwargs: dict[str, Any]) -> pa.Table:
    return fn(block, **kwargs)


def _part_pieces(pieces: pa.Table, parts: int) -> list[pa.Table]:
    """The rows of a ``PIECES`` table, one table per partition."""
    part = pieces.column("part").to_numpy()
    return [pieces.filter(pa.array(part == p)) for p in range(parts)]


def _partition(fn: Callable[..., pa.Table], kwargs: dict[str, Any],
               *pieces: pa.Table) -> pa.Table:
    group = pa.concat_tables(pieces) if pieces else PIECES.empty_table()
    return fn(group, **kwargs)


def _num_rows(block: pa.Table) -> int:
    return block.num_rows


#: the remote functions of this module, made once per driver process (and per ``ray``
#: module: the in-process stand-in of the tests has its own)
_REMOTE: dict[tuple[int, str], Any] = {}


def _remote(ray: Any, fn: Callable[..., Any]) -> Any:
    key = (id(ray), fn.__name__)
    if key not in _REMOTE:
        _REMOTE[key] = ray.remote(num_cpus=1)(fn)
    return _REMOTE[key]


class Blocks:
    """A dataset as object refs to Arrow tables, transformed by plain Ray tasks (each
    submitted at once; Ray runs them as their inputs are ready).

    The subset of Ray Data's ``Dataset`` the distributed groupings use: ``map_batches``
    (one call per block), ``union``, ``materialize``, ``count``, ``to_arrow_refs``.
    """

    def __init__(self, ray: Any, refs: list[Any]) -> None:
        self.ray = ray
        self.refs = list(refs)

    def map_batches(self, fn: Callable[..., pa.Table], *,
                    fn_kwargs: dict[str, Any] | None = None, **_: Any) -> Blocks:
        task = _remote(self.ray, _map_block)
        return Blocks(self.ray, [task.remote(fn, r, fn_kwargs or {}) for r in self.refs])

    def union(self, *others: Blocks) -> Blocks:
        return Blocks(self.ray, self.refs + [r for o in others for r in o.refs])

    def materialize(self) -> Blocks:
        """The same blocks: their tasks are already submitted."""
        return self

    def count(self) -> int:
        task = _remote(self.ray, _num_rows)
        return int(sum(fetch(self.ray, [task.remote(r) for r in self.refs])))

    def to_arrow_refs(self) -> list[Any]:
        return list(self.refs)

    def by_part(self, parts: int, step: Callable[..., pa.Table], **kwargs: Any) -> Blocks:
        """``step(pieces, **kwargs)`` once per partition ``0..parts-1``, with the rows of
        this ``PIECES`` dataset whose ``part`` is that partition: one task per block splits
        it (one object per partition), one task per partition gets its objects."""
        ray = self.ray
        if not self.refs:
            return Blocks(ray, [])
        if parts == 1:  # every block is the one partition's
            per_block = [[r] for r in self.refs]
        else:
            split = _remote(ray, _part_pieces).options(num_returns=parts)
            per_block = [split.remote(r, parts) for r in self.refs]
        task = _remote(ray, _partition)
        return Blocks(ray, [task.remote(step, kwargs, *[b[p] for b in per_block])
                            for p in range(parts)])


def co_group(inputs: list[tuple[str, Blocks, Key]], fn: PartitionFn, parts: int,
             **kwargs: Any) -> Blocks:
    """A dataset of ``fn``'s outputs, one call per partition of the hashed keys.

    ``inputs`` are ``(name, dataset, key)``: key a column name or a function of a block
    returning one integer per row. Rows of all inputs with equal keys meet in one call.
    """
    split = [ds.map_batches(split_block, fn_kwargs={"name": name, "key": key, "parts": parts})
             for name, ds, key in inputs]
    pieces = split[0].union(*split[1:]) if len(split) > 1 else split[0]
    return pieces.by_part(parts, run_partition, fn=fn, names=[n for n, _, _ in inputs],
                          kwargs=kwargs)
