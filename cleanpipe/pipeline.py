"""The Python API: build or load a pipeline, run it, get the report.

    >>> import pyarrow as pa
    >>> from cleanpipe import Pipeline
    >>> p = Pipeline(stages=[], fields=["text"])
    >>> report = p.run(pa.table({"text": ["a", "b"]}))
    >>> report["totals"]["read"], report["totals"]["kept"]
    (2, 2)
    >>> [b.num_rows for b in p.iter_batches(pa.table({"text": ["a", "b"]}))]
    [2]
    >>> result = p.clean(pa.table({"text": ["a", "b"]}))
    >>> result.dataset.num_rows, result.report.passed
    (2, True)
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cleanpipe.contract.stage import Stage
from cleanpipe.engine.local import RunState, Sinks, execute
from cleanpipe.engine.progress import Progress
from cleanpipe.engine.rows import QuarantineRows, Rows
from cleanpipe.gate import GateConfig, evaluate
from cleanpipe.io.filesystems import is_uri, redact
from cleanpipe.io.output_guard import check_no_overlap
from cleanpipe.io.uri_output import output_dir, write_dir_to
from cleanpipe.io.writers import (
    FixedGroupWriter,
    OutputError,
    PartWriter,
    dataset_card,
    write_hf_dataset,
)
from cleanpipe.report.build import build_report
from cleanpipe.result import CleanReport, CleanResult, as_dataset, like_input, unified_table
from cleanpipe.spec import PipelineSpec, load_spec, spec_from_dict

EVENTS_SCHEMA = pa.schema([
    ("row_id", pa.string()), ("seq", pa.int64()), ("stage", pa.string()), ("code", pa.string()),
    ("action", pa.string()), ("field", pa.string()), ("detail", pa.string()),
])


def quarantine_batch(q: QuarantineRows) -> pa.RecordBatch:
    """Dropped rows as read, plus row id, dropping stage, reason codes, details, raw text."""
    n = len(q.row_ids)
    meta = {
        "_cleanpipe_row_id": pa.array(q.row_ids, pa.string()),
        "_cleanpipe_stage": pa.array([q.stage] * n, pa.string()),
        "_cleanpipe_reasons": pa.array(q.reasons, pa.list_(pa.string())),
        "_cleanpipe_details": pa.array(q.details, pa.list_(pa.string())),
        "_cleanpipe_raw": pa.array(q.raw if q.raw else [None] * n, pa.string()),
    }
    if q.orig is None:
        return pa.RecordBatch.from_pydict(meta)
    cols = list(q.orig.columns) + list(meta.values())
    names = list(q.orig.schema.names) + list(meta)
    return pa.RecordBatch.from_arrays(cols, names=names)


def empty_quarantine() -> pa.RecordBatch:
    """A quarantine batch with no rows: the schema of a quarantine with nothing in it."""
    return quarantine_batch(QuarantineRows(None, [], np.zeros(0, np.int64), "", [], []))


def kept_batch(rows: Rows, flag_column: str | None) -> pa.RecordBatch:
    """Kept rows as written: with ``flag_column`` (the row's flag codes) when configured."""
    if not flag_column:
        return rows.data
    flags = rows.flags if rows.flags is not None else np.empty(rows.num_rows, dtype=object)
    arr = pa.array([f if f is not None else [] for f in flags.tolist()], pa.list_(pa.string()))
    return rows.data.append_column(flag_column, arr)


def _kept_schema(input_schema: pa.Schema | None, flag_column: str | None) -> pa.Schema | None:
    """The schema of an empty result: the input's, plus the flag column when configured."""
    if input_schema is not None and flag_column:
        return input_schema.append(pa.field(flag_column, pa.list_(pa.string())))
    return input_schema


class Pipeline:
    """A cleaning pipeline: stages, text fields, input/output settings and a gate.

    Build it in code (``Pipeline(stages=[UnicodeFix(), ExactDedup()], fields=[...])``) or load
    a YAML file with :meth:`from_yaml`. :meth:`run` writes the cleaned dataset, quarantine and
    reports and returns the report dict; :meth:`clean` returns the cleaned data in memory
    (the input's type) with a typed report and the quarantine; :meth:`iter_batches` yields
    cleaned record batches for scripts that keep going in memory.

    Every entry point runs on the engine named by ``engine`` (argument) or the pipeline's
    ``engine:`` setting: ``local`` (default) or ``ray``.
    """

    def __init__(self, stages: list[Stage | dict[str, Any]] | None = None, *,
                 fields: list[str] | None = None, spec: PipelineSpec | None = None,
                 **settings: Any) -> None:
        if spec is None:
            spec = spec_from_dict({"fields": fields, "stages": list(stages or []), **settings})
        self.spec = spec
        self.last_state: RunState | None = None

    @classmethod
    def from_yaml(cls, path: str | Path) -> Pipeline:
        return cls(spec=load_spec(path))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Pipeline:
        return cls(spec=spec_from_dict(data))

    @property
    def stages(self) -> list[Stage]:
        return list(self.spec.stages)

    def _source(self, input: Any) -> Any:
        src = input if input is not None else self.spec.input.path
        if src is None:
            from cleanpipe.spec import ConfigError

            raise ConfigError(f"{self.spec.source or '<pipeline>'}: no input: set input.path"
                              " or pass --input")
        return src

    def _spec_for(self, engine: str | None, address: str | None) -> PipelineSpec:
        """The spec to run: this one, with ``engine``/``address`` when given (so the
        report records the engine that ran)."""
        if engine is None and address is None:
            return self.spec
        if engine not in (None, "local", "ray"):
            from cleanpipe.spec import ConfigError

            raise ConfigError(f"{self.spec.source or '<pipeline>'}: engine {engine!r} is not"
                              " one of 'local', 'ray'")
        update = {"engine": engine, "ray_address": address}
        return self.spec.model_copy(update={k: v for k, v in update.items() if v is not None})

    @staticmethod
    def _executor(spec: PipelineSpec) -> Callable[..., Iterator[Rows]]:
        """The run function of ``spec.engine`` (:func:`cleanpipe.engine.local.execute`'s
        signature)."""
        if spec.engine == "ray":
            from cleanpipe.engine.ray_engine import execute_ray

            return functools.partial(execute_ray, address=spec.ray_address)
        return execute

    def iter_batches(self, input: Any = None, *, workers: int | None = None,
                     engine: str | None = None) -> Iterator[pa.RecordBatch]:
        """Cleaned record batches in input order; nothing is written."""
        spec = self._spec_for(engine, None)
        gen = self._executor(spec)(spec, self._source(input), Sinks(), workers=workers)
        while True:
            try:
                rows = next(gen)
            except StopIteration as stop:
                self.last_state = stop.value
                return
            yield rows.data

    def check(self, input: Any = None, *, workers: int | None = None,
              progress: bool = False, engine: str | None = None) -> dict[str, Any]:
        """Run every stage read-only: the report (with verdict), no dataset written."""
        return self.run(input, None, workers=workers, progress=progress, engine=engine)

    def clean(self, input: Any = None, *, workers: int | None = None, progress: bool = False,
              engine: str | None = None, address: str | None = None) -> CleanResult:
        """Run the pipeline once in memory: the cleaned data and a typed report.

        ``result.dataset`` has the input's type (a ``datasets.Dataset`` for a ``Dataset``,
        a path or anything else; an ``IterableDataset`` for an ``IterableDataset``; a
        ``pyarrow.Table`` for a Table or RecordBatch; a polars DataFrame for one) and holds
        the rows ``run`` would write. ``result.report`` is a :class:`CleanReport`: the
        report dict (``to_dict()``), ``passed``, ``totals`` and ``quarantine``, the dropped
        rows with their reasons as a ``datasets.Dataset``. Both come from the same run.
        The result is held in memory, also for an ``IterableDataset`` (read as a stream,
        returned over the materialized rows), since global stages decide only at the end.
        """
        source = self._source(input)
        flag_col = self.spec.output.flag_column
        kept: list[pa.RecordBatch] = []
        dropped: list[pa.RecordBatch] = []
        sinks = Sinks(kept=lambda rows: kept.append(kept_batch(rows, flag_col)),
                      quarantine=lambda q: dropped.append(quarantine_batch(q)))
        spec = self._spec_for(engine, address)
        state = self._drain(self._executor(spec)(
            spec, source, sinks, workers=workers, progress=Progress(enabled=progress)))
        report = self._report(state, source, None, False, spec)
        data = unified_table(kept, _kept_schema(state.input_schema, flag_col))
        quarantine = as_dataset(unified_table(dropped, empty_quarantine().schema))
        return CleanResult(like_input(data, input), CleanReport(report, quarantine))

    def run(self, input: Any = None, output: str | Path | None = None, *,
            overwrite: bool = False, workers: int | None = None, progress: bool = False,
            report_dir: str | Path | None = None, engine: str | None = None,
            address: str | None = None) -> dict[str, Any]:
        """Run the pipeline. With an output directory, write data, quarantine and reports
        there atomically; without one, only compute the report. The reports also go to
        ``report_dir`` if given. Returns the report dict.

        ``engine`` (else the pipeline's ``engine:``): ``local`` or ``ray``, on the cluster
        at ``address`` (else ``ray_address:``); writing is the same for every engine."""
        spec = self._spec_for(engine, address)
        run_exec = self._executor(spec)
        source = self._source(input)
        out = output if output is not None else None
        prog = Progress(enabled=progress)
        if out is None:
            state = self._drain(run_exec(spec, source, Sinks(), workers=workers,
                                        progress=prog))
            report = self._report(state, source, None, False, spec)
            if report_dir is not None:
                _write_report_dir(report, report_dir)
            return report
        check_no_overlap(out, source)
        atomic = output_dir(out, overwrite=overwrite)
        try:
            with atomic as tmp:
                fmt = self.spec.output.format
                data_dir = tmp / "data"
                parts_dir = tmp / ".hf-parts" if fmt == "hf" else data_dir
                data_w = PartWriter(parts_dir, "train", "jsonl" if fmt == "jsonl" else "parquet",
                                    self.spec.output.rows_per_part)
                # same format as the data: datasets reads one format per dataset card
                q_w = PartWriter(tmp / "quarantine", "quarantine",
                                 "jsonl" if fmt == "jsonl" else "parquet")
                events_w: FixedGroupWriter | None = None
                flag_col = self.spec.output.flag_column

                def kept(rows: Rows) -> None:
                    data_w.write(kept_batch(rows, flag_col), rows.shard)

                def quarantine(q: QuarantineRows) -> None:
                    q_w.write(quarantine_batch(q), q.stage)

                def events(t: pa.Table) -> None:
                    nonlocal events_w
                    if events_w is None:
                        events_w = FixedGroupWriter(tmp / "events.parquet", EVENTS_SCHEMA,
                                                    compression="zstd")
                    events_w.write_table(t.cast(EVENTS_SCHEMA))

                sinks = Sinks(kept=kept, quarantine=quarantine,
                              events=events if self.spec.output.events else None)
                state = self._drain(run_exec(spec, source, sinks, workers=workers,
                                             progress=prog, tmp_dir=tmp))
                parts = data_w.close(_kept_schema(state.input_schema, flag_col))
                q_parts = q_w.close(empty_quarantine().schema)
                if events_w is not None:
                    events_w.close()
                elif self.spec.output.events:
                    pq.write_table(EVENTS_SCHEMA.empty_table(), tmp / "events.parquet")
                if fmt == "hf":
                    write_hf_dataset(parts, data_dir)
                    for p in parts:
                        p.unlink()
                    parts_dir.rmdir()
                ext = "jsonl" if fmt == "jsonl" else "parquet"
                if fmt != "hf":
                    (tmp / "README.md").write_text(
                        dataset_card(f"data/*.{ext}", f"quarantine/*.{ext}", data_w.schema,
                                     q_w.schema if q_parts else None), encoding="utf-8")
                report = self._report(state, source, redact(os.fspath(out)), True, spec)
                _write_reports(report, tmp)
                atomic.commit()
        except OSError as e:
            raise _output_error(redact(os.fspath(out)), e) from e
        if report_dir is not None:
            _write_report_dir(report, report_dir)
        return report

    @staticmethod
    def _drain(gen: Iterator[Rows]) -> RunState:
        while True:
            try:
                next(gen)
            except StopIteration as stop:
                return stop.value

    def _report(self, state: RunState, source: Any, output: str | None,
                written: bool, spec: PipelineSpec | None = None) -> dict[str, Any]:
        spec = spec or self.spec
        self.last_state = state
        # redact: a URI may carry credentials, and the report is shared
        if isinstance(source, (str, os.PathLike)):
            desc = [redact(os.fspath(source))]
        elif isinstance(source, (list, tuple)):
            desc = [redact(os.fspath(s)) if isinstance(s, (str, os.PathLike))
                    else type(s).__name__ for s in source]
        else:
            desc = [f"<{type(source).__name__}>"]
        report = build_report(spec, state, input_desc=desc, output_path=output,
                              output_written=written)
        gate = spec.gate if isinstance(spec.gate, GateConfig) else GateConfig()
        report["verdict"] = evaluate(report, gate)
        return report


#: errors of the output location, not of cleanpipe: the disk, the permissions, the quota
_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                  errno.EFBIG}


