"""Every YAML, shell and Python block in README.md and docs/ is checked the way a user would
use it: pipelines and gate sections validate, cleanpipe command lines parse, the package is
installed the way a user really can, Python compiles."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from cleanpipe.cli import build_parser
from cleanpipe.gate import load_gate
from cleanpipe.spec import load_spec_text
from cleanpipe.stages.registry import stage_classes

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.S | re.M)


def blocks(lang: set[str]) -> list[Any]:
    out = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            if m.group(1) in lang:
                line = text.count("\n", 0, m.start()) + 1
                out.append(pytest.param(m.group(2), id=f"{doc.relative_to(REPO)}:{line}"))
    return out


def _known_codes() -> dict[str, list[str]]:
    return {name: list(cls.codes) for name, cls in stage_classes().items()}


@pytest.mark.parametrize("text", blocks({"yaml", "yml"}))
def test_yaml_block_validates(text: str) -> None:
    data = yaml.safe_load(text)
    if isinstance(data, list) and data and all(isinstance(d, dict) for d in data):
        if all("stage" in d for d in data):  # a list of stage entries
            load_spec_text(yaml.safe_dump({"name": "doc", "stages": data}), "snippet")
            return
        # CI workflow steps: their cleanpipe command lines must parse
        for step in data:
            for line in str(step.get("run", "")).splitlines():
                _check_command(line)
        return
    assert isinstance(data, dict), text
    if "stage" in data:
        load_spec_text(yaml.safe_dump({"name": "doc", "stages": [data]}), "snippet")
    elif set(data) == {"gate"}:
        gate = load_gate(data["gate"])
        assert gate.unknown_reasons(_known_codes()) == []
    elif "stages" in data:
        load_spec_text(text, "snippet")
    else:  # top-level keys of a pipeline shown on their own
        load_spec_text(yaml.safe_dump({"name": "doc", "stages": [], **data}), "snippet")


def _logical_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.replace("\\\n", " ").splitlines()]


def _check_command(line: str) -> None:
    line = line.split(" #", 1)[0].strip()
    if line.startswith("-- "):
        line = line[3:]
    if "cleanpipe " not in line or not line.startswith(("cleanpipe ", "-- cleanpipe")):
        return
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    words = list(lex)
    # the command ends where the shell's redirections, pipes and lists begin
    cut = next((i for i, w in enumerate(words) if set(w) <= set("|&;<>")), len(words))
    argv = words[1:cut]
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse's way of saying the command line is wrong
        raise AssertionError(f"does not parse: {line}") from exc


def _check_install(line: str) -> None:
    if not re.search(r"\bpip install\b", line) or "cleanpipe" not in line:
        return
    # There is no cleanpipe on a package index: a user installs it from the repository.
    targets = [a for a in shlex.split(line.split(" #", 1)[0]) if "cleanpipe" in a]
    for t in targets:
        assert t.startswith((".", "/", "git+")) or "@ git+" in t or t.startswith("-e"), (
            f"installs cleanpipe from an index that does not have it: {line}")


@pytest.mark.parametrize("text", blocks({"sh", "bash", "shell", "console"}))
def test_shell_block_commands_parse(text: str) -> None:
    for line in _logical_lines(text):
        _check_command(line)
        _check_install(line)
        for ref in re.findall(r"\bpipelines/[\w.-]+\.yaml", line):
            shipped = REPO / "cleanpipe" / ref
            if Path(ref).stem.startswith(("sft_", "pretrain", "classification", "demo")) and \
                    Path(ref).stem in {p.stem for p in (REPO / "cleanpipe" / "pipelines")
                                       .glob("*.yaml")}:
                assert shipped.is_file()


@pytest.mark.parametrize("text", blocks({"python", "py"}))
def test_python_block_compiles(text: str) -> None:
    compile(text, "<snippet>", "exec")


def test_example_workflow_installs_and_runs_cleanpipe_as_a_user_can() -> None:
    wf = yaml.safe_load((REPO / ".github" / "workflows" / "example-gate.yml").read_text("utf-8"))
    runs = [step.get("run", "") for job in wf["jobs"].values() for step in job["steps"]]
    lines = [ln for r in runs for ln in _logical_lines(r)]
    assert any("pip install" in ln for ln in lines)
    for line in lines:
        _check_install(line)
        _check_command(line)


def test_snippets_were_found() -> None:
    assert len(blocks({"yaml", "yml"})) >= 5 and len(blocks({"sh", "bash"})) >= 5


def test_shipped_pipelines_validate_from_the_shell() -> None:
    from cleanpipe.cli import main

    for p in sorted((REPO / "cleanpipe" / "pipelines").glob("*.yaml")):
        assert main(["validate", str(p)]) == 0, p
