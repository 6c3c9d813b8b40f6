"""The Ray engine: the same pipeline on a Ray cluster, with results identical to the local one.

Stateless stages run in plain Ray tasks; the per-batch work, the merging and the run loop
are the engine core's (:mod:`cleanpipe.engine.core`: ``SegmentWorker.run`` calls
:func:`~cleanpipe.engine.apply.apply_stage` / ``GlobalStage.prepare``), as for the local
engine, so stage semantics, counters, examples and events cannot drift between engines.
What differs is only where that work runs and how its results come back:

* Reading happens on the driver with cleanpipe's readers, in the local engine's order, so row
  ids (``file:line``) and sequence numbers are the same. Consecutive chunks travel to a task
  together (at least ``batch_size`` rows a task: Ray's per-task overhead is milliseconds, a
  small file's work less) as an Arrow envelope ``{chunk, payload}``, one row per chunk (the
  pickled :class:`~cleanpipe.engine.rows.Rows`: current batch, batch as read, ids, seq),
  because a chunk carries more than one table (the original rows for the quarantine,
  unreadable records). Tasks are submitted as chunks are read, a few per CPU in flight, so
  reading overlaps the cluster's work; the stage list goes to the object store once per
  segment and each worker process unpickles it and calls ``setup()`` once.
* Results are put back in chunk order on the driver before anything is merged, so the
  report, the quarantine and the kept rows do not depend on how Ray schedules tasks.
* A global stage (dedup) closes a segment: its ``prepare`` runs in the tasks, the rows wait
  in the object store, and its ``decide`` runs in the tasks of the next segment. On an input
  up to ``CLUSTER_GROUPING_BYTES`` the stage ``observe``s and ``finalize``s on the driver in
  row order, exactly as in the local engine, and the finalized stage is shipped to the next
  segment's tasks. On a larger input a stage that declares a distributed grouping
  (``GlobalStage.distributed_grouping``) is grouped on the cluster instead
  (:mod:`cleanpipe.engine.ray_dedup`); its decisions are joined to the chunks there and
  reach ``decide`` through ``GlobalStage.with_decisions``.

    >>> import pyarrow as pa
    >>> from cleanpipe.engine.ray_engine import envelope, open_envelope
    >>> from cleanpipe.engine.rows import Rows
    >>> import numpy as np
    >>> b = pa.record_batch({"text": ["a"]})
    >>> t = envelope([(7, Rows(b, b, pa.array(["f:1"]), np.array([0])))])
    >>> [(i, r.row_ids.to_pylist()) for i, r in open_envelope(t)]
    [(7, ['f:1'])]
"""

from __future__ import annotations

import pickle
import uuid
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from cleanpipe.contract.decisions import DECISIONS
from cleanpipe.contract.stage import GlobalStage
from cleanpipe.engine.core import (
    DecidedBatch,
    EngineRun,
    Grouping,
    Run,
    SegmentWorker,
    Sinks,
    TaskResult,
    decide_batch,
)
from cleanpipe.engine.progress import Progress
from cleanpipe.engine.ray_dedup import distributed
from cleanpipe.engine.ray_shuffle import Blocks, co_group
from cleanpipe.engine.reading import read_rows
from cleanpipe.engine.rows import Rows
from cleanpipe.spec import PipelineSpec

#: object store of a cluster this engine starts itself (an existing cluster keeps its own)
DEFAULT_OBJECT_STORE = 1 << 30

ENVELOPE = pa.schema([("chunk", pa.int64()), ("payload", pa.binary())])


