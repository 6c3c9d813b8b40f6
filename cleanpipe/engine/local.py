"""The local engine: stream record batches through the stages on all cores of one machine.

Stateless stages run in worker processes, batch by batch (consecutive small batches share a
task: :mod:`~cleanpipe.engine.task_groups`), results merged in input order (the run loop is
:meth:`cleanpipe.engine.core.Run.rows`). A global stage (dedup, corpus
statistics) splits the pipeline in two passes: the first pass runs the stages before it,
has it observe every row, and spills the rows to a temporary file; after ``finalize`` the
second pass reads the spill back, applies its decisions and goes on. Memory therefore holds
a few tasks (each a batch, or small batches up to a batch's rows or 4 MiB, plus the one that
crossed the bound) plus the global stages' compact state.

    >>> import pyarrow as pa
    >>> from cleanpipe.spec import spec_from_dict
    >>> from cleanpipe.stages.exact_dedup import ExactDedup
    >>> spec = spec_from_dict({"fields": ["text"], "stages": [ExactDedup()]})
    >>> run = execute(spec, pa.table({"text": ["a", "b", "a"]}), Sinks(), workers=1)
    >>> [r.row_ids.to_pylist() for r in run], run.state.quarantined
    ([['Table:1', 'Table:2']], 1)
"""

from __future__ import annotations

import pickle
import tempfile
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from itertools import chain
from pathlib import Path
from typing import Any

import pyarrow as pa

from cleanpipe.contract.stage import GlobalStage, Stage
from cleanpipe.engine.core import (
    DecidedBatch,
    EngineRun,
    Run,
    SegmentWorker,
    Sinks,
    TaskResult,
    ToRead,
    decide_batch,
    split_off_rows,
)
from cleanpipe.engine.held_rows import HeldRows, hold
from cleanpipe.engine.parallel import WorkerPool, default_workers
from cleanpipe.engine.progress import Progress
from cleanpipe.engine.reading import read_rows
from cleanpipe.engine.rows import Rows, coalesced
from cleanpipe.engine.shipping import Shipped, ship
from cleanpipe.engine.task_groups import grouped, task_rows
from cleanpipe.memory import returning_pool, use_returning_pool
from cleanpipe.spec import PipelineSpec, check_setting

#: inputs smaller than this run in-process: starting workers would cost more than it saves
SMALL_INPUT_BYTES = 8 << 20

__all__ = ["SMALL_INPUT_BYTES", "Sinks", "execute", "stage_modules"]

# ------------------------------------------------------------------------------- workers

#: this worker process's stages (set by the pool's initializer)
_worker: SegmentWorker | None = None


def _init_worker(stages: list[Stage], text_fields: list[str], flag_codes: bool) -> None:
    global _worker
    use_returning_pool()
    _worker = SegmentWorker(stages, text_fields, flag_codes)


def _forget_worker() -> None:
    """Drop the warmed copy of the stages once the pool (forked from it) is done."""
    global _worker
    _worker = None


def _warm_worker(sample: pa.RecordBatch | None) -> None:
    """In the fork server, before it forks the workers (:meth:`SegmentWorker.warm`)."""
    assert _worker is not None
    _worker.warm(sample)


@dataclass
class Task:
    """One task of segment ``seg_i``: consecutive batches, some perhaps still to be read
    (:mod:`~cleanpipe.engine.task_groups`), or batches a worker held (:class:`HeldRows`).
    ``decide``: the previous global stage's index and these rows' decisions table, decided
    here first. ``hold_in``: the folder where the worker keeps the rows left
    (:mod:`cleanpipe.engine.held_rows`), consecutive batches joined up to ``batch_rows``
    rows and 1 MiB (:func:`~cleanpipe.engine.rows.coalesced`), returning only what the
    driver merges and observes. ``ship_to``: the folder through which a large output goes back
    (:mod:`cleanpipe.engine.shipping`), for a task run in a worker process."""

    seg_i: int
    item: list[Rows | ToRead] | HeldRows
    decide: tuple[int, pa.Table] | None = None
    hold_in: str | None = None
    ship_to: str | None = None
    batch_rows: int = 0


TaskOutput = tuple[list[tuple[DecidedBatch | None, TaskResult]], HeldRows | None]


