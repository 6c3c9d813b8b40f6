"""CLI: run/validate/stages/check, exit codes and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cleanpipe.cli import main


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    p = tmp_path / "in.jsonl"
    p.write_text("".join(json.dumps({"instruction": f"q{i % 3}", "output": "a"}) + "\n"
                         for i in range(6)))
    return p


def _pipe(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(body)
    return p


def test_run_writes_and_prints_summary(tmp_path: Path, corpus: Path, capsys) -> None:
    pipe = _pipe(tmp_path, "name: t\nfields: [instruction, output]\nstages:\n"
                           "  - stage: exact_dedup\n")
    out = tmp_path / "out"
    assert main(["run", str(pipe), "-i", str(corpus), "-o", str(out), "-q"]) == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["totals"] == {**rep["totals"], "read": 6, "kept": 3, "quarantined": 3}
    assert main(["run", str(pipe), "-i", str(corpus), "-o", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["run", str(pipe), "-i", str(corpus), "-o", str(out), "--overwrite"]) == 0
    assert "kept + quarantined == read: True" in capsys.readouterr().out


def test_config_errors_are_one_line_with_file_line_and_guess(tmp_path: Path, capsys) -> None:
    pipe = _pipe(tmp_path, "name: t\nstages:\n  - stage: exact_dedupe\n")
    assert main(["validate", str(pipe)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"{pipe}:3" in err and "did you mean 'exact_dedup'" in err
    pipe = _pipe(tmp_path, "name: t\nstages:\n  - stage: exact_dedup\n    kep: last\n")
    assert main(["validate", str(pipe)]) == 2
    err = capsys.readouterr().err
    assert f"{pipe}:4" in err and "stages[0].kep" in err and "did you mean 'keep'" in err
    pipe = _pipe(tmp_path, "name: t\nstages:\n  - stage: exact_dedup\n    keep: newest\n")
    assert main(["validate", str(pipe)]) == 2
    assert "'first', 'last' or 'longest'" in capsys.readouterr().err
    assert "Traceback" not in err


def test_unreadable_input_exit_3(tmp_path: Path, capsys) -> None:
    pipe = _pipe(tmp_path, "name: t\nstages: []\n")
    assert main(["check", str(pipe), "-i", str(tmp_path / "missing.jsonl"), "-q"]) == 3
    assert "missing.jsonl: no such file" in capsys.readouterr().err


def test_stages_lists_every_stage(capsys) -> None:
    from cleanpipe.stages.registry import stage_classes

    assert main(["stages"]) == 0
    out = capsys.readouterr().out
    for name in stage_classes():
        assert f"\n{name}  (" in "\n" + out


def test_stages_shows_required_and_plain_types(capsys) -> None:
    assert main(["stages"]) == 0
    out = capsys.readouterr().out
    for junk in ("PydanticUndefined", "<function", " at 0x", "Annotated"):
        assert junk not in out
    assert "    tokenizer: str (required)" in out  # max_length became optional with trainer:
    assert "    patterns: dict[str, str] (required)" in out


def test_stages_describes_parameters_from_their_docstrings(capsys) -> None:
    assert main(["stages"]) == 0
    out = capsys.readouterr().out
    # a docstring under a field of the base class, of the stage itself, and a description
    # given in code
    assert "    action: Action | None = None — Action for every code of this stage" in out
    assert ("    threshold: float = 0.8, > 0.0 and < 1.0 — Jaccard similarity from which two"
            " rows are duplicates.") in out
    assert "    ignore_case: bool = False — match without regard to case" in out


def test_importing_the_stages_parses_no_source() -> None:
    """Pydantic's ``use_attribute_docstrings`` read and parsed every stage class's source
    at import (~0.2 s in each process); the docstrings are read only when shown."""
    code = ("import ast, sys\n"
            "seen = []\n"
            "real = ast.parse\n"
            "def parse(src, *a, **k):\n"
            "    seen.append(str(src).lstrip()[:6])\n"
            "    return real(src, *a, **k)\n"
            "ast.parse = parse\n"
            "from cleanpipe.stages.registry import stage_classes\n"
            "stage_classes()\n"
            "print(sum(s.startswith('class ') for s in seen))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "0"


def test_gate_reason_typo_is_a_config_error(tmp_path: Path, capsys) -> None:
    pipe = _pipe(tmp_path, "name: t\nstages:\n  - stage: exact_dedup\n"
                           "gate:\n  never: [exact_duplicat]\n")
    assert main(["validate", str(pipe)]) == 2
    err = capsys.readouterr().err
    assert "'exact_duplicat'" in err and "did you mean 'exact_duplicate'" in err
