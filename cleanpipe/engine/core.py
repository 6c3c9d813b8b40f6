"""The engine core: what every engine does the same way, whatever runs the batches.

An engine (``local``: worker processes on one machine, :mod:`cleanpipe.engine.local`;
``ray``: Ray tasks on a cluster, :mod:`cleanpipe.engine.ray_engine`) supplies only
*where* batches run and *where* the rows of a first pass wait for their global stage (the
:class:`Engine` protocol). Everything else is here, once:

* :class:`Segment`, :func:`segments_of`: the pipeline cut after each global stage. A
  segment runs its stateless stages, then the ``prepare`` of the global stage closing it;
* :class:`SegmentWorker`: the work on one batch in one process, through a segment
  (:meth:`SegmentWorker.run`) or through a global stage's ``decide``
  (:func:`decide_batch`), with each stage set up once per process;
* :class:`Run`: the driver's side. It holds the :class:`RunState` (every counter the report
  is built from) and the :class:`Sinks`, merges each batch's results in input order, and
  runs the loop (:meth:`Run.rows`) that calls a global stage's ``observe`` and
  ``finalize`` (or the engine's :class:`Grouping` of it) between two segments;
* :class:`EngineRun`: what an engine's ``execute`` returns. Iterate it for the kept rows;
  once they are all consumed its :attr:`~EngineRun.state` is complete.

    >>> import pyarrow as pa
    >>> from cleanpipe.engine.local import execute
    >>> from cleanpipe.spec import spec_from_dict
    >>> run = execute(spec_from_dict({"fields": ["text"], "stages": []}),
    ...               pa.table({"text": ["a", "b"]}), Sinks(), workers=1)
    >>> [r.num_rows for r in run], run.state.kept
    ([2], 2)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import xxhash

from cleanpipe.contract.findings import merge_metrics
from cleanpipe.contract.stage import BatchContext, BatchStage, GlobalStage, Stage
from cleanpipe.engine import read_notes
from cleanpipe.engine.apply import (
    CHAR_EDGES,
    StageBatchStats,
    StageStats,
    apply_decide,
    apply_stage,
    char_counts,
    histogram_of,
    merge_field_stats,
)
from cleanpipe.engine.ordering import events_in_seq_order, quarantine_in_seq_order
from cleanpipe.engine.progress import Progress
from cleanpipe.engine.rows import QuarantineRows, Rows
from cleanpipe.engine.shard_quarantine import ShardQuarantine
from cleanpipe.fault_points import pause_point
from cleanpipe.fields import discover_text_fields
from cleanpipe.memory import release_compiler_pages, release_free_memory
from cleanpipe.spec import PipelineSpec

#: rows between two trims of the C heap (memory.release_free_memory): four full batches. Rows,
#: not batches: many small files make batches of a few hundred rows, and trimming every
#: few of them cost ~0.1 s a process on t0's 294 files
TRIM_ROWS = 4 * 4096


class HeapTrim:
    """Trims the C heap once :data:`TRIM_ROWS` rows went by (a batch counts one at least).

        >>> t = HeapTrim()
        >>> [t.after(4096) for _ in range(4)], [t.after(100) for _ in range(3)]
        ([False, False, False, True], [False, False, False])
    """

    def __init__(self) -> None:
        self.rows = 0

    def after(self, rows: int) -> bool:
        """Count a batch of ``rows`` rows; whether the heap was trimmed now."""
        self.rows += max(rows, 1)
        if self.rows < TRIM_ROWS:
            return False
        release_free_memory()
        self.rows = 0
        return True


# ------------------------------------------------------------------------------- segments


@dataclass
class Segment:
    """Stateless stages (indices into the stage list), optionally closed by a global stage."""

    stateless: list[int]
    closing: int | None


def segments_of(stages: list[Stage]) -> list[Segment]:
    """The pipeline cut after each global stage; the last segment is closed by none.

        >>> from cleanpipe.stages.exact_dedup import ExactDedup
        >>> from cleanpipe.stages.whitespace import Whitespace
        >>> segments_of([Whitespace(), ExactDedup(), Whitespace()])
        [Segment(stateless=[0], closing=1), Segment(stateless=[2], closing=None)]
    """
    out: list[Segment] = []
    cur: list[int] = []
    for i, s in enumerate(stages):
        if isinstance(s, GlobalStage):
            out.append(Segment(cur, i))
            cur = []
        else:
            cur.append(i)
    out.append(Segment(cur, None))
    return out


# ------------------------------------------------------------------------------- state


@dataclass
class RunState:
    """Everything counted during a run; the report is built from this alone."""

    stage_stats: list[StageStats]
    read: int = 0
    kept: int = 0
    quarantined: int = 0
    shards: int = 0
    input_bytes: int = 0
    hist_before: np.ndarray = field(default_factory=lambda: np.zeros(len(CHAR_EDGES), np.int64))
    hist_after: np.ndarray = field(default_factory=lambda: np.zeros(len(CHAR_EDGES), np.int64))
    #: per text field, as read and after cleaning: apply.field_char_stats summed
    fields_before: dict[str, dict[str, int]] = field(default_factory=dict)
    fields_after: dict[str, dict[str, int]] = field(default_factory=dict)
    read_codes: dict[str, int] = field(default_factory=dict)
    #: changes the reader made to kept rows: code -> [events, rows]
    read_fixes: dict[str, list[int]] = field(default_factory=dict)
    read_examples: list[dict[str, Any]] = field(default_factory=list)
    fingerprint: Any = field(default_factory=xxhash.xxh3_128)
    revisions: dict[str, str] = field(default_factory=dict)  # Hub shard name -> revision
    text_fields: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    wall: float = 0.0
    #: worker processes (or Ray actors) the run used
    workers: int = 1
    input_schema: pa.Schema | None = None
    #: reading's bookkeeping (:mod:`cleanpipe.engine.read_notes`): the shard whose batches
    #: are being counted, its fix examples (they follow its unreadable records), and the
    #: columns of the batches with rows
    reading_shard: str | None = None
    fix_examples: list[dict[str, Any]] = field(default_factory=list)
    columns_seen: set[str] = field(default_factory=set)


@dataclass
class Sinks:
    """Where results go: kept rows, quarantined rows, event tables (each optional)."""

    kept: Callable[[Rows], None] | None = None
    quarantine: Callable[[QuarantineRows], None] | None = None
    events: Callable[[pa.Table], None] | None = None


# ------------------------------------------------------------------------------- batch work


@dataclass
class TaskResult:
    """One batch through one segment: the rows left, each stage's counters, the drops, the
    closing global stage's ``prepare`` result, and the character histograms and per-field
    character stats (the first segment's before, the last segment's after)."""

    rows: Rows
    stats: list[tuple[int, StageBatchStats]]
    quarantine: list[QuarantineRows]
    prepared: Any = None
    hist_before: list[int] | None = None
    hist_after: list[int] | None = None
    fields_before: dict[str, dict[str, int]] | None = None
    fields_after: dict[str, dict[str, int]] | None = None


@dataclass
class DecidedBatch:
    """A global stage's second pass over one batch: the stage's index, its counters and
    its drops; merged with the same batch's results in the next segment."""

    stage: int
    stats: StageBatchStats
    dropped: QuarantineRows | None