def _segment_task(task: Task) -> TaskOutput | Shipped:
    out = _run_task(task)
    return ship(out, task.ship_to) if task.ship_to is not None else out


def _run_task(task: Task) -> TaskOutput:
    w = _worker
    assert w is not None
    items = task.item.load() if isinstance(task.item, HeldRows) else task.item
    decide = None
    if task.decide is not None:
        idx, table = task.decide
        decide = (idx, w.global_stage(idx).with_decisions(table))
    pairs = [p for item in items for p in w.run_decided(task.seg_i, item, decide)]
    if task.hold_in is None:
        return pairs, None
    there = coalesced(split_off_rows(pairs), task.batch_rows)
    return pairs, (hold(there, task.hold_in, task.seg_i) if there else None)


# ------------------------------------------------------------------------------- spill


class Spill:
    """Rows written to a temporary file and read back in the same order (second pass)."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(tempfile.mkstemp(prefix="spill-", suffix=".pkl", dir=directory)[1])
        self._fh = open(self.path, "wb")
        self.count = 0

    def write(self, rows: Rows) -> None:
        pickle.dump(rows, self._fh, protocol=pickle.HIGHEST_PROTOCOL)
        self.count += 1

    def finish(self) -> None:
        self._fh.close()

    def read(self) -> Iterator[Rows]:
        with open(self.path, "rb") as fh:
            for _ in range(self.count):
                yield pickle.load(fh)
        self.path.unlink(missing_ok=True)


# ------------------------------------------------------------------------------- running


class LocalEngine:
    """:class:`cleanpipe.engine.core.Engine` on a :class:`WorkerPool`. Batches run in the
    pool's workers. Between two segments, where the global stage observes without the
    batch's columns and decides from a decisions table, each worker keeps the rows it
    cleaned in a file of its own (:mod:`cleanpipe.engine.held_rows`; a task's small
    batches joined, :func:`~cleanpipe.engine.rows.coalesced`) and the next
    segment's task decides on them with their decisions table; for any other global stage
    the rows come back here, wait in a :class:`Spill`, and the stage decides on them here,
    batch by batch, as the second pass feeds them to the workers."""

    def __init__(self, run: Run, pool: WorkerPool, stream: Iterable[Rows | ToRead],
                 spill_dir: Path) -> None:
        self.run = run
        self.pool = pool
        # consecutive batches go out together (many small files: one batch each)
        self.stream: Iterable[Task] = (Task(0, [b for _, b in group])
                                       for group in grouped(stream, task_rows(run.spec)))
        self.spill_dir: Path | None = spill_dir
        self.spill: Spill | None = None
        #: one entry per batch the previous global stage decided on here, in batch order
        self.pending: deque[DecidedBatch] = deque()
        #: the rows the workers keep for the next segment, and how many rows they hold
        self.held: list[HeldRows] = []
        self.held_rows = 0
        self.keep_in_workers = False
        #: what the current segment reads: rows held by the workers, or decided here
        self.reading: list[HeldRows] = []
        self.decided_here = False

    def results(self, seg_i: int) -> Iterator[tuple[DecidedBatch | None, TaskResult]]:
        closing = self.run.segments[seg_i].closing
        g = self.run.stages[closing] if closing is not None else None
        self.keep_in_workers = isinstance(g, GlobalStage) and not g.observe_reads_batch() \
            and g.has_decisions_table()
        hold_in = str(self.spill_dir) if self.keep_in_workers else None
        ship_to = str(self.spill_dir) if self.pool.workers > 1 else None
        tasks = (replace(t, seg_i=seg_i, hold_in=hold_in, ship_to=ship_to,
                         batch_rows=self.run.spec.batch_size) for t in self.stream)
        for out in self.pool.map(_segment_task, tasks):
            pairs, held = out.load() if isinstance(out, Shipped) else out
            if held is not None:
                self.held.append(held)
            for decided, res in pairs:
                if self.decided_here:  # a batch of rows: one result each
                    decided = self.pending.popleft()
                yield decided, res
        for path in sorted({h.path for h in self.reading}):  # read: no longer needed
            Path(path).unlink(missing_ok=True)
        self.reading = []

    def grouping(self, stage: GlobalStage) -> None:
        return None  # one machine: the stage observes and finalizes itself

    def hold(self, rows: Rows) -> None:
        if self.keep_in_workers:  # the worker that cleaned them keeps them
            self.held_rows += rows.num_rows
            return
        if self.spill is None:
            assert self.spill_dir is not None
            self.spill = Spill(self.spill_dir)
        self.spill.write(rows)

    def second_pass(self, idx: int, decisions: Any) -> None:
        g = self.run.stages[idx]
        assert isinstance(g, GlobalStage)
        if self.keep_in_workers:
            if self.held_rows != sum(h.seq.size for h in self.held):  # pragma: no cover
                raise RuntimeError(f"local engine: {self.held_rows} rows held,"
                                   f" {sum(h.seq.size for h in self.held)} in the workers")
            self.reading, self.held, self.held_rows = self.held, [], 0
            self.decided_here = False
            self.stream = (Task(0, h, (idx, g.decisions_for(h.seq))) for h in self.reading)
            return
        self.decided_here = True
        spill, self.spill = self.spill, None
        if spill is not None:
            spill.finish()
        self.stream = (Task(0, [rows]) for rows in self.decided(g, idx, spill))

    def decided(self, g: GlobalStage, idx: int, spill: Spill | None) -> Iterator[Rows]:
        """The second pass of stage ``idx``, decided here: each batch's kept rows (even
        none), while its counters and drops wait in ``pending`` to be merged with the same
        batch's next results."""
        if spill is None:
            return
        for rows in spill.read():
            kept, decided = decide_batch(g, idx, rows, self.run.state.text_fields,
                                         self.run.flag_codes)
            self.pending.append(decided)
            yield kept