def _output_error(out: str | Path, e: OSError) -> Exception:
    """A one-line :class:`OutputError` for a full or unwritable output; else ``e`` itself.

    The temporary folder is already removed (:class:`AtomicDir`), so nothing partial stays.
    """
    text = str(e)
    code = e.errno
    if code is None and "No space left" in text:  # pyarrow's IO errors carry no errno
        code = errno.ENOSPC
    if code not in _OUTPUT_ERRNOS:
        return e
    why = os.strerror(code) if code is not None else text
    hint = ("free some space or choose another --output" if code in (errno.ENOSPC, errno.EDQUOT,
            errno.EFBIG) else "choose a writable --output")
    return OutputError(f"{out}: cannot write the output: {why}; {hint} (nothing was written)")


def _write_report_dir(report: dict[str, Any], report_dir: str | Path) -> None:
    """``check --report-dir``: a local folder, or a URI (written locally, then copied)."""
    text = os.fspath(report_dir)
    if not is_uri(text):
        from cleanpipe.io.output_guard import claim_report_files
        from cleanpipe.report import FILES

        claim_report_files(Path(text), FILES.values())
        _write_reports(report, Path(text), overwrite=True)
        return
    with tempfile.TemporaryDirectory(prefix="cleanpipe-reports-") as tmp:
        _write_reports(report, Path(tmp), overwrite=True)
        write_dir_to(Path(tmp), text)


def _write_reports(report: dict[str, Any], directory: Path, overwrite: bool = False) -> None:
    from cleanpipe.report import write_reports

    directory.mkdir(parents=True, exist_ok=True)
    write_reports(report, directory)
