"""The Ray engine: the same pipeline on a Ray cluster, with results identical to the local one.

Stateless stages run in plain Ray tasks; the per-batch work, the merging and the run loop
are the engine core's (:mod:`cleanpipe.engine.core`: ``SegmentWorker.run`` calls
:func:`~cleanpipe.engine.apply.apply_stage` / ``GlobalStage.prepare``), as for the local
engine, so stage semantics, counters, examples and events cannot drift between engines.
What differs is only where that work runs and how its results come back:

* Reading happens on the driver with cleanpipe's readers, in the local engine's order, so row
  ids (``file:line``) and sequence numbers are the same. Consecutive chunks travel to a task
  together (:mod:`~cleanpipe.engine.task_groups`: ``TASK_ROWS`` rows or ``TASK_BYTES``
  bytes a task) as a list of ``(chunk index, Rows)``, which Ray serializes with the Arrow
  buffers out of band; on a
  cluster of this machine alone a JSON Lines piece travels as its byte range
  (:func:`one_machine`). Tasks are submitted as chunks are read, a few per CPU in flight,
  so reading overlaps the cluster's work; the stage list goes to the object store once per
  segment and each worker process unpickles it and calls ``setup()`` once. On a cluster of
  several nodes each node runs blocks of consecutive task groups
  (:mod:`~cleanpipe.engine.node_blocks`), in every pass, so its caches see neighbouring
  rows and a later pass's tasks run where their rows wait.
* Results are put back in chunk order on the driver before anything is merged, so the
  report, the quarantine and the kept rows do not depend on how Ray schedules tasks.
* A global stage (dedup) closes a segment: its ``prepare`` runs in the tasks, the rows wait
  in the object store (where the stage observes without the batch's columns, in that of
  the node that cleaned them, small batches joined: :func:`split_results`), and its
  ``decide`` runs in the tasks of the next segment. On an input up to
  ``CLUSTER_GROUPING_BYTES`` the stage ``observe``s and ``finalize``s on the driver in row
  order, exactly as in the local engine; the next segment's tasks get the stage as
  configured and their rows' decisions where it has a decisions table
  (``GlobalStage.has_decisions_table``), else the finalized stage. On a larger input a
  stage that declares a distributed grouping (``GlobalStage.distributed_grouping``) is
  grouped on the cluster instead
  (:mod:`cleanpipe.engine.ray_dedup`); its decisions are shuffled by the task group holding
  their row (:func:`decisions_by_group`: the rows themselves do not move) and reach
  ``decide`` through ``GlobalStage.with_decisions``.

    >>> import numpy as np
    >>> from cleanpipe.contract.decisions import decisions_table
    >>> t = decisions_table(np.array([3, 12]), ["near_duplicate"] * 2, ["a", "b"])
    >>> group_of(t, np.array([0, 10])).column("group").to_pylist()
    [0, 1]
"""

from __future__ import annotations

import os
import pickle
import uuid
from collections import deque
from collections.abc import Iterable, Iterator
from itertools import accumulate, chain
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
    ToRead,
    split_off_rows,
)
from cleanpipe.engine.node_blocks import AHEAD_GROUPS, NodeBlocks
from cleanpipe.engine.progress import Progress
from cleanpipe.engine.ray_dedup import distributed
from cleanpipe.engine.ray_fetch import fetch
from cleanpipe.engine.ray_shuffle import Blocks, co_group, partition_of
from cleanpipe.engine.reading import read_rows
from cleanpipe.engine.rows import Rows, coalesced
from cleanpipe.engine.task_groups import TASK_BYTES, Groups, grouped, task_rows
from cleanpipe.engine.worker_start import leave_cores_to_engine
from cleanpipe.spec import PipelineSpec

#: object store of a cluster this engine starts itself (an existing cluster keeps its own)
DEFAULT_OBJECT_STORE = 1 << 30

GROUPED_DECISIONS = DECISIONS.append(pa.field("group", pa.int64()))


def group_of(decisions: pa.Table, first_seqs: np.ndarray) -> pa.Table:
    """Decisions with the index of the task group holding their row (groups are
    consecutive seq ranges starting at ``first_seqs``)."""
    group = np.searchsorted(first_seqs, decisions.column("seq").to_numpy(), side="right") - 1
    return decisions.append_column("group", pa.array(group.astype(np.int64)))


