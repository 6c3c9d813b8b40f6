"""The ``cleanpipe`` command.

Exit codes (:class:`cleanpipe.errors.ExitCode`): 0 pass, 1 gate failed, 2 usage or config
error, 3 unreadable input, 70 internal error.
Errors are one line naming the file, line and key; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import pkgutil
import socket
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from cleanpipe.errors import CleanpipeError, ExitCode
from cleanpipe.version import __version__

SAMPLE_DIR = Path(__file__).parent / "sample"
PIPELINES_DIR = Path(__file__).parent / "pipelines"


def _error_code(exc: BaseException) -> ExitCode:
    """The exit code of a command that raised ``exc``: :attr:`ExitCode.INTERNAL` for what
    is not the user's to fix."""
    from pydantic import ValidationError

    if _network_error(exc):
        return ExitCode.UNREADABLE
    if isinstance(exc, CleanpipeError):
        return exc.exit_code
    if isinstance(exc, (ValidationError, FileExistsError)):
        return ExitCode.USAGE
    if isinstance(exc, OSError) and exc.errno is not None:
        return ExitCode.USAGE
    return ExitCode.INTERNAL


def _network_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a failed connection or look-up: a remote input
    that cannot be reached is an unreadable input, not a bug in cleanpipe."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        cls = type(seen)
        if isinstance(seen, (ConnectionError, TimeoutError, socket.gaierror)):
            return True
        if cls.__module__.split(".")[0] in ("httpx", "httpcore", "requests", "urllib3",
                                            "huggingface_hub", "aiohttp") and any(
                w in cls.__name__ for w in ("Connect", "Timeout", "Network", "Offline")):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _report_dir_of(argv: list[str]) -> str | None:
    """``--report-dir`` from the raw arguments, for errors argparse raises before parsing
    finishes."""
    for i, a in enumerate(argv):
        if a == "--report-dir" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--report-dir="):
            return a.split("=", 1)[1]
    return None


def _leave_error_report(report_dir: str | None, command: str, pipeline: str | None,
                        code: int, message: str, kind: str) -> None:
    if not report_dir:
        return
    from cleanpipe.io.writers import OutputError
    from cleanpipe.report.error import error_report, write_error_report

    try:
        write_error_report(error_report(command=command, pipeline=pipeline, exit_code=int(code),
                                        message=message, kind=kind), report_dir)
    except OSError as exc:
        print(f"cleanpipe: could not write the error report to {report_dir}: {exc}",
              file=sys.stderr)
    except OutputError as exc:  # the folder holds report files someone else wrote
        print(f"cleanpipe: no error report written: {exc}", file=sys.stderr)


def _load(args: argparse.Namespace) -> Any:
    from cleanpipe.pipeline import Pipeline

    path = Path(args.pipeline)
    if path.suffix == ".yaml" and path.resolve().parent == PIPELINES_DIR.resolve():
        # a shipped pipeline: its relative paths (sample input, tokenizer) are its own
        return shipped_pipeline(path.stem)
    return Pipeline.from_yaml(path)


def _check_numbers(args: argparse.Namespace) -> None:
    """Range-check the numeric options (as the pipeline file's values are), before any work."""
    from cleanpipe.spec import check_setting

    for key, option in (("workers", "--workers"), ("batch_size", "--batch-size")):
        if getattr(args, key, None) is not None:
            check_setting(key, getattr(args, key), option)


def _apply_overrides(pipe: Any, args: argparse.Namespace) -> None:
    spec = pipe.spec
    if getattr(args, "fields", None):
        spec.fields = [f.strip() for f in args.fields.split(",") if f.strip()]
    if getattr(args, "format", None):
        spec.output.format = args.format
    if getattr(args, "batch_size", None) is not None:
        spec.batch_size = args.batch_size
    if getattr(args, "engine", None):
        spec.engine = args.engine
    if getattr(args, "address", None):
        spec.ray_address = args.address


def _input(args: argparse.Namespace) -> Any:
    if not args.input:
        return None
    return args.input if len(args.input) > 1 else args.input[0]