def decide_batch(stage: GlobalStage, idx: int, rows: Rows, text_fields: list[str],
                 flag_codes: bool) -> tuple[Rows, DecidedBatch]:
    """``stage`` (the pipeline's stage ``idx``, finalized) deciding on ``rows``: the rows
    it keeps, and what it did to the others."""
    kept, dropped, stats = apply_decide(stage, rows, text_fields, flag_codes, index=idx)
    return kept, DecidedBatch(idx, stats, dropped)


def split_off_rows(pairs: list[tuple[DecidedBatch | None, TaskResult]]) -> list[Rows]:
    """The rows of ``pairs``' results, those with rows, in order; each result keeps only
    what the driver merges and observes (:meth:`Rows.split_off_columns`), so an engine can
    leave the rows where they were cleaned for the next segment."""
    held = []
    for _, res in pairs:
        res.rows, there = res.rows.split_off_columns()
        if there.num_rows:
            held.append(there)
    return held


class ToRead(Protocol):
    """Batches still to be read (``engine.reading.PieceRead``): the first segment reads
    them where it runs (:meth:`SegmentWorker.run_task`)."""

    @property
    def num_rows(self) -> int:
        """At least the rows it will read."""

    @property
    def nbytes(self) -> int:
        """About the bytes it will read."""

    def read(self) -> list[Rows]:
        """The batches, read."""


