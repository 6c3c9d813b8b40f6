"""The local engine: stream record batches through the stages on all cores of one machine.

Stateless stages run in worker processes, batch by batch, results merged in input order.
A global stage (dedup, corpus statistics) splits the pipeline in two passes: the first pass
runs the stages before it, has it observe every row, and spills the rows to a temporary file;
after ``finalize`` the second pass reads the spill back, applies its decisions and goes on.
Memory therefore holds a few batches plus the global stages' compact state.
"""

from __future__ import annotations

import pickle
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from cleanpipe.contract.stage import BatchContext, GlobalStage, Stage
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
from cleanpipe.engine.parallel import WorkerPool, default_workers
from cleanpipe.engine.progress import Progress
from cleanpipe.engine.rows import QuarantineRows, Rows
from cleanpipe.engine.shard_quarantine import ShardQuarantine
from cleanpipe.fault_points import pause_point
from cleanpipe.fields import discover_text_fields
from cleanpipe.io.filesystems import is_local, iter_blocks, read_bytes, reason
from cleanpipe.io.line_blocks import block_bytes_from_env
from cleanpipe.io.readers import Chunk, ReadOptions, read_shard
from cleanpipe.io.schemas import check_fields_seen, with_text_fields
from cleanpipe.io.sources import WHOLE_FILE_FORMATS, InputError, Shard, resolve_sources
from cleanpipe.memory import release_free_memory, returning_pool, use_returning_pool
from cleanpipe.spec import PipelineSpec, check_setting

#: batches between two trims of the C heap (see memory.release_free_memory)
_TRIM_EVERY = 4
#: inputs smaller than this run in-process: starting workers would cost more than it saves
SMALL_INPUT_BYTES = 8 << 20


@dataclass
class Segment:
    """Stateless stages (indices into the stage list), optionally closed by a global stage."""

    stateless: list[int]
    closing: int | None


def segments_of(stages: list[Stage]) -> list[Segment]:
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


# ------------------------------------------------------------------------------- workers

_W: dict[str, Any] = {}


def _init_worker(stages: list[Stage], segments: list[Segment], text_fields: list[str],
                 flag_codes: bool) -> None:
    use_returning_pool()
    _W.update(stages=stages, segments=segments, text_fields=text_fields, flag=flag_codes,
              ready=set())


def _warm_worker(sample: pa.RecordBatch | None) -> None:
    """In the fork server, before it forks the workers: set every stage up, then run each
    pass on a few of the input's own rows (results discarded), so what a first batch loads
    (numba's compiled kernels and LLVM, ~60 MB and a second per process; lazily built
    tables) is loaded once and shared by the workers. Best effort: a stage that fails on
    the sample fails again, and is reported, on the real batch."""
    for i in range(len(_W["stages"])):
        _stage(i)
    if sample is None or sample.num_rows == 0:
        return
    ids = pa.array([f"warm-up:{i}" for i in range(sample.num_rows)], pa.string())
    for seg_i in range(len(_W["segments"])):
        rows = Rows(sample, sample, ids, np.arange(sample.num_rows, dtype=np.int64), "warm-up")
        try:
            _segment_task((seg_i, rows))
        except Exception:  # best effort, see the docstring
            continue


def _stage(i: int) -> Stage:
    s: Stage = _W["stages"][i]
    if i not in _W["ready"]:
        s.setup()
        _W["ready"].add(i)
    return s


@dataclass
class TaskResult:
    rows: Rows
    stats: list[tuple[int, StageBatchStats]]
    quarantine: list[QuarantineRows]
    prepared: Any = None
    hist_before: list[int] | None = None
    hist_after: list[int] | None = None
    fields_before: dict[str, dict[str, int]] | None = None
    fields_after: dict[str, dict[str, int]] | None = None