def summary_table(report: dict[str, Any]) -> str:
    """The end-of-run table: one line per stage, then the totals and the verdict."""
    rows = [("stage", "in", "out", "changed", "dropped", "flagged", "seconds")]
    for s in report["stages"]:
        rows.append((s["name"], f"{s['rows_in']:,}", f"{s['rows_out']:,}", f"{s['changed']:,}",
                     f"{s['dropped']:,}", f"{s['flagged']:,}", f"{s['seconds']:.2f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(r, widths, strict=True))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    t = report["totals"]
    lines.append("")
    lines.append(f"read {t['read']:,}  kept {t['kept']:,}  quarantined {t['quarantined']:,}"
                 f"  (kept + quarantined == read: {t['kept'] + t['quarantined'] == t['read']})")
    tm = report["timing"]
    lines.append(f"{tm['wall_seconds']:.2f}s, {tm['rows_per_second']:,.0f} rows/s")
    v = report.get("verdict") or {}
    verdict = "PASS" if v.get("passed", True) else "FAIL"
    lines.append(f"verdict: {verdict}")
    for r in v.get("rules", []):
        if not r.get("passed", True):
            lines.append(f"  failed: {r['name']}: {r.get('message', '')}")
    return "\n".join(lines)


def _finish(report: dict[str, Any], out: str | None, quiet: bool) -> int:
    if not quiet:
        print(summary_table(report))
        if out:
            print(f"output: {out}")
    return int((report.get("verdict") or {}).get("exit_code", 0))


def cmd_run(args: argparse.Namespace) -> int:
    _check_numbers(args)
    pipe = _load(args)
    _apply_overrides(pipe, args)
    out = args.output or pipe.spec.output.path
    if not out:
        print(f"cleanpipe: {args.pipeline}: no output: set output.path or pass --output",
              file=sys.stderr)
        return ExitCode.USAGE
    report = _run(pipe, args, out)
    return _finish(report, out, args.quiet)


def _run(pipe: Any, args: argparse.Namespace, out: str | None,
         report_dir: str | None = None) -> dict[str, Any]:
    # the engine (local or ray, --engine/--address or the file's) is chosen by Pipeline.run
    progress = not args.quiet and not args.no_progress
    if out is None:
        return pipe.run(_input(args), None, workers=args.workers, progress=progress,
                        report_dir=report_dir)
    return pipe.run(_input(args), out, overwrite=args.overwrite, workers=args.workers,
                    progress=progress, report_dir=getattr(args, "report_dir", None))


def cmd_check(args: argparse.Namespace) -> int:
    _check_numbers(args)
    pipe = _load(args)
    _apply_overrides(pipe, args)
    report = _run(pipe, args, None, report_dir=args.report_dir)
    return _finish(report, None, args.quiet)


def cmd_validate(args: argparse.Namespace) -> int:
    pipe = _load(args)
    for s in pipe.stages:
        s.setup()  # a tokenizer path that does not exist fails here, not an hour in
    print(f"{args.pipeline}: ok ({len(pipe.stages)} stages: "
          f"{', '.join(s.name for s in pipe.stages) or 'none'})")
    return ExitCode.PASSED


def describe_stages() -> str:
    from cleanpipe.contract.parameter_docs import descriptions
    from cleanpipe.contract.stage import GlobalStage, TextStage
    from cleanpipe.stages.registry import stage_classes

    out = []
    for name, cls in stage_classes().items():
        kind = ("text" if issubclass(cls, TextStage) else
                "global" if issubclass(cls, GlobalStage) else "batch")
        summary = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        out.append(f"{name}  ({kind})  {summary}")
        codes = ", ".join(f"{c}={a.value}" for c, a in cls.codes.items())
        if codes:
            out.append(f"    codes: {codes}")
        docs = descriptions(cls)
        for fname, f in cls.model_fields.items():
            if f.is_required():
                default = " (required)"
            else:
                value = f.default if f.default_factory is None else f.default_factory()
                default = f" = {value!r}"
            desc = " — " + " ".join(docs[fname].split()) if fname in docs else ""
            out.append(f"    {fname}: {_type_name(f.annotation)}{default}{_bounds(f.metadata)}"
                       f"{desc}")
    return "\n".join(out)


def _bounds(metadata: list[Any]) -> str:
    """A parameter's range, as ``cleanpipe stages`` shows it after the default.

        >>> from pydantic import Field
        >>> _bounds(Field(5, ge=0, le=1000).metadata)
        ', >= 0 and <= 1000'
    """
    marks = [(">", "gt"), (">=", "ge"), ("<", "lt"), ("<=", "le")]
    parts = [f"{sign} {getattr(m, name)}" for m in metadata for sign, name in marks
             if getattr(m, name, None) is not None]
    return ", " + " and ".join(parts) if parts else ""


def _type_name(t: Any) -> str:
    """A parameter's type as a user writes it: validators and other metadata left out.

        >>> from typing import Annotated, Literal
        >>> from pydantic import AfterValidator
        >>> _type_name(dict[str, Annotated[str, AfterValidator(str.strip)]])
        'dict[str, str]'
        >>> _type_name(Literal["a", "b"] | None)
        "'a' | 'b' | None"
    """
    import types
    import typing

    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if t is type(None):
        return "None"
    if isinstance(t, type) and not args:
        return t.__name__
    if origin is not None and args:
        name = getattr(origin, "__name__", str(origin).replace("typing.", ""))
        return f"{name}[{', '.join(_type_name(a) for a in args)}]"
    return str(t).replace("typing.", "").replace("cleanpipe.contract.stage.", "")


def cmd_stages(args: argparse.Namespace) -> int:
    print(describe_stages())
    return ExitCode.PASSED


def shipped_pipeline(name: str) -> Any:
    """A pipeline shipped in ``cleanpipe/pipelines``, with its relative paths (input files,
    a stage's ``tokenizer``) resolved against that folder, so it runs from any directory."""
    from cleanpipe.pipeline import Pipeline

    pipe = Pipeline.from_yaml(PIPELINES_DIR / f"{name}.yaml")

    def here(p: str) -> str:
        return p if Path(p).is_absolute() else str((PIPELINES_DIR / p).resolve())

    src = pipe.spec.input.path
    if src is not None:
        pipe.spec.input.path = here(src) if isinstance(src, str) else [here(s) for s in src]
    for stage in pipe.stages:
        for key in ("tokenizer", "labels_file"):
            value = getattr(stage, key, None)
            if isinstance(value, str) and value.startswith("../"):
                setattr(stage, key, here(value))
    return pipe


def cmd_demo(args: argparse.Namespace) -> int:
    _check_numbers(args)
    pipe = shipped_pipeline("demo")
    out = args.output or "cleanpipe-demo"
    print(f"cleanpipe demo: default pipeline on the bundled sample corpus ({SAMPLE_DIR})")
    report = pipe.run(None, out, overwrite=args.overwrite, workers=args.workers,
                      progress=not args.no_progress)
    code = _finish(report, out, False)
    print(f"reports: {out}/report.md, {out}/report.html, {out}/report.json")
    # the demo corpus is full of planted problems: a failing gate is what it should show
    return ExitCode.PASSED if code in (ExitCode.PASSED, ExitCode.GATE_FAILED) else code


def _common_run_args(p: argparse.ArgumentParser) -> None:
    from cleanpipe.limits import MAX_BATCH_SIZE, MAX_WORKERS

    p.add_argument("pipeline", help="pipeline YAML file")
    p.add_argument("--input", "-i", nargs="+", help="input file(s), folder or glob, local or a"
                   " URI such as s3://bucket/prefix/ (overrides input.path)")
    p.add_argument("--fields", help="comma-separated text fields (overrides fields:)")
    p.add_argument("--workers", "-j", type=int,
                   help=f"worker processes, 1 to {MAX_WORKERS} (default: all cores)")
    p.add_argument("--batch-size", type=int, help=f"rows per batch, 1 to {MAX_BATCH_SIZE:,}"
                   " (default: batch_size:, else 4096); changes speed, never the output")
    p.add_argument("--engine", choices=["local", "ray"])
    p.add_argument("--address", help="Ray cluster address (with --engine ray)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.add_argument("--quiet", "-q", action="store_true")
    p.add_argument("--no-progress", action="store_true")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cleanpipe", description="Clean and check a fine-tuning dataset before training.")
    parser.add_argument("--version", action="version", version=f"cleanpipe {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="clean a dataset: write data, quarantine and reports")
    _common_run_args(p)
    p.add_argument("--output", "-o", help="output folder, local or a URI such as"
                   " s3://bucket/cleaned (overrides output.path)")
    p.add_argument("--format", choices=["parquet", "jsonl", "hf"])
    p.add_argument("--report-dir", help="also write report.json/md/html and junit.xml here;"
                   " if the run stops on an error, report.json and junit.xml say why")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("check", help="run every check read-only (no dataset written): CI gate")
    _common_run_args(p)
    p.add_argument("--report-dir", help="write report.json/md/html and junit.xml here (on an"
                   " error too: report.json and junit.xml then say why)")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("validate", help="check a pipeline file without running it")
    p.add_argument("pipeline")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("stages", help="list stages, their parameters and defaults")
    p.set_defaults(func=cmd_stages)

    from cleanpipe.limits import MAX_WORKERS

    p = sub.add_parser("demo", help="run the default pipeline on the bundled sample corpus")
    p.add_argument("--output", "-o", default="cleanpipe-demo")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--workers", "-j", type=int, help=f"worker processes, 1 to {MAX_WORKERS}")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_demo)

    _register_commands(sub)
    return parser


def _register_commands(sub: Any) -> None:
    """Subcommands that live in :mod:`cleanpipe.commands` (one module each)."""
    import cleanpipe.commands as commands

    for mod in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if mod.name.startswith("_"):
            continue
        module = importlib.import_module(f"cleanpipe.commands.{mod.name}")
        register: Callable[[Any], None] | None = getattr(module, "register", None)
        if register is not None:
            register(sub)


def main(argv: list[str] | None = None) -> int:
    from cleanpipe.engine.termination import Terminated, sigterm_as_interrupt

    parser = build_parser()
    raw = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parser.parse_args(raw)
    except SystemExit as exc:
        if exc.code == ExitCode.USAGE:
            _leave_error_report(_report_dir_of(raw), raw[0] if raw else "cleanpipe", None,
                                ExitCode.USAGE, "invalid command line (see the message above)",
                                "UsageError")
        raise
    try:
        with sigterm_as_interrupt():
            return int(args.func(args))
    except BrokenPipeError:
        # `cleanpipe stages | head`: the reader left; not an error
        sys.stderr = open(os.devnull, "w")
        return ExitCode.PASSED
    except KeyboardInterrupt as exc:
        if isinstance(exc, Terminated):
            print("cleanpipe: terminated (SIGTERM)", file=sys.stderr)
            return ExitCode.TERMINATED
        print("cleanpipe: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BaseException as exc:
        if isinstance(exc, SystemExit):
            raise
        code = _error_code(exc)
        if args.debug:
            traceback.print_exc()
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        from cleanpipe.io.sources import InputError

        if not isinstance(exc, InputError) and _network_error(exc):
            where = " ".join(getattr(args, "input", None) or ["the input"])
            msg = f"{where}: cannot be reached (offline, or no such host?): {msg}"
        _leave_error_report(getattr(args, "report_dir", None), args.command,
                            getattr(args, "pipeline", None), code, msg, type(exc).__name__)
        if code is ExitCode.INTERNAL:
            print(f"cleanpipe: internal error: {type(exc).__name__}: {msg} (rerun with --debug"
                  " for the traceback, and please report it)", file=sys.stderr)
            return code
        print(f"cleanpipe: {msg}", file=sys.stderr)
        return code


def entry() -> NoReturn:
    """The ``cleanpipe`` command: :func:`main`, then exit with its code.

    At exit the interpreter's collector walks every object once more, ~0.2 s with numba,
    pyarrow and pandas loaded, only to free memory the system takes back anyway;
    :func:`gc.freeze` exempts what exists by then. Module teardown and ``atexit`` handlers
    still run (files close, temporary folders go). Not in :func:`main`, which a program or a
    test may call many times in one process; nor is pyarrow kept from importing pandas there
    (:func:`cleanpipe.pandas_probe.defer_pandas`): that is a program's own choice.
    """
    from cleanpipe.pandas_probe import defer_pandas

    defer_pandas()
    try:
        code = main()
    finally:
        gc.freeze()
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    entry()