class SegmentWorker:
    """The run's stages in one process, each set up on first use, and the work of one batch
    through one segment.

    Engines keep one per process that runs batches (the local engine's worker processes,
    the Ray engine's task mappers), built from the stages as configured, or as finalized
    where a segment needs a global stage's decisions.
    """

    def __init__(self, stages: list[Stage], text_fields: list[str], flag_codes: bool) -> None:
        self.stages = stages
        self.segments = segments_of(stages)
        self.text_fields = text_fields
        self.flag_codes = flag_codes
        self.ready: set[int] = set()
        self.trim = HeapTrim()

    def stage(self, i: int) -> Stage:
        """Stage ``i``, its ``setup()`` done in this process."""
        s = self.stages[i]
        if i not in self.ready:
            s.setup()
            self.ready.add(i)
        return s

    def global_stage(self, i: int) -> GlobalStage:
        g = self.stage(i)
        assert isinstance(g, GlobalStage)
        return g

    def run_task(self, seg_i: int, item: Rows | ToRead) -> list[TaskResult]:
        """One item of a task of segment ``seg_i``: a batch, or batches still to be read
        (read here first), each through :meth:`run`."""
        if isinstance(item, Rows):
            return [self.run(seg_i, item)]
        return [self.run(seg_i, rows) for rows in item.read()]

    def run_decided(self, seg_i: int, item: Rows | ToRead,
                    decide: tuple[int, GlobalStage] | None = None
                    ) -> list[tuple[DecidedBatch | None, TaskResult]]:
        """:meth:`run_task`, the batch first decided by ``decide`` (the previous global
        stage's index and the stage, finalized or given its decisions): each result with
        the decisions on its batch (none for the further batches of a piece read here)."""
        decided = None
        if decide is not None:
            assert isinstance(item, Rows)  # a second pass: rows held from the first
            idx, g = decide
            item, decided = decide_batch(g, idx, item, self.text_fields, self.flag_codes)
        results = self.run_task(seg_i, item)
        return [(decided, results[0]), *((None, r) for r in results[1:])]

    def run(self, seg_i: int, rows: Rows) -> TaskResult:
        """``rows`` through segment ``seg_i``: its stateless stages in order, then the
        closing global stage's ``prepare``."""
        seg = self.segments[seg_i]
        fields = self.text_fields
        rows_in = rows.num_rows
        hist_before = fields_before = fields_after = None
        if seg_i == 0:
            fields_before = {}
            rows.chars = char_counts(rows.orig, fields, fields_before)
            hist_before = histogram_of(rows.chars)
        stats, quarantine = [], []
        for i in seg.stateless:
            rows, q, st = apply_stage(self.stage(i), rows, fields, self.flag_codes, index=i)
            stats.append((i, st))
            if q is not None:
                quarantine.append(q)
        prepared = None
        if seg.closing is not None and rows.num_rows:
            g = self.global_stage(seg.closing)
            t = time.perf_counter()
            prepared = g.prepare(rows.data, BatchContext(rows.data, fields, rows.row_ids))
            # the stage's own time: the wait for this batch's upstream stages is theirs
            stats.append((seg.closing, StageBatchStats(seconds=time.perf_counter() - t)))
        hist_after = None
        self.trim.after(rows_in)
        if seg.closing is None:
            fields_after = {}
            hist_after = histogram_of(char_counts(rows.data, fields, fields_after))
            # every stage has decided on these rows: the driver writes them as they are now
            rows = self.remeasure(rows).without_orig()
        return TaskResult(rows, stats, quarantine, prepared, hist_before, hist_after,
                          fields_before, fields_after)

    def remeasure(self, rows: Rows) -> Rows:
        """``rows`` (of the last segment: as they will be written) with the figures a stage
        measured on rows a later stage rewrote since measured again, on the rows as they
        are now (``BatchStage.measure_rows``): the totals of the rows written must be
        those of the text written."""
        if rows.figures is None:
            return rows
        figures = rows.figures
        for i in list(figures.values):
            stale = figures.stale_rows(i)
            if stale.size:
                stage = self.stage(i)
                assert isinstance(stage, BatchStage)
                fresh = stage.measure_rows(rows.data.take(pa.array(stale)))
                figures = figures.remeasured(i, stale, fresh)
        rows.figures = figures
        return rows

    def warm(self, sample: pa.RecordBatch | None) -> None:
        """Set every stage up, then run each segment on a few of the input's own rows
        (results discarded), so what a first batch loads (numba's compiled kernels and
        LLVM, ~60 MB and a second per process; lazily built tables) is loaded before the
        local engine's fork server forks its workers. Best effort: a stage that fails on
        the sample fails again, and is reported, on the real batch."""
        for i in range(len(self.stages)):
            self.stage(i)
        if sample is None or sample.num_rows == 0:
            return
        ids = pa.array([f"warm-up:{i}" for i in range(sample.num_rows)], pa.string())
        for seg_i in range(len(self.segments)):
            rows = Rows(sample, sample, ids, np.arange(sample.num_rows, dtype=np.int64),
                        "warm-up")
            try:
                self.run(seg_i, rows)
            except Exception:  # best effort, see the docstring
                continue