def _segment_task(args: tuple[int, Rows]) -> TaskResult:
    seg_i, rows = args
    seg: Segment = _W["segments"][seg_i]
    fields = _W["text_fields"]
    hist_before = fields_before = fields_after = None
    if seg_i == 0:
        fields_before = {}
        rows.chars = char_counts(rows.orig, fields, fields_before)
        hist_before = histogram_of(rows.chars)
    stats, quarantine = [], []
    for i in seg.stateless:
        rows, q, st = apply_stage(_stage(i), rows, fields, _W["flag"])
        stats.append((i, st))
        if q is not None:
            quarantine.append(q)
    prepared = None
    if seg.closing is not None and rows.num_rows:
        g = _stage(seg.closing)
        assert isinstance(g, GlobalStage)
        t = time.perf_counter()
        prepared = g.prepare(rows.data, BatchContext(rows.data, fields, rows.row_ids))
        # the stage's own time: the wait for this batch's upstream stages is theirs
        stats.append((seg.closing, StageBatchStats(seconds=time.perf_counter() - t)))
    hist_after = None
    _W["tasks"] = _W.get("tasks", 0) + 1
    if _W["tasks"] % _TRIM_EVERY == 0:
        release_free_memory()
    if seg.closing is None:
        fields_after = {}
        hist_after = histogram_of(char_counts(rows.data, fields, fields_after))
    return TaskResult(rows, stats, quarantine, prepared, hist_before, hist_after,
                      fields_before, fields_after)


# ------------------------------------------------------------------------------- reading


def _row_ids(chunk: Chunk, id_field: str | None) -> pa.Array:
    if id_field:
        idx = chunk.batch.schema.get_field_index(id_field)
        if idx < 0:
            raise InputError(f"{chunk.shard.path or chunk.shard.name}: no column {id_field!r}"
                             f" (input.id_field); columns: {', '.join(chunk.batch.schema.names)}")
        return chunk.batch.column(idx).cast(pa.string())
    nums = pa.array(chunk.numbers).cast(pa.string())
    return pc.binary_join_element_wise(f"{chunk.shard.name}:", nums, "")


def _read_fix_events(chunk: Chunk, ids: pa.Array, seq: np.ndarray, state: RunState,
                     examples: list[dict[str, Any]]) -> pa.Table:
    """Count the reader's changes to ``chunk`` and return one ``fix`` event per row and
    field; the first few go to ``examples`` (a shard's, added after its unreadable records)."""
    pos = np.concatenate([f.rows for f in chunk.fixes]).astype(np.int64)
    for f in chunk.fixes:
        entry = state.read_fixes.setdefault(f.code, [0, 0])
        entry[0] += int(f.rows.size)
        shown = sum(1 for e in (*state.read_examples, *examples) if e["code"] == f.code)
        for p in f.rows[:max(0, 5 - shown)].tolist():
            examples.append({
                "stage": "read", "code": f.code, "action": "fix", "row_id": ids[p].as_py(),
                "field": f.field, "detail": f.detail, "before": None, "after": None})
    for code in {f.code for f in chunk.fixes}:
        rows = [f.rows for f in chunk.fixes if f.code == code]
        state.read_fixes[code][1] += int(np.unique(np.concatenate(rows)).size)
    n = pos.size
    return pa.table({
        "row_id": ids.take(pa.array(pos)),
        "seq": pa.array(seq[pos], pa.int64()),
        "stage": pa.array(["read"] * n, pa.string()),
        "code": pa.array([f.code for f in chunk.fixes for _ in range(f.rows.size)], pa.string()),
        "action": pa.array(["fix"] * n, pa.string()),
        "field": pa.array([f.field for f in chunk.fixes for _ in range(f.rows.size)],
                          pa.string()),
        "detail": pa.array([f.detail for f in chunk.fixes for _ in range(f.rows.size)],
                           pa.string()),
    })


