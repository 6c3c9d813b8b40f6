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

import pyarrow as pa

from cleanpipe.contract.stage import Stage
from cleanpipe.engine.core import EngineRun, RunState, Sinks
from cleanpipe.engine.local import execute
from cleanpipe.engine.progress import Progress
from cleanpipe.gate import GateConfig, evaluate
from cleanpipe.io.filesystems import is_uri, redact
from cleanpipe.io.output_folder import InMemory, OutputFolder, empty_quarantine, kept_schema
from cleanpipe.io.output_guard import check_no_overlap
from cleanpipe.io.uri_output import output_dir, write_dir_to
from cleanpipe.io.writers import OutputError
from cleanpipe.report.build import build_report
from cleanpipe.result import CleanReport, CleanResult, as_dataset, like_input, unified_table
from cleanpipe.spec import PipelineSpec, load_spec, spec_from_dict


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
    def _executor(spec: PipelineSpec) -> Callable[..., EngineRun]:
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
        run = self._executor(spec)(spec, self._source(input), Sinks(), workers=workers)
        for rows in run:
            yield rows.data
        self.last_state = run.state

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
        memory = InMemory(flag_col)
        sinks = Sinks(kept=memory.kept, quarantine=memory.quarantine)
        spec = self._spec_for(engine, address)
        state = self._executor(spec)(spec, source, sinks, workers=workers,
                                     progress=Progress(enabled=progress)).finish()
        report = self._report(state, source, None, False, spec)
        data = unified_table(memory.kept_batches, kept_schema(state.input_schema, flag_col))
        quarantine = as_dataset(unified_table(memory.dropped_batches,
                                              empty_quarantine().schema))
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
        out = output
        prog = Progress(enabled=progress)
        if out is None:
            state = run_exec(spec, source, Sinks(), workers=workers, progress=prog).finish()
            report = self._report(state, source, None, False, spec)
            if report_dir is not None:
                _write_report_dir(report, report_dir)
            return report
        check_no_overlap(out, source)
        atomic = output_dir(out, overwrite=overwrite)
        o = self.spec.output
        try:
            with atomic as tmp:
                folder = OutputFolder(tmp, fmt=o.format, rows_per_part=o.rows_per_part,
                                      flag_column=o.flag_column, events=o.events)
                sinks = Sinks(kept=folder.kept, quarantine=folder.quarantine,
                              events=folder.events_sink)
                state = run_exec(spec, source, sinks, workers=workers, progress=prog,
                                 tmp_dir=tmp).finish()
                folder.close(state.input_schema)
                report = self._report(state, source, redact(os.fspath(out)), True, spec)
                _write_reports(report, tmp)
                atomic.commit()
        except OSError as e:
            raise _output_error(redact(os.fspath(out)), e) from e
        if report_dir is not None:
            _write_report_dir(report, report_dir)
        return report

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