# ------------------------------------------------------------------------------- engines


class Grouping(Protocol):
    """An engine's own grouping of a global stage, run in place of the stage's ``observe``
    and ``finalize`` (the Ray engine's distributed dedup groupings)."""

    def observe(self, prepared: Any, rows: Rows) -> None:
        """One batch of the first pass: its ``prepare`` result and its rows."""

    def finalize(self) -> Any:
        """Group; hand the stage its report section (``GlobalStage.adopt_grouping``) and
        return the decisions, for the engine's :meth:`Engine.second_pass`."""


class Engine(Protocol):
    """What an engine supplies to :meth:`Run.rows`: where batches run, and where the rows
    of a first pass wait for the second."""

    #: folder for the first pass's held-back quarantine (``None``: the system's temp dir)
    spill_dir: Path | None

    def results(self, seg_i: int) -> Iterable[tuple[DecidedBatch | None, TaskResult]]:
        """The segment's input run through segment ``seg_i``, batch by batch in input
        order, each with the previous global stage's decisions on it (none for the first
        segment)."""

    def grouping(self, stage: GlobalStage) -> Grouping | None:
        """The engine's own grouping of ``stage``, or ``None``: the loop calls the stage's
        ``observe`` and ``finalize`` itself."""

    def hold(self, rows: Rows) -> None:
        """Keep rows of a first pass (in order) for the second."""

    def second_pass(self, idx: int, decisions: Any) -> None:
        """Make the rows held so far the next segment's input, decided by stage ``idx``
        (``decisions``: what its grouping's ``finalize`` returned, else ``None``)."""