def compact(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` in buffers of its own when it is a slice of larger ones (a batch of a big
    file's table): pickling a slice sends the whole buffers, so every task, result and spill
    of a big file would carry all of its rows.

        >>> big = pa.RecordBatch.from_pydict({"t": ["x" * 100] * 1000})
        >>> part = compact(big.slice(0, 10))
        >>> part.get_total_buffer_size() < big.get_total_buffer_size() // 10
        True
    """
    if batch.get_total_buffer_size() <= 2 * batch.nbytes + 4096:
        return batch
    return batch.take(pa.array(np.arange(batch.num_rows, dtype=np.int64)))


def _fingerprint_shard(state: RunState, shard: Shard) -> None:
    h = state.fingerprint
    h.update(shard.name.encode())
    if shard.revision is not None:  # a streamed Hub dataset: its commit names its content
        state.revisions[shard.name] = shard.revision
        h.update(shard.revision.encode())
        return
    if shard.path is None:
        return
    if shard.prefetched is not None:
        h.update(shard.prefetched)
        return
    try:
        for block in iter_blocks(shard.filesystem, shard.open_path):
            h.update(block)
    except OSError as e:
        raise InputError(f"{shard.path}: cannot read: {reason(e)}") from e


def _fetch_once(shard: Shard) -> Shard:
    """A remote shard whose reader takes all its bytes anyway, with the bytes attached: one
    download serves the fingerprint and the reader (local files are read from disk twice,
    which the page cache makes cheap)."""
    if is_local(shard.filesystem) or shard.format not in WHOLE_FILE_FORMATS:
        return shard
    try:
        return replace(shard, prefetched=read_bytes(shard.filesystem, shard.open_path))
    except OSError as e:
        raise InputError(f"{shard.path}: cannot read: {reason(e)}") from e


def read_rows(spec: PipelineSpec, source: Any, state: RunState,
              progress: Progress) -> Iterator[Rows]:
    """Rows of every shard in order, with ids and sequence numbers; records that cannot be
    read ride along in ``Rows.unreadable``."""
    inp = spec.input
    opts = ReadOptions(batch_size=spec.batch_size, encoding=inp.encoding,
                       on_parse_error=inp.on_parse_error, on_decode_error=inp.on_decode_error,
                       csv_delimiter=inp.csv_delimiter, text_column=inp.text_column,
                       block_bytes=block_bytes_from_env())
    shards = resolve_sources(source, inp.format)
    state.input_bytes = sum(s.size for s in shards)
    progress.set_total_bytes(state.input_bytes)
    # seq = the shard's base + the record's line (or record) number: ordered, unique, and
    # independent of the batch size (bad records of a shard ride on its first chunk, so a
    # running counter would number them differently with every batch size)
    base = 0
    seen: set[str] = set()  # columns some file has: a text field in none is a typo
    for shard in shards:
        state.shards += 1
        shard = _fetch_once(shard)
        _fingerprint_shard(state, shard)
        top = 0
        # examples of the reader's fixes follow the shard's unreadable records, wherever
        # in the file (in whichever block) those are found
        fix_examples: list[dict[str, Any]] = []
        for chunk in read_shard(shard, opts):
            progress.advance_bytes(chunk.bytes_read)
            n = chunk.batch.num_rows
            unreadable = None
            if chunk.bad:
                state.read += len(chunk.bad)
                for b in chunk.bad:
                    state.read_codes[b.code] = state.read_codes.get(b.code, 0) + 1
                    if sum(1 for e in state.read_examples if e["code"] == b.code) < 5:
                        state.read_examples.append({
                            "stage": "read", "code": b.code, "action": "drop",
                            "row_id": f"{b.shard}:{b.line}", "field": None,
                            "detail": b.message, "before": (b.raw or "")[:300], "after": None})
                unreadable = (QuarantineRows(
                    orig=None, row_ids=[f"{b.shard}:{b.line}" for b in chunk.bad],
                    seq=base + np.asarray([b.line for b in chunk.bad], dtype=np.int64),
                    stage="read", reasons=[[b.code] for b in chunk.bad],
                    details=[[f"{b.code}: {b.message}"] for b in chunk.bad],
                    raw=[b.raw for b in chunk.bad]))
            if state.input_schema is None and chunk.batch.num_columns:
                # an empty file with a header still says what an empty output looks like
                state.input_schema = chunk.batch.schema
            top = max([top, *(b.line for b in chunk.bad),
                       int(chunk.numbers.max()) if n else 0])
            if n == 0:
                if unreadable is not None:
                    empty = pa.RecordBatch.from_pylist([])
                    yield Rows(empty, empty, pa.array([], pa.string()), np.zeros(0, np.int64),
                               shard.name, None, unreadable)
                continue
            ids = _row_ids(chunk, inp.id_field)
            seq = base + np.asarray(chunk.numbers, dtype=np.int64)
            seen.update(chunk.batch.schema.names)
            # a text field missing from a whole file reads as nulls, as a missing key does
            batch = compact(with_text_fields(chunk.batch, spec.fields or state.text_fields))
            rows = Rows(batch, batch, ids, seq, shard.name, None, unreadable)
            if chunk.fixes:
                rows.read_events = _read_fix_events(chunk, ids, seq, state, fix_examples)
            state.read += n
            progress.advance_rows(n)
            if state.read > n:  # the second batch: the workers have the first
                pause_point("read")
            yield rows
        state.read_examples.extend(fix_examples)
        base += top + 1
    if spec.fields and seen:
        check_fields_seen(spec.fields, seen)


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


@dataclass
class Sinks:
    """Where results go: kept rows, quarantined rows, event tables."""

    kept: Callable[[Rows], None] | None = None
    quarantine: Callable[[QuarantineRows], None] | None = None
    events: Callable[[pa.Table], None] | None = None


def execute(spec: PipelineSpec, source: Any, sinks: Sinks, *, workers: int | None = None,
            progress: Progress | None = None, tmp_dir: Path | None = None) -> Iterator[Rows]:
    """Run the pipeline; yields kept rows in input order and fills ``execute.state``.

    The generator's ``RunState`` is returned by ``StopIteration.value`` (``yield from``).
    """
    with returning_pool():
        return (yield from _execute(spec, source, sinks, workers=workers, progress=progress,
                                    tmp_dir=tmp_dir))


def _execute(spec: PipelineSpec, source: Any, sinks: Sinks, *, workers: int | None,
             progress: Progress | None, tmp_dir: Path | None) -> Iterator[Rows]:
    stages = list(spec.stages)
    state = RunState([StageStats(s.name) for s in stages])
    progress = progress or Progress(enabled=False)
    segs = segments_of(stages)
    flag_codes = spec.output.flag_column is not None

    def on_quarantine(q: QuarantineRows) -> None:
        state.quarantined += len(q.row_ids)
        if sinks.quarantine is not None:
            sinks.quarantine(q)

    def take_stats(i: int, st: StageBatchStats) -> None:
        state.stage_stats[i].add(st)
        if st.events is not None and sinks.events is not None:
            sinks.events(st.events)

    rows_iter = read_rows(spec, source, state, progress)
    # peek up to the first batch with rows: its schema names the text fields by default
    head: list[Rows] = []
    for r in rows_iter:
        head.append(r)
        if r.num_rows:
            break
    if spec.fields:
        state.text_fields = list(spec.fields)
    elif head and head[-1].num_rows:
        state.text_fields = discover_text_fields(head[-1].data.schema)

    def chained(head: list[Rows], rest: Iterator[Rows]) -> Iterator[Rows]:
        yield from head
        yield from rest

    if workers is not None:  # the Python API's argument, bounded as --workers is
        check_setting("workers", workers, "workers")
    n_workers = workers or spec.workers or default_workers()
    if state.input_bytes and state.input_bytes < SMALL_INPUT_BYTES and not (
            workers or spec.workers):
        n_workers = 1
    state.workers = n_workers
    # The workers get the stages as configured, before any pass: they only run stateless
    # stages and global stages' prepare(), never a decision that needs finalize()'s state.
    initargs = (stages, segs, state.text_fields, flag_codes)
    tmp_root = Path(tmp_dir) if tmp_dir else Path(tempfile.gettempdir())
    stream: Iterator[Rows] = chained(head, rows_iter)
    pool = WorkerPool(n_workers, _init_worker, initargs, preload=stage_modules(stages),
                      warm=partial(_warm_worker, _warm_sample(head)), release=_W.clear)
    with tempfile.TemporaryDirectory(prefix="cleanpipe-", dir=tmp_root) as spill_dir, pool:
        # one entry per batch the previous global stage decided on, in batch order
        pending: deque[Decided] = deque()

        def merge(res: TaskResult, seg_i: int, ordered: ShardQuarantine | None) -> None:
            decided = pending.popleft() if seg_i else None
            _merge(res, state, take_stats, on_quarantine, sinks.events, decided, ordered)

        for seg_i, seg in enumerate(segs):
            tasks = ((seg_i, r) for r in stream)
            results = pool.map(_segment_task, tasks)
            # the first pass reads: its quarantine in read order per shard
            ordered = ShardQuarantine(on_quarantine, Path(spill_dir)) if seg_i == 0 else None
            if seg.closing is None:
                for n_res, res in enumerate(results, 1):
                    if n_res % _TRIM_EVERY == 0:
                        release_free_memory()
                    merge(res, seg_i, ordered)
                    state.kept += res.rows.num_rows
                    if res.rows.num_rows:
                        if sinks.kept is not None:
                            sinks.kept(res.rows)
                        yield res.rows
                    if n_res == 2:
                        pause_point("midrun")
                if ordered is not None:
                    ordered.flush()
                break
            g = stages[seg.closing]
            assert isinstance(g, GlobalStage)
            g.setup()
            spill = Spill(Path(spill_dir))
            own = 0.0  # observe and finalize; prepare's time comes with each batch's stats
            for n_res, res in enumerate(results, 1):
                if n_res % _TRIM_EVERY == 0:
                    release_free_memory()
                merge(res, seg_i, ordered)
                if res.rows.num_rows:
                    ctx = BatchContext(res.rows.data, state.text_fields, res.rows.row_ids)
                    t0 = time.perf_counter()
                    g.observe(res.prepared, res.rows.seq, res.rows.data, ctx)
                    own += time.perf_counter() - t0
                    spill.write(res.rows)
            spill.finish()
            if ordered is not None:
                ordered.flush()
            t0 = time.perf_counter()
            g.finalize()
            release_free_memory()  # finalize's temporaries: often the largest of the run
            state.stage_stats[seg.closing].seconds += own + time.perf_counter() - t0
            progress.note(f"{g.name}: second pass")
            stream = _decided(g, seg.closing, spill, state, flag_codes, pending)
    state.wall = time.time() - state.started
    progress.close()
    return state


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


def _decided(g: GlobalStage, idx: int, spill: Spill, state: RunState, flag_codes: bool,
             pending: deque[Decided]) -> Iterator[Rows]:
    """The second pass of ``g``: each batch's kept rows (even none), while its counters and
    drops wait in ``pending`` to be merged with the same batch's next results."""
    for rows in spill.read():
        kept, q, st = apply_decide(g, rows, state.text_fields, flag_codes)
        pending.append((idx, st, q))
        yield kept


#: a global stage's second pass over one batch: (stage index, its counters, its drops)
Decided = tuple[int, StageBatchStats, "QuarantineRows | None"]


def _merge(res: TaskResult, state: RunState, take_stats: Callable[[int, StageBatchStats], None],
           on_quarantine: Callable[[QuarantineRows], None],
           on_events: Callable[[pa.Table], None] | None = None,
           decided: Decided | None = None,
           ordered: ShardQuarantine | None = None) -> None:
    """Count one batch's results and hand its quarantined rows and events on, each in
    ``seq`` order (:mod:`cleanpipe.engine.ordering`): the reader's unreadable records of a
    file first, then ``decided`` (the previous global stage's decisions on these rows) and
    the stages' results together. ``ordered`` (the first pass) holds a file's dropped rows
    back until the file is read, as a big file read in blocks finds its unreadable records
    as it goes (:mod:`cleanpipe.engine.shard_quarantine`)."""
    if ordered is not None:
        shard = res.rows.shard
        on_quarantine = partial(ordered.dropped, shard)
        if res.rows.unreadable is not None:
            ordered.unreadable(shard, res.rows.unreadable)
            res.rows.unreadable = None
    if res.rows.unreadable is not None:
        on_quarantine(res.rows.unreadable)
        res.rows.unreadable = None
    if res.hist_before is not None:
        state.hist_before += np.asarray(res.hist_before, np.int64)
    if res.hist_after is not None:
        state.hist_after += np.asarray(res.hist_after, np.int64)
    merge_field_stats(state.fields_before, res.fields_before or {})
    merge_field_stats(state.fields_after, res.fields_after or {})
    stats = ([(decided[0], decided[1])] if decided is not None else []) + list(res.stats)
    events = [res.rows.read_events] + [st.events for _, st in stats]
    res.rows.read_events = None
    for i, st in stats:
        st.events = None  # handed on below, in seq order
        take_stats(i, st)
    merged = events_in_seq_order(events)
    if merged is not None and on_events is not None:
        on_events(merged)
    drops = ([decided[2]] if decided is not None else []) + list(res.quarantine)
    for q in quarantine_in_seq_order(drops):
        on_quarantine(q)