def execute(spec: PipelineSpec, source: Any, sinks: Sinks, *, workers: int | None = None,
            progress: Progress | None = None, tmp_dir: Path | None = None) -> EngineRun:
    """Run the pipeline: iterate the result for the kept rows in input order, then read
    its ``state`` (:class:`cleanpipe.engine.core.EngineRun`)."""
    run = Run(spec, sinks, progress)
    return EngineRun(_rows(run, source, workers, tmp_dir), run.state)


def _rows(run: Run, source: Any, workers: int | None, tmp_dir: Path | None) -> Iterator[Rows]:
    with returning_pool():
        spec, state = run.spec, run.state
        rows_iter = read_rows(spec, source, state, run.progress, by_range=True)
        # peek up to the first batch with rows: its schema names the text fields by default
        head: list[Rows] = []
        for r in rows_iter:
            assert isinstance(r, Rows)  # read here until the first rows (reading.read_rows)
            head.append(r)
            run.note_fields(r)
            if r.num_rows:
                break
        if workers is not None:  # the Python API's argument, bounded as --workers is
            check_setting("workers", workers, "workers")
        n_workers = workers or spec.workers or default_workers()
        if state.input_bytes and state.input_bytes < SMALL_INPUT_BYTES and not (
                workers or spec.workers):
            n_workers = 1
        state.workers = n_workers
        # The workers get the stages as configured, before any pass: they only run stateless
        # stages and global stages' prepare(), never a decision that needs finalize()'s state.
        pool = WorkerPool(n_workers, _init_worker,
                          (run.stages, state.text_fields, run.flag_codes),
                          preload=stage_modules(run.stages),
                          warm=partial(_warm_worker, _warm_sample(head)), release=_forget_worker)
        tmp_root = Path(tmp_dir) if tmp_dir else Path(tempfile.gettempdir())
        with tempfile.TemporaryDirectory(prefix="cleanpipe-", dir=tmp_root) as spill_dir, pool:
            yield from run.rows(LocalEngine(run, pool, chain(head, rows_iter), Path(spill_dir)))


def _warm_sample(head: list[Rows], n: int = 8) -> pa.RecordBatch | None:
    """The first ``n`` rows read, for the workers' warm-up in the fork server."""
    for r in reversed(head):
        if r.num_rows:
            return r.data.slice(0, n)
    return None


def stage_modules(stages: list[Stage]) -> list[str]:
    """Modules defining the stages' classes, for the workers' fork server to import once.

        >>> from cleanpipe.stages.whitespace import Whitespace
        >>> stage_modules([Whitespace()])
        ['cleanpipe.stages.whitespace']
    """
    mods = (type(s).__module__ for s in stages)
    return list(dict.fromkeys(m for m in mods if m not in ("__main__", "__mp_main__")))
