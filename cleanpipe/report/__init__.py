"""The anomaly report: report.json (schema-checked), report.md, report.html and junit.xml.

The engine builds the report dict (shape: ``cleanpipe/schemas/report.schema.json``), stores
the gate's verdict in it, and calls :func:`write_reports`.

    >>> import tempfile, pathlib
    >>> from cleanpipe.report.schema import SCHEMA_VERSION
    >>> out = pathlib.Path(tempfile.mkdtemp())
    >>> sorted(p.name for p in write_reports(example_report(), out, validate=True).values())
    ['junit.xml', 'report.html', 'report.json', 'report.md']
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from cleanpipe.report.html import render_html
from cleanpipe.report.junit import render_junit
from cleanpipe.report.markdown import render_markdown
from cleanpipe.report.schema import SCHEMA_VERSION, ReportSchemaError, validate

__all__ = ["FILES", "SCHEMA_VERSION", "ReportSchemaError", "example_report", "load_report",
           "render_html", "render_junit", "render_markdown", "to_json", "validate",
           "write_reports"]

#: Format name → file name written by :func:`write_reports`.
FILES = {"json": "report.json", "md": "report.md", "html": "report.html", "junit": "junit.xml"}


def _plain(value: Any) -> Any:
    """JSON-ready copy: numpy scalars and arrays to Python, NaN/inf refused with the path."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return _plain(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        raise ReportSchemaError(f"report holds a non-finite number ({value}); JSON cannot")
    return value


def to_json(report: dict[str, Any]) -> str:
    """report.json text: UTF-8 (not \\u-escaped, so Chinese stays readable), indented."""
    return json.dumps(_plain(report), ensure_ascii=False, indent=2, allow_nan=False) + "\n"


def load_report(path: str | os.PathLike[str], *, check: bool = True) -> dict[str, Any]:
    """Read a report.json (a folder means its report.json); validated unless ``check=False``.

    Raises OSError when unreadable, ``ValueError`` (json or schema) when not a valid report.
    """
    p = Path(path)
    if p.is_dir():
        p = p / FILES["json"]
    report = json.loads(p.read_text(encoding="utf-8"))
    if not isinstance(report, dict):
        raise ReportSchemaError(f"{p}: not a JSON object")
    if check:
        version = report.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ReportSchemaError(
                f"{p}: report schema_version {version!r}; this cleanpipe reads {SCHEMA_VERSION!r}")
        validate(report)
    return report


def write_reports(report: dict[str, Any], out_dir: str | os.PathLike[str], *,
                  formats: tuple[str, ...] = ("json", "md", "html", "junit"),
                  validate: bool = True) -> dict[str, Path]:
    """Write the report files into ``out_dir``; returns ``{format: path}``.

    The dict is checked against the shipped schema first (``validate``), so a report that
    reaches disk is one every consumer can read. When ``$GITHUB_STEP_SUMMARY`` is set, the
    Markdown summary is appended to it too.
    """
    plain = _plain(report)
    if validate:
        _validate(plain)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    md = render_markdown(plain) if "md" in formats or os.environ.get("GITHUB_STEP_SUMMARY") else ""
    renderers = {"json": to_json, "md": lambda _r: md, "html": render_html,
                 "junit": render_junit}
    for fmt in formats:
        path = out / FILES[fmt]
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(renderers[fmt](plain), encoding="utf-8")
        tmp.replace(path)  # readers never see a half-written report
        paths[fmt] = path
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(md + "\n")
    return paths


_validate = validate


def example_report() -> dict[str, Any]:
    """A small, complete and valid report (for docs, tests and trying the renderers)."""
    from cleanpipe.report._example import example_report as make

    return make()