def _decisions_step(tables: dict[str, pa.Table | None]) -> pa.Table:
    dec = tables.get("d")
    return dec if dec is not None else GROUPED_DECISIONS.empty_table()


def decisions_by_group(ray: Any, decisions: Blocks, first_seqs: list[int],
                       parts: int) -> list[Any]:
    """For each task group of held rows, the ref of a table holding (at least) the
    decisions of its rows: the decisions co-grouped by group index into ``parts``
    partitions, group ``g`` reading partition ``partition_of(g)``."""
    dec = decisions.map_batches(group_of, fn_kwargs={"first_seqs": np.asarray(first_seqs)})
    by_part = co_group([("d", dec, "group")], _decisions_step, parts).to_arrow_refs()
    if not by_part:  # no decision blocks at all: every group decides on none
        return [DECISIONS.empty_table()] * len(first_seqs)
    return [by_part[p] for p in partition_of(np.arange(len(first_seqs)), parts).tolist()]


def _decisions_of(decisions: pa.Table, seq: np.ndarray) -> pa.Table:
    """The rows of ``decisions`` within ``seq``'s range (``decide`` ignores the others)."""
    s = decisions.column("seq").to_numpy()
    return decisions.filter(pa.array((s >= seq.min()) & (s <= seq.max()))).select(
        DECISIONS.names)


class SegmentMapper:
    """Task state in one worker process: (optionally) the previous global stage's
    ``decide``, then one segment, on a :class:`~cleanpipe.engine.core.SegmentWorker` of its
    own.

    Built once per process and segment with the stage list (as configured, but for the
    finalized global stages without a decisions table; a stage with one decides from the
    decisions each task is given), so ``setup()`` runs once per process, as in the local
    engine's workers.
    """

    def __init__(self, stages_blob: bytes, seg_i: int, decide_idx: int | None,
                 text_fields: list[str], flag_codes: bool) -> None:
        self.worker = SegmentWorker(pickle.loads(stages_blob), text_fields, flag_codes)
        self.seg_i = seg_i
        self.decide_idx = decide_idx

    def __call__(self, chunks: list[tuple[int, Rows | ToRead]],
                 decisions: pa.Table | None) -> list[tuple[int, Any]]:
        w = self.worker
        out = []
        for i, rows in chunks:
            decide = None
            if self.decide_idx is not None:
                assert isinstance(rows, Rows)  # a second pass: rows held from the first
                g = w.global_stage(self.decide_idx)
                if decisions is not None and rows.num_rows:
                    g = g.with_decisions(_decisions_of(decisions, rows.seq))
                elif g.has_decisions_table() and rows.num_rows:  # pragma: no cover - a bug
                    raise RuntimeError(f"ray engine: no decisions for {g.name}'s rows")
                decide = (self.decide_idx, g)
            out.append((i, w.run_decided(self.seg_i, rows, decide)))
        return out


#: per worker process: the mapper of the (run, segment) it serves, so stages are
#: unpickled and ``setup()`` once per process rather than once per task
_MAPPERS: dict[str, SegmentMapper] = {}


def map_chunks(key: str, stages: list[Any], chunks: list[Any], decisions: pa.Table | None,
               first: int | None = None, split: int = 0, **kwargs: Any) -> Any:
    """Ray task: run ``chunks`` (``(chunk index, Rows)`` pairs; with ``first``, the rows a
    task of the previous segment left here, numbered from ``first``), decided by
    ``decisions`` (of the previous global stage's rows in this task, where it has a
    decisions table, else ``None``), through the cached
    :class:`SegmentMapper` of ``key``. ``stages`` is ``[ref]`` of the pickled stage list:
    nested, so Ray does not fetch it for every task, only a process that has no mapper for
    ``key`` yet does.

    With ``split`` (the most rows a batch may hold) the task has two results
    (:func:`split_results`): what the driver merges, and the rows, which stay in this node's
    object store for the next segment's task."""
    m = _MAPPERS.get(key)
    if m is None:
        import ray

        leave_cores_to_engine()  # before the stages' setup: a task has num_cpus=1
        _MAPPERS.clear()  # an earlier segment's stages are no longer needed
        m = _MAPPERS[key] = SegmentMapper(fetch(ray, stages[0]), **kwargs)
    if first is not None:
        chunks = list(enumerate(chunks, first))
    out = m(chunks, decisions)
    return split_results(out, split) if split else out