def envelope(items: Iterable[tuple[int, Any]]) -> pa.Table:
    """A one-column-of-bytes Arrow table: ``(chunk index, pickled object)`` per row."""
    idx, blobs = [], []
    for i, obj in items:
        idx.append(i)
        blobs.append(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
    return pa.table([pa.array(idx, pa.int64()), pa.array(blobs, pa.binary())], schema=ENVELOPE)


def open_envelope(table: pa.Table | pa.RecordBatch) -> Iterator[tuple[int, Any]]:
    for i, blob in zip(table.column("chunk").to_pylist(), table.column("payload").to_pylist(),
                       strict=True):
        yield i, pickle.loads(blob)


@dataclass
class Decided:
    """A chunk (still pickled) with the decisions of the global stage before its segment,
    as joined to it on the cluster (see :func:`join_decisions`)."""

    rows_blob: bytes
    decisions: pa.Table


def chunk_of(decisions: pa.Table, first_seqs: np.ndarray) -> pa.Table:
    """Decisions with the index of the chunk holding their row (chunks are seq ranges)."""
    chunk = np.searchsorted(first_seqs, decisions.column("seq").to_numpy(), side="right") - 1
    return decisions.append_column("chunk", pa.array(chunk.astype(np.int64)))


def attach_decisions_step(tables: dict[str, pa.Table | None]) -> pa.Table:
    """Per partition of chunk indices: each chunk envelope with its decisions."""
    env, dec = tables.get("r"), tables.get("d")
    if env is None:
        return ENVELOPE.empty_table()
    if dec is None:
        dec = DECISIONS.append(pa.field("chunk", pa.int64())).empty_table()
    chunk = dec.column("chunk").to_numpy()
    out = []
    for i, blob in zip(env.column("chunk").to_pylist(), env.column("payload").to_pylist(),
                       strict=True):
        mine = dec.filter(pa.array(chunk == i)).select(DECISIONS.names)
        out.append((i, Decided(blob, mine)))
    return envelope(out)


def join_decisions(ray: Any, refs: list[Any], first_seqs: list[int], decisions: Any,
                   parts: int) -> Any:
    """The chunk envelopes joined with the decisions of their rows, on the cluster: a
    co-group by chunk index, so neither side passes through the driver."""
    env = Blocks(ray, refs)
    if decisions is None:
        return env
    dec = decisions.map_batches(chunk_of, fn_kwargs={"first_seqs": np.asarray(first_seqs)},
                                batch_format="pyarrow")
    return co_group([("r", env, "chunk"), ("d", dec, "chunk")], attach_decisions_step, parts)


class SegmentMapper:
    """Task state in one worker process: (optionally) the previous global stage's
    ``decide``, then one segment, on a :class:`~cleanpipe.engine.core.SegmentWorker` of its
    own.

    Built once per process and segment with the stage list (global stages already
    finalized where this segment needs their decisions), so ``setup()`` runs once per
    process, as in the local engine's workers.
    """

    def __init__(self, stages_blob: bytes, seg_i: int, decide_idx: int | None,
                 text_fields: list[str], flag_codes: bool) -> None:
        self.worker = SegmentWorker(pickle.loads(stages_blob), text_fields, flag_codes)
        self.seg_i = seg_i
        self.decide_idx = decide_idx

    def __call__(self, chunks: pa.Table | list[tuple[int, Any]]) -> list[tuple[int, Any]]:
        w = self.worker
        out = []
        for i, obj in open_envelope(chunks) if isinstance(chunks, pa.Table) else chunks:
            decided = None
            rows = obj
            if isinstance(obj, Decided):
                rows = pickle.loads(obj.rows_blob)
            if self.decide_idx is not None:
                g = w.global_stage(self.decide_idx)
                if isinstance(obj, Decided):
                    g = g.with_decisions(obj.decisions)
                rows, decided = decide_batch(g, self.decide_idx, rows, w.text_fields,
                                             w.flag_codes)
            out.append((i, (decided, w.run(self.seg_i, rows))))
        return out


#: per worker process: the mapper of the (run, segment) it serves, so stages are
#: unpickled and ``setup()`` once per process rather than once per task
_MAPPERS: dict[str, SegmentMapper] = {}


def map_chunks(key: str, stages: list[Any], chunks: pa.Table | list[tuple[int, Any]],
               **kwargs: Any) -> list[tuple[int, Any]]:
    """Ray task: run ``chunks`` (``(chunk index, Rows or Decided)`` pairs, or their
    envelope) through the cached :class:`SegmentMapper` of ``key``. ``stages`` is ``[ref]``
    of the pickled stage list: nested, so Ray does not fetch it for every task, only a
    process that has no mapper for ``key`` yet does."""
    m = _MAPPERS.get(key)
    if m is None:
        import ray

        _MAPPERS.clear()  # an earlier segment's stages are no longer needed
        m = _MAPPERS[key] = SegmentMapper(ray.get(stages[0]), **kwargs)
    return m(chunks)


#: the Ray remote function of :func:`map_chunks`, made once per driver process
_REMOTE: dict[str, Any] = {}


def _remote_map(ray: Any) -> Any:
    if "map" not in _REMOTE:
        _REMOTE["map"] = ray.remote(num_cpus=1)(map_chunks)
    return _REMOTE["map"]


def _in_order(results: Iterable[list[tuple[int, Any]]]) -> Iterator[tuple[int, Any]]:
    """Results in chunk order whatever order their tasks hand them back in."""
    waiting: dict[int, Any] = {}
    nxt = 0
    for part in results:
        for i, obj in part:
            waiting[i] = obj
            while nxt in waiting:
                yield nxt, waiting.pop(nxt)
                nxt += 1
    if waiting:  # pragma: no cover - would mean a lost chunk
        raise RuntimeError(f"ray engine: chunks {sorted(waiting)[:5]} came back out of order")


def _ensure_ray(address: str | None, workers: int | None) -> Any:
    try:
        import ray
    except ImportError as e:  # pragma: no cover - depends on the install
        raise RuntimeError("engine: ray needs the ray extra: pip install 'cleanpipe[ray]'") from e
    if not ray.is_initialized():
        if address:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False,
                     object_store_memory=DEFAULT_OBJECT_STORE)
    return ray


