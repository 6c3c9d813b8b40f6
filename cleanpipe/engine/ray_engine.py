"""The Ray engine: the same pipeline on a Ray cluster, with results identical to the local one.

Stateless stages run as Ray Data ``map_batches`` tasks; the per-batch work, the merging and
the run loop are the engine core's (:mod:`cleanpipe.engine.core`: ``SegmentWorker.run``
calls :func:`~cleanpipe.engine.apply.apply_stage` / ``GlobalStage.prepare``), as for the
local engine, so stage semantics, counters, examples and events cannot drift between
engines. What differs is only where that work runs and how its results come back:

* Reading happens on the driver with cleanpipe's readers, in the local engine's order, so row
  ids (``file:line``) and sequence numbers are the same. Each chunk travels to the cluster as a
  one-row Arrow envelope ``{chunk, payload}`` (the pickled :class:`~cleanpipe.engine.rows.Rows`:
  current batch, batch as read, ids, seq), because a chunk carries more than one table
  (the original rows for the quarantine, unreadable records) and Ray Data's row-level
  operators must not split, merge or reorder what the stages see.
* Results are put back in chunk order on the driver before anything is merged, so the
  report, the quarantine and the kept rows do not depend on how Ray schedules tasks.
* A global stage (dedup) closes a segment: its ``prepare`` runs in the map tasks, ``observe``
  and ``finalize`` on the driver in row order, and its ``decide`` runs in the map tasks of the
  next segment, on a copy of the finalized stage shipped once per process. A stage that
  declares a distributed grouping (``GlobalStage.distributed_grouping``) is grouped on the
  cluster instead (:mod:`cleanpipe.engine.ray_dedup`); its decisions are joined to the
  chunks there and reach ``decide`` through ``GlobalStage.with_decisions``.

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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from cleanpipe.contract.decisions import DECISIONS
from cleanpipe.contract.stage import GlobalStage, Stage
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
from cleanpipe.engine.ray_shuffle import co_group
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
    env = ray.data.from_arrow_refs(refs)
    if decisions is None:
        return env
    dec = decisions.map_batches(chunk_of, fn_kwargs={"first_seqs": np.asarray(first_seqs)},
                                batch_format="pyarrow")
    return co_group([("r", env, "chunk"), ("d", dec, "chunk")], attach_decisions_step, parts)


class SegmentMapper:
    """Ray Data task state: (optionally) the previous global stage's ``decide``, then one
    segment, on a :class:`~cleanpipe.engine.core.SegmentWorker` of its own.

    Built once per process and segment with the stage list (global stages already
    finalized where this segment needs their decisions), so ``setup()`` runs once per
    process, as in the local engine's workers.
    """

    def __init__(self, stages_blob: bytes, seg_i: int, decide_idx: int | None,
                 text_fields: list[str], flag_codes: bool) -> None:
        self.worker = SegmentWorker(pickle.loads(stages_blob), text_fields, flag_codes)
        self.seg_i = seg_i
        self.decide_idx = decide_idx

    def __call__(self, batch: pa.Table) -> pa.Table:
        w = self.worker
        out = []
        for i, obj in open_envelope(batch):
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
        return envelope(out)


#: per worker process: the mapper of each (run, segment) it has served, so stages are
#: unpickled and ``setup()`` once per process rather than once per task
_MAPPERS: dict[str, SegmentMapper] = {}


def map_chunks(batch: pa.Table, key: str, **kwargs: Any) -> pa.Table:
    """Ray Data task function: run the cached :class:`SegmentMapper` of ``key``."""
    m = _MAPPERS.get(key)
    if m is None:
        _MAPPERS.clear()  # an earlier run's stages are no longer needed
        m = _MAPPERS[key] = SegmentMapper(**kwargs)
    return m(batch)


def _in_order(results: Iterable[pa.Table]) -> Iterator[tuple[int, Any]]:
    """Results in chunk order whatever order Ray hands them back in."""
    waiting: dict[int, Any] = {}
    nxt = 0
    for table in results:
        for i, obj in open_envelope(table):
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


class RayEngine:
    """:class:`cleanpipe.engine.core.Engine` on Ray Data: every segment is one
    ``map_batches`` over the chunks in the object store, a first pass's rows go back to
    the object store, and a stage with a distributed grouping (``distributed_grouping()``,
    :data:`~cleanpipe.engine.ray_dedup.GROUPINGS`) is grouped on the cluster."""

    spill_dir: Path | None = None  # the first pass's held-back quarantine: the temp dir

    def __init__(self, ray: Any, run: Run, chunks: Any, n_actors: int, parts: int) -> None:
        self.ray = ray
        self.run = run
        self.chunks = chunks
        self.n_actors = n_actors
        self.parts = parts
        self.decide_idx: int | None = None
        self.refs: list[Any] = []
        self.first_seqs: list[int] = []

    def results(self, seg_i: int) -> Iterator[tuple[DecidedBatch | None, TaskResult]]:
        for _, (decided, res) in _run_segment(self.chunks, self.run.stages, seg_i,
                                              self.decide_idx, self.run.state.text_fields,
                                              self.run.flag_codes, self.n_actors):
            yield decided, res

    def grouping(self, stage: GlobalStage) -> Grouping | None:
        return distributed(stage, self.ray, self.parts)

    def hold(self, rows: Rows) -> None:
        self.first_seqs.append(int(rows.seq[0]))
        self.refs.append(self.ray.put(envelope([(len(self.refs), rows)])))

    def second_pass(self, idx: int, decisions: Any) -> None:
        self.chunks = (join_decisions(self.ray, self.refs, self.first_seqs, decisions,
                                      self.parts) if self.refs else None)
        self.decide_idx = idx
        self.refs, self.first_seqs = [], []


def execute_ray(spec: PipelineSpec, source: Any, sinks: Sinks, *, workers: int | None = None,
                progress: Progress | None = None, tmp_dir: Path | None = None,
                address: str | None = None, partitions: int | None = None) -> EngineRun:
    """:func:`cleanpipe.engine.local.execute` with the batch work on Ray Data.

    Same signature, same kept rows (in input order), same ``RunState``. A global stage
    declaring a distributed grouping (``minhash_dedup``, ``exact_dedup``) groups on the
    cluster (:mod:`cleanpipe.engine.ray_dedup`) over ``partitions`` hash partitions
    (default: two per CPU of the cluster).
    """
    ray = _ensure_ray(address, workers or spec.workers)
    run = Run(spec, sinks, progress)
    n_actors = max(1, int(workers or spec.workers or ray.available_resources().get("CPU", 1)))
    parts = partitions or max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
    run.state.workers = n_actors
    return EngineRun(_rows(ray, run, source, n_actors, parts), run.state)


def _rows(ray: Any, run: Run, source: Any, n_actors: int, parts: int) -> Iterator[Rows]:
    # reading: exactly the local engine's, so ids, seq and read counters match; each chunk
    # goes to the object store as soon as it is read (Ray spills it to disk under pressure)
    refs: list[Any] = []
    for i, rows in enumerate(read_rows(run.spec, source, run.state, run.progress)):
        run.note_fields(rows)
        refs.append(ray.put(envelope([(i, rows)])))
    chunks = ray.data.from_arrow_refs(refs) if refs else None
    yield from run.rows(RayEngine(ray, run, chunks, n_actors, parts))


def _run_segment(chunks: Any, stages: list[Stage], seg_i: int,
                 decide_idx: int | None, text_fields: list[str], flag_codes: bool,
                 n_actors: int) -> Iterator[tuple[int, Any]]:
    """Ray Data over envelope blocks of chunks; results back in chunk order."""
    if chunks is None:
        return iter(())
    ds = chunks
    # tasks, not actors: Ray reuses its worker processes across tasks, so the imports and
    # stage setup are paid once per process for the whole run, not once per segment
    ds = ds.map_batches(
        map_chunks,
        fn_kwargs={
            "key": f"{uuid.uuid4().hex}-{seg_i}",
            "stages_blob": pickle.dumps(stages, protocol=pickle.HIGHEST_PROTOCOL),
            "seg_i": seg_i, "decide_idx": decide_idx, "text_fields": text_fields,
            "flag_codes": flag_codes},
        batch_size=1, batch_format="pyarrow", zero_copy_batch=True,
        concurrency=n_actors,
    )
    return _in_order(ds.iter_batches(batch_size=None, batch_format="pyarrow"))