def split_results(out: list[tuple[int, Any]], batch_rows: int
                  ) -> tuple[tuple[list[tuple[int, Any]], list[int]], list[Rows]]:
    """A task's results without their rows' columns, and the rows with rows left, in order
    (:meth:`Rows.split_off_columns`), consecutive batches joined up to ``batch_rows`` rows
    and 1 MiB (:func:`~cleanpipe.engine.rows.coalesced`): the driver merges the first (with
    the rows of each batch in the second) and observes on it, the second waits on the
    cluster for the next segment."""
    held = coalesced([rows for _, pairs in out for rows in split_off_rows(pairs)], batch_rows)
    return (out, [r.num_rows for r in held]), held


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
        address = address or os.environ.get("RAY_ADDRESS")
        if address:  # a cluster the user named: joined as it is
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        else:
            # a private one, even beside a cluster `ray start` left on this machine, which
            # ray.init's default would join (and then refuse num_cpus with)
            ray.init(address="local", num_cpus=workers, include_dashboard=False,
                     log_to_driver=False, object_store_memory=DEFAULT_OBJECT_STORE)
    return ray


class RayEngine:
    """:class:`cleanpipe.engine.core.Engine` on Ray tasks: every segment is a stream of
    tasks over groups of consecutive chunks (a few in flight per CPU), the stage list put
    once in the object store per segment; a first pass's rows wait in the object store, in
    the groups of the next segment's tasks. A global stage is grouped on the driver, as by
    the local engine, unless the input is larger than ``cluster_grouping_bytes`` and the
    stage declares a distributed grouping (``distributed_grouping()``,
    :data:`~cleanpipe.engine.ray_dedup.GROUPINGS`): then it is grouped on the cluster."""

    spill_dir: Path | None = None  # the first pass's held-back quarantine: the temp dir

    def __init__(self, ray: Any, run: Run, inputs: Iterable[tuple[Any, Any, int | None]],
                 cpus: int, parts: int, cluster_grouping_bytes: int) -> None:
        self.ray = ray
        self.run = run
        #: the next segment's tasks: (chunks or their ref, decisions or their ref or None,
        #: the index of the first chunk where the chunks are rows left on the cluster)
        self.inputs: Iterable[tuple[Any, Any, int | None]] | None = inputs
        self.cpus = cpus
        self.parts = parts
        self.cluster_grouping_bytes = cluster_grouping_bytes
        self.decide_idx: int | None = None
        self.expected = 0  # the next segment's task groups, where known
        self.held = Groups(task_rows(run.spec))
        self.refs: list[Any] = []  # the held groups
        self.counts: list[int] = []  # the batches of each group left on the cluster
        self.seqs: list[np.ndarray] = []  # the seq of each held group's rows
        #: the stages as configured, before any pass: a stage with a decisions table is
        #: shipped so, with each task's decisions, not finalized (its per-row state can
        #: be tens of MB that every worker process would fetch and unpickle)
        self.unfinalized = pickle.dumps(run.stages, protocol=pickle.HIGHEST_PROTOCOL)
        #: whether the current segment's tasks leave their rows on the cluster; the rows
        #: held there so far, as merged here, and as the tasks counted what they left
        self.split = False
        self.on_cluster = 0
        self.left = 0

    def results(self, seg_i: int) -> Iterator[tuple[DecidedBatch | None, TaskResult]]:
        if self.inputs is None:
            return
        inputs, self.inputs = self.inputs, None
        stages = self.ray.put(self.stages_blob(seg_i))
        closing = self.run.segments[seg_i].closing
        # rows whose global stage observes without their columns stay on the cluster
        self.split = closing is not None and not self.run.stages[closing].observe_reads_batch()
        kwargs = {"seg_i": seg_i, "decide_idx": self.decide_idx,
                  "text_fields": self.run.state.text_fields,
                  "flag_codes": self.run.flag_codes,
                  "split": self.run.spec.batch_size if self.split else 0}
        key = f"{uuid.uuid4().hex}-{seg_i}"

        returns = 2 if self.split else 1
        plain = _remote_map(self.ray).options(num_returns=returns) if self.split else \
            _remote_map(self.ray)

        def submit(chunks: Any, decisions: Any, first: int | None, **options: Any) -> Any:
            # per task only where a task gets options of its own (a node to run on)
            task = _remote_map(self.ray).options(num_returns=returns, **options) if options \
                else plain
            return task.remote(key, [stages], chunks, decisions, first, **kwargs)

        nodes = worker_nodes(self.ray)
        expected = self.expected if seg_i else -(-self.run.state.input_bytes // TASK_BYTES)
        parts = (self._by_node(inputs, expected, nodes, submit) if len(nodes) > 1
                 else self._windowed(inputs, submit))
        for _, pairs in _in_order(parts):
            yield from pairs

    def _windowed(self, inputs: Iterable[tuple[Any, Any, int | None]],
                  submit: Any) -> Iterator[list[tuple[int, Any]]]:
        """Each input's task wherever Ray places it, results in input order."""
        # a few tasks per CPU in flight: enough to keep every CPU busy while the driver
        # reads or merges, few enough that the object store holds only a window of chunks
        window = 3 * self.cpus + 1
        flight: deque[Any] = deque()
        for chunks, decisions, first in inputs:
            flight.append(submit(chunks, decisions, first))
            if len(flight) >= window:
                yield self._fetched(flight.popleft())
        while flight:
            yield self._fetched(flight.popleft())

    def _by_node(self, inputs: Iterable[tuple[Any, Any, int | None]], expected: int,
                 nodes: dict[str, int], submit: Any) -> Iterator[list[tuple[int, Any]]]:
        """Each input's task on the node :class:`NodeBlocks` gives it (soft affinity: a
        node that is gone leaves it to another), two a CPU queued on each node; results in
        input order. A node that ran ahead takes no new block while ``AHEAD_GROUPS`` tasks
        wait for the driver (a slow node's block is always finished: it holds the next
        result the driver needs)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        plan = NodeBlocks(iter(inputs), nodes, expected)
        submitted: dict[int, Any] = {}  # input index -> its task's ref(s), until merged
        running: dict[Any, tuple[str, int]] = {}  # a task's first ref -> node, input index
        queued = dict.fromkeys(nodes, 0)
        finished: set[int] = set()
        nxt = 0
        while True:
            for node, cpus in nodes.items():
                while queued[node] < 2 * cpus and (job := plan.next_for(
                        node, more=len(submitted) < AHEAD_GROUPS)) is not None:
                    i, (chunks, decisions, first) = job
                    affinity = NodeAffinitySchedulingStrategy(node, soft=True)
                    ref = submitted[i] = submit(chunks, decisions, first,
                                                scheduling_strategy=affinity)
                    running[ref[0] if self.split else ref] = (node, i)
                    queued[node] += 1
            if nxt not in finished:
                if not running:
                    if not plan.done:  # pragma: no cover - would lose inputs
                        raise RuntimeError("ray engine: inputs left with no task running")
                    return  # every input handed out and its results taken
                ready, _ = self.ray.wait(list(running), num_returns=1, fetch_local=False)
                for r in ready:
                    node, i = running.pop(r)
                    queued[node] -= 1
                    finished.add(i)
            while nxt in finished:
                finished.discard(nxt)
                yield self._fetched(submitted.pop(nxt))
                nxt += 1

    def stages_blob(self, seg_i: int) -> bytes:
        """The stage list segment ``seg_i``'s tasks get, pickled: as configured, but for
        the finalized global stages before it that have no decisions table."""
        finalized = [s.closing for s in self.run.segments[:seg_i] if s.closing is not None
                     and not self.run.stages[s.closing].has_decisions_table()]
        if not finalized:
            return self.unfinalized
        stages = pickle.loads(self.unfinalized)
        for i in finalized:
            stages[i] = self.run.stages[i]
        return pickle.dumps(stages, protocol=pickle.HIGHEST_PROTOCOL)

    def grouping(self, stage: GlobalStage) -> Grouping | None:
        if self.run.state.input_bytes <= self.cluster_grouping_bytes:
            return None  # a small index: the stage observes and finalizes on the driver
        return distributed(stage, self.ray, self.parts)

    def _fetched(self, ref: Any) -> list[tuple[int, Any]]:
        """A task's results; of a split task, the ref of the rows it left on the cluster is
        kept for the next segment, with the rows' count and first ``seq``."""
        if not self.split:
            return fetch(self.ray, ref)
        out_ref, rows_ref = ref
        out, left = fetch(self.ray, out_ref)
        rows = [res.rows for _, pairs in out for _, res in pairs if res.rows.num_rows]
        if rows:
            self.refs.append(rows_ref)
            self.counts.append(len(left))
            self.seqs.append(np.concatenate([r.seq for r in rows]))
            self.left += sum(left)
        return out

    def _put_group(self, group: list[tuple[int, Rows | ToRead]]) -> None:
        self.refs.append(self.ray.put(group))
        self.seqs.append(np.concatenate([r.seq for _, r in group if isinstance(r, Rows)]))

    def hold(self, rows: Rows) -> None:
        if self.split:  # its columns are on the cluster already (_fetched)
            self.on_cluster += rows.num_rows
            return
        group = self.held.add(rows)
        if group is not None:
            self._put_group(group)

    def second_pass(self, idx: int, decisions: Any) -> None:
        group = self.held.flush()
        if group is not None:
            self._put_group(group)
        if self.split and self.on_cluster != self.left:  # pragma: no cover - a bug
            raise RuntimeError(f"ray engine: {self.on_cluster} rows held, "
                               f"{self.left} left on the cluster")
        g = self.run.stages[idx]
        assert isinstance(g, GlobalStage)
        dec: Iterable[Any] = [None] * len(self.refs)
        if decisions is not None and self.refs:
            first_seqs = [int(s[0]) for s in self.seqs]
            dec = decisions_by_group(self.ray, decisions, first_seqs, self.parts)
        elif g.has_decisions_table():
            # each task's decisions, computed as it is submitted
            dec = map(g.decisions_for, self.seqs)
        # split tasks left plain lists of rows: the next tasks number them on
        firsts: list[int | None] = [None] * len(self.refs)
        if self.split:
            firsts = [0, *accumulate(self.counts)][:len(self.counts)]
        self.inputs = zip(self.refs, dec, firsts, strict=True)
        self.expected = len(self.refs)
        self.decide_idx = idx
        self.held = Groups(task_rows(self.run.spec))
        self.refs, self.counts, self.seqs = [], [], []
        self.split, self.on_cluster, self.left = False, 0, 0


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


def worker_nodes(ray: Any) -> dict[str, int]:
    """The live nodes that can run a task (one CPU or more): node id -> CPUs."""
    return {n["NodeID"]: int(n["Resources"].get("CPU", 0)) for n in ray.nodes()
            if n.get("Alive") and n["Resources"].get("CPU", 0) >= 1}


def one_machine(ray: Any) -> bool:
    """Whether every live node of the cluster runs on the driver's machine: its tasks can
    then read a local input file themselves (its pieces travel as byte ranges), where on
    other machines the path may not exist."""
    here = ray.util.get_node_ip_address()
    return all(n["NodeManagerAddress"] == here for n in ray.nodes() if n.get("Alive"))


def _rows(ray: Any, run: Run, source: Any, cpus: int, parts: int,
          cluster_grouping_bytes: int) -> Iterator[Rows]:
    # reading: exactly the local engine's, so ids, seq and read counters match; chunks go
    # to the tasks as they are read, so reading overlaps the cluster's work
    rows_iter = read_rows(run.spec, source, run.state, run.progress,
                          by_range=one_machine(ray))
    head: list[Rows] = []
    for r in rows_iter:  # up to the first rows: their schema names the text fields
        assert isinstance(r, Rows)  # read here until the first rows (reading.read_rows)
        head.append(r)
        run.note_fields(r)
        if r.num_rows:
            break

    def inputs() -> Iterator[tuple[list[tuple[int, Rows | ToRead]], None, None]]:
        for group in grouped(chain(head, rows_iter), task_rows(run.spec)):
            yield group, None, None

    yield from run.rows(RayEngine(ray, run, inputs(), cpus, parts, cluster_grouping_bytes))