#: rows a task gets at least (fewer when the pipeline's batch_size is smaller): Ray's
#: per-task overhead is milliseconds, a small file's work less; more rows per task would
#: leave CPUs idle at each segment's end (a global stage waits for the segment's last task)
TASK_ROWS = 1024


class Groups:
    """Consecutive chunks gathered into task-sized groups of at least ``rows`` rows: lists
    of ``(chunk index, Rows)``, which Ray serializes with the Arrow buffers out of band (one
    copy into the object store), or envelopes (``as_envelope``), which :func:`join_decisions`
    co-groups with a distributed grouping's decisions."""

    def __init__(self, rows: int, as_envelope: bool = False) -> None:
        self.rows = rows
        self.as_envelope = as_envelope
        self.items: list[tuple[int, Any]] = []
        self.n = 0
        self.count = 0  # chunks gathered so far, over all envelopes

    def add(self, obj: Any, n_rows: int) -> Any:
        """Add one chunk; returns a group once enough rows are gathered."""
        self.items.append((self.count, obj))
        self.count += 1
        self.n += n_rows
        return self.flush() if self.n >= self.rows else None

    def flush(self) -> Any:
        """The group of the chunks gathered since the last one (``None`` if none)."""
        if not self.items:
            return None
        group, self.items, self.n = self.items, [], 0
        return envelope(group) if self.as_envelope else group


def task_rows(spec: PipelineSpec) -> int:
    return min(spec.batch_size, TASK_ROWS)


