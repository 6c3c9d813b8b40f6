"""Shared helpers of the robustness tests: run the CLI, read an output folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cleanpipe.cli import main


def write_pipeline(path: Path, input_path: str | Path | None = None, *, extra_input: str = "",
                   stages: str = "[]", extra: str = "") -> Path:
    inp = f"input: {{path: {json.dumps(str(input_path))}{extra_input}}}\n" if input_path else ""
    if not input_path and extra_input:
        inp = f"input: {{{extra_input.lstrip(', ')}}}\n"
    path.write_text(f"{inp}stages: {stages}\n{extra}", encoding="utf-8")
    return path


def cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def read_parts(folder: Path) -> pa.Table:
    files = sorted(folder.glob("*.parquet"))
    t = pa.concat_tables([pq.read_table(f) for f in files], promote_options="permissive")
    if t.num_rows == 0:  # one empty chunk, as datasets.Dataset expects
        t = pa.Table.from_batches([pa.RecordBatch.from_pylist([], schema=t.schema)])
    return t


def report(out: Path) -> dict[str, Any]:
    return json.loads((out / "report.json").read_text(encoding="utf-8"))


def output_files(out: Path) -> dict[str, bytes]:
    """Every file of an output folder by relative path, reports aside (they hold timings:
    compare them with :func:`stable_report`)."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and not p.name.startswith("report.") and p.name != "junit.xml"}


def stable_report(out: Path) -> dict[str, Any]:
    """report.json without what changes from run to run (timings, the output path)."""
    rep = report(out)
    rep.pop("timing")
    rep["output"].pop("path")
    for s in rep["stages"]:
        s.pop("seconds")
    return rep