class Run:
    """The driver's side of one run: the state, the sinks, merging and the run loop.

    ``spec.fields`` name the text fields; without them the engine reports the first batch
    with rows to :meth:`note_fields`, whose string columns become the text fields.
    """

    def __init__(self, spec: PipelineSpec, sinks: Sinks, progress: Progress | None) -> None:
        self.spec = spec
        self.stages = list(spec.stages)
        self.segments = segments_of(self.stages)
        self.flag_codes = spec.output.flag_column is not None
        self.sinks = sinks
        self.progress = progress or Progress(enabled=False)
        self.state = RunState([StageStats(name=s.name) for s in self.stages],
                              text_fields=list(spec.fields or []))

    def note_fields(self, rows: Rows) -> None:
        """Take the text fields from ``rows`` when none are known yet and it has rows."""
        if not self.state.text_fields and rows.num_rows:
            self.state.text_fields = discover_text_fields(rows.data.schema)

    def quarantine(self, q: QuarantineRows) -> None:
        self.state.quarantined += len(q.row_ids)
        if self.sinks.quarantine is not None:
            self.sinks.quarantine(q)

    def written(self, rows: Rows) -> None:
        """Count ``rows``, about to be written: the stages' "after" figures are totalled
        over them (:class:`~cleanpipe.engine.rows.RowFigures`), so the report's "after"
        is what the trainer trains on, whatever later stages dropped."""
        self.state.kept += rows.num_rows
        if rows.figures is not None:
            for i, metrics in rows.figures.metrics().items():
                merge_metrics(self.state.stage_stats[i].metrics, metrics)

    def take_stats(self, i: int, st: StageBatchStats) -> None:
        self.state.stage_stats[i].add(st)
        if st.events is not None and self.sinks.events is not None:
            self.sinks.events(st.events)

    def merge(self, res: TaskResult, decided: DecidedBatch | None = None,
              ordered: ShardQuarantine | None = None) -> None:
        """Count one batch's results and hand its quarantined rows and events on, each in
        ``seq`` order (:mod:`cleanpipe.engine.ordering`): the reader's unreadable records
        of a file first, then ``decided`` (the previous global stage's decisions on these
        rows) and the stages' results together. ``ordered`` (the first pass) holds a
        file's dropped rows back until the file is read, as a big file read in blocks finds
        its unreadable records as it goes (:mod:`cleanpipe.engine.shard_quarantine`)."""
        state = self.state
        on_quarantine: Callable[[QuarantineRows], None] = self.quarantine
        if ordered is not None:
            shard = res.rows.shard
            on_quarantine = partial(ordered.dropped, shard)
            if res.rows.unreadable is not None:
                ordered.unreadable(shard, res.rows.unreadable)
                res.rows.unreadable = None
        if res.rows.unreadable is not None:
            on_quarantine(res.rows.unreadable)
            res.rows.unreadable = None
        if res.rows.read_notes is not None:
            read_notes.record(state, res.rows.read_notes, self.progress)
            res.rows.read_notes = None
        if res.hist_before is not None:
            state.hist_before += np.asarray(res.hist_before, np.int64)
        if res.hist_after is not None:
            state.hist_after += np.asarray(res.hist_after, np.int64)
        merge_field_stats(state.fields_before, res.fields_before or {})
        merge_field_stats(state.fields_after, res.fields_after or {})
        stats = ([(decided.stage, decided.stats)] if decided is not None else []) + list(
            res.stats)
        events = [res.rows.read_events] + [st.events for _, st in stats]
        res.rows.read_events = None
        for i, st in stats:
            st.events = None  # handed on below, in seq order
            self.take_stats(i, st)
        merged = events_in_seq_order(events)
        if merged is not None and self.sinks.events is not None:
            self.sinks.events(merged)
        drops = ([decided.dropped] if decided is not None else []) + list(res.quarantine)
        for q in quarantine_in_seq_order(drops):
            on_quarantine(q)

    def rows(self, engine: Engine) -> Iterator[Rows]:
        """The run loop: each segment in turn on ``engine``, its results merged in input
        order; the kept rows of the last segment, yielded in input order.

        A segment closed by a global stage is a first pass: the stage (or the engine's
        grouping of it) observes every batch in row order while the engine holds the rows,
        then ``finalize`` runs and the held rows, decided by the stage, feed the next
        segment.
        """
        state = self.state
        for seg_i, seg in enumerate(self.segments):
            g: GlobalStage | None = None
            grouping: Grouping | None = None
            if seg.closing is not None:
                g = self.stages[seg.closing]
                assert isinstance(g, GlobalStage)
                g.setup()
                grouping = engine.grouping(g)
            # the first pass reads: its quarantine in read order per shard
            ordered = ShardQuarantine(self.quarantine, engine.spill_dir) if seg_i == 0 else None
            own = 0.0  # observe and finalize; prepare's time comes with each batch's stats
            trim = HeapTrim()
            for n_res, (decided, res) in enumerate(engine.results(seg_i), 1):
                trim.after(res.rows.num_rows)
                self.merge(res, decided, ordered)
                if g is None:
                    if res.rows.num_rows:
                        self.written(res.rows)
                        if self.sinks.kept is not None:
                            self.sinks.kept(res.rows)
                        yield res.rows
                    if n_res == 2:
                        pause_point("midrun")
                elif res.rows.num_rows:
                    t0 = time.perf_counter()
                    if grouping is not None:
                        grouping.observe(res.prepared, res.rows)
                    else:
                        ctx = BatchContext(res.rows.data, state.text_fields, res.rows.row_ids)
                        g.observe(res.prepared, res.rows.seq, res.rows.data, ctx)
                    own += time.perf_counter() - t0
                    engine.hold(res.rows)
            if ordered is not None:
                ordered.flush()
            if seg_i == 0:
                read_notes.finish(state, self.spec.fields)
            if g is None or seg.closing is None:
                break
            t0 = time.perf_counter()
            # finalize even without rows: the report section must still be written
            decisions = None
            if grouping is not None:
                decisions = grouping.finalize()
            else:
                g.finalize()
            release_free_memory()  # finalize's temporaries: often the largest of the run
            release_compiler_pages()  # LLVM's code, if finalize loaded kernels
            state.stage_stats[seg.closing].seconds += own + time.perf_counter() - t0
            self.progress.note(f"{g.name}: second pass")
            engine.second_pass(seg.closing, decisions)
        state.wall = time.time() - state.started
        self.progress.close()


class EngineRun:
    """A started run, as an engine's ``execute`` returns it: iterate it for the kept rows
    in input order; once they are all consumed, :attr:`state` holds every counter.

    :meth:`finish` consumes what is left and returns the state.
    """

    def __init__(self, rows: Iterator[Rows], state: RunState) -> None:
        self._rows = rows
        self._done = False
        self._state = state

    def __iter__(self) -> Iterator[Rows]:
        yield from self._rows
        self._done = True

    @property
    def state(self) -> RunState:
        """The run's counters: complete only once every kept row was consumed."""
        if not self._done:
            raise RuntimeError("the run is not finished: iterate it to its end, or call"
                               " finish(), before reading its state")
        return self._state

    def finish(self) -> RunState:
        """Run to the end (kept rows still go to the sinks) and return the state."""
        for _ in self:
            pass
        return self.state