class RayEngine:
    """:class:`cleanpipe.engine.core.Engine` on Ray tasks: every segment is a stream of
    tasks over envelopes of consecutive chunks (a few in flight per CPU), the stage list
    put once in the object store per segment; a first pass's rows wait in the object
    store. A global stage is grouped on the driver, as by the local engine, unless the
    input is larger than ``cluster_grouping_bytes`` and the stage declares a distributed
    grouping (``distributed_grouping()``, :data:`~cleanpipe.engine.ray_dedup.GROUPINGS`):
    then it is grouped on the cluster."""

    spill_dir: Path | None = None  # the first pass's held-back quarantine: the temp dir

    def __init__(self, ray: Any, run: Run, inputs: Iterable[Any], cpus: int, parts: int,
                 cluster_grouping_bytes: int) -> None:
        self.ray = ray
        self.run = run
        self.inputs: Iterable[Any] | None = inputs
        self.cpus = cpus
        self.parts = parts
        self.cluster_grouping_bytes = cluster_grouping_bytes
        self.decide_idx: int | None = None
        self.held = Groups(task_rows(run.spec))
        self.refs: list[Any] = []
        self.first_seqs: list[int] = []

    def results(self, seg_i: int) -> Iterator[tuple[DecidedBatch | None, TaskResult]]:
        if self.inputs is None:
            return
        inputs, self.inputs = self.inputs, None
        stages = self.ray.put(pickle.dumps(self.run.stages, protocol=pickle.HIGHEST_PROTOCOL))
        task = _remote_map(self.ray)
        kwargs = {"seg_i": seg_i, "decide_idx": self.decide_idx,
                  "text_fields": self.run.state.text_fields,
                  "flag_codes": self.run.flag_codes}
        key = f"{uuid.uuid4().hex}-{seg_i}"
        # a few tasks per CPU in flight: enough to keep every CPU busy while the driver
        # reads or merges, few enough that the object store holds only a window of chunks
        window = 3 * self.cpus + 1

        def submitted() -> Iterator[list[tuple[int, Any]]]:
            flight: deque[Any] = deque()
            for chunks in inputs:
                flight.append(task.remote(key, [stages], chunks, **kwargs))
                if len(flight) >= window:
                    yield self.ray.get(flight.popleft())
            while flight:
                yield self.ray.get(flight.popleft())

        for _, (decided, res) in _in_order(submitted()):
            yield decided, res

    def grouping(self, stage: GlobalStage) -> Grouping | None:
        g = None
        if self.run.state.input_bytes > self.cluster_grouping_bytes:
            g = distributed(stage, self.ray, self.parts)
        # else a small index: the stage observes and finalizes on the driver
        # held rows are co-grouped with a distributed grouping's decisions as envelopes
        self.held = Groups(task_rows(self.run.spec), as_envelope=g is not None)
        return g

    def hold(self, rows: Rows) -> None:
        self.first_seqs.append(int(rows.seq[0]))
        group = self.held.add(rows, rows.num_rows)
        if group is not None:
            self.refs.append(self.ray.put(group))

    def second_pass(self, idx: int, decisions: Any) -> None:
        group = self.held.flush()
        if group is not None:
            self.refs.append(self.ray.put(group))
        if decisions is not None and self.refs:
            joined = join_decisions(self.ray, self.refs, self.first_seqs, decisions, self.parts)
            self.inputs = joined.to_arrow_refs()
        else:
            self.inputs = self.refs
        self.decide_idx = idx
        self.refs, self.first_seqs = [], []


#: inputs up to this size group on the driver (the local engine's in-memory grouping):
#: their index (tens of bytes per row) is far smaller than the input, and one process
#: groups it in less time than the cluster takes to start one shuffle
CLUSTER_GROUPING_BYTES = 4 << 30


def execute_ray(spec: PipelineSpec, source: Any, sinks: Sinks, *, workers: int | None = None,
                progress: Progress | None = None, tmp_dir: Path | None = None,
                address: str | None = None, partitions: int | None = None,
                cluster_grouping_bytes: int | None = None) -> EngineRun:
    """:func:`cleanpipe.engine.local.execute` with the batch work in Ray tasks.

    Same signature, same kept rows (in input order), same ``RunState``. A global stage
    declaring a distributed grouping (``minhash_dedup``, ``exact_dedup``) groups on the
    cluster (:mod:`cleanpipe.engine.ray_dedup`) over ``partitions`` hash partitions
    (default: two per CPU of the cluster) when the input is larger than
    ``cluster_grouping_bytes`` (default :data:`CLUSTER_GROUPING_BYTES`; 0: always), else
    on the driver.
    """
    ray = _ensure_ray(address, workers or spec.workers)
    run = Run(spec, sinks, progress)
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    parts = partitions or max(2, 2 * cpus)
    run.state.workers = max(1, int(workers or spec.workers or cpus))
    limit = CLUSTER_GROUPING_BYTES if cluster_grouping_bytes is None else cluster_grouping_bytes
    return EngineRun(_rows(ray, run, source, cpus, parts, limit), run.state)


def _rows(ray: Any, run: Run, source: Any, cpus: int, parts: int,
          cluster_grouping_bytes: int) -> Iterator[Rows]:
    # reading: exactly the local engine's, so ids, seq and read counters match; chunks go
    # to the tasks as they are read, so reading overlaps the cluster's work
    rows_iter = read_rows(run.spec, source, run.state, run.progress)
    head: list[Rows] = []
    for r in rows_iter:  # up to the first rows: their schema names the text fields
        head.append(r)
        run.note_fields(r)
        if r.num_rows:
            break

    def inputs() -> Iterator[list[tuple[int, Rows]]]:
        groups = Groups(task_rows(run.spec))
        for rows in chain(head, rows_iter):
            group = groups.add(rows, rows.num_rows)
            if group is not None:
                yield group
        group = groups.flush()
        if group is not None:
            yield group

    yield from run.rows(RayEngine(ray, run, inputs(), cpus, parts, cluster_grouping_bytes))
