"""The report a command leaves when it stops on an error, so a CI job's test view and
artifact steps show why instead of finding nothing.

    >>> import tempfile, pathlib, json
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> rep = error_report(command="check", pipeline="p.yaml", exit_code=3,
    ...                    message="data/: no such file or folder", kind="InputError")
    >>> write_error_report(rep, d)
    >>> json.loads((d / "report.json").read_text())["error"]["exit_code"]
    3
    >>> 'type="InputError"' in (d / "junit.xml").read_text()
    True
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cleanpipe.errors import ExitCode
from cleanpipe.report.junit import render_junit
from cleanpipe.version import __version__


def error_report(*, command: str, pipeline: str | None, exit_code: int, message: str,
                 kind: str) -> dict[str, Any]:
    """report.json's content for a command that stopped on an error: no totals, the error."""
    return {
        "cleanpipe_version": __version__,
        "command": command,
        "pipeline": {"name": Path(pipeline).stem if pipeline else "pipeline",
                     "path": pipeline},
        "error": {"exit_code": exit_code, "kind": kind, "message": message,
                  "meaning": _meaning(exit_code)},
        "verdict": {"passed": False, "exit_code": exit_code, "rules": []},
    }


def _meaning(exit_code: int) -> str:
    """What ``exit_code`` means, as report.json's ``error.meaning`` says it."""
    try:
        return ExitCode(exit_code).meaning
    except ValueError:
        return "error"


def write_error_report(report: dict[str, Any], directory: str | os.PathLike[str]) -> None:
    """Write report.json, report.md and junit.xml for an error report into ``directory``."""
    from cleanpipe.io.output_guard import claim_report_files
    from cleanpipe.report import to_json

    d = Path(directory)
    claim_report_files(d, ["report.json", "junit.xml", "report.md"])
    err = report["error"]
    (d / "report.json").write_text(to_json(report), encoding="utf-8")
    (d / "junit.xml").write_text(render_junit(report), encoding="utf-8")
    (d / "report.md").write_text(
        f"# cleanpipe {report['command']}: stopped with exit code {err['exit_code']}"
        f" ({err['meaning']})\n\n{err['kind']}: {err['message']}\n", encoding="utf-8")
