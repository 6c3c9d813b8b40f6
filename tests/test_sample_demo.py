"""The bundled sample: reproducible from its generator, and every problem planted in it (as
listed in MANIFEST.md) is caught by the shipped pipeline, at the listed row, with the listed
code. The manifest is parsed here, so the corpus, the manifest and the pipelines cannot drift."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cleanpipe.cli import PIPELINES_DIR, SAMPLE_DIR, shipped_pipeline

ROOT = Path(__file__).resolve().parent.parent
# problems the reader itself catches, before any stage
READER_STAGE = "read"


@dataclass(frozen=True)
class Planted:
    problem: str
    file: str
    line: int
    pipeline: str
    stage: str
    code: str

    @property
    def row_id(self) -> str:
        return f"{self.file}:{self.line}"


def parse_manifest(text: str) -> list[Planted]:
    rows = []
    for line in text.splitlines():
        if not line.startswith("| ") or line.startswith(("| problem", "| ---")):
            continue
        # a problem may contain an escaped pipe
        cells = [c.strip().replace("\\|", "|")
                 for c in line.strip().strip("|").replace("\\|", "\x00").split("|")]
        cells = [c.replace("\x00", "|") for c in cells]
        problem, row, pipeline, stage, code = cells
        file, _, num = row.rpartition(":")
        rows.append(Planted(problem, file, int(num), pipeline, stage, code))
    return rows


PLANTED = parse_manifest((SAMPLE_DIR / "MANIFEST.md").read_text(encoding="utf-8"))


def test_manifest_parses_and_covers_every_form() -> None:
    assert len(PLANTED) >= 30
    files = {p.file for p in PLANTED}
    assert {"alpaca_en.jsonl", "alpaca_zh.jsonl", "chat.jsonl", "chat_openai.jsonl",
            "classification.jsonl"} <= files
    for p in PLANTED:
        assert (SAMPLE_DIR / p.file).is_file(), p
        assert (PIPELINES_DIR / f"{p.pipeline}.yaml").is_file(), p


def test_listed_lines_exist() -> None:
    for p in PLANTED:
        lines = (SAMPLE_DIR / p.file).read_text(encoding="utf-8").split("\n")
        assert 1 <= p.line <= len(lines) and lines[p.line - 1].strip(), p


def test_sample_is_reproducible(tmp_path: Path) -> None:
    """The committed corpus is exactly what tools/make_sample.py writes."""
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_sample.py"), str(tmp_path)],
                   check=True)
    for f in sorted(tmp_path.rglob("*")):
        if f.is_file():
            rel = f.relative_to(tmp_path)
            assert (SAMPLE_DIR / rel).read_bytes() == f.read_bytes(), rel


def test_sample_is_mixed_language_and_sized() -> None:
    en = (SAMPLE_DIR / "alpaca_en.jsonl").read_text(encoding="utf-8").splitlines()
    zh = (SAMPLE_DIR / "alpaca_zh.jsonl").read_text(encoding="utf-8").splitlines()
    chat = [json.loads(x) for f in ("chat.jsonl", "chat_openai.jsonl")
            for x in (SAMPLE_DIR / f).read_text(encoding="utf-8").splitlines()]
    assert len(en) + len(zh) + len(chat) >= 300
    assert {"conversations", "messages"} <= {k for r in chat for k in r}
    # U+3000 is kept in the Chinese sample as legitimate text, not planted as a problem
    assert any("\u3000" in line for line in zh)
    assert json.loads((SAMPLE_DIR / "labels.json").read_text()) == [
        "positive", "negative", "neutral"]


@cache
def caught(pipeline: str, file: str, out: str
           ) -> tuple[dict[str, set[tuple[str, str]]], dict, list[str]]:
    """Run a shipped pipeline on one sample file (a pipeline sees one data form at a time);
    (row_id -> {(stage, code)}, report, stage names)."""
    pipe = shipped_pipeline(pipeline)
    report = pipe.run(str(SAMPLE_DIR / file), out, overwrite=True, workers=1)
    found: dict[str, set[tuple[str, str]]] = {}
    ev = pq.read_table(Path(out) / "events.parquet").to_pylist()
    for e in ev:
        found.setdefault(e["row_id"], set()).add((e["stage"], e["code"]))
    for f in sorted((Path(out) / "quarantine").glob("*.parquet")):
        for q in pq.read_table(f).to_pylist():
            for code in q["_cleanpipe_reasons"]:
                found.setdefault(q["_cleanpipe_row_id"], set()).add((q["_cleanpipe_stage"],
                                                                     code))
    return found, report, [s.name for s in pipe.stages]


@pytest.fixture(scope="module")
def outdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sample_runs")


@pytest.mark.parametrize("planted", PLANTED, ids=[f"{p.row_id}-{p.code}" for p in PLANTED])
def test_planted_problem_is_caught(planted: Planted, outdir: Path) -> None:
    found, _, stages = caught(planted.pipeline, planted.file,
                              str(outdir / f"{planted.pipeline}-{planted.file}"))
    if planted.stage != READER_STAGE:
        assert planted.stage in stages, (
            f"{planted.pipeline}.yaml does not run {planted.stage}, which exists")
    assert (planted.stage, planted.code) in found.get(planted.row_id, set()), (
        f"{planted.problem}: {planted.row_id} not caught by {planted.stage}/{planted.code};"
        f" found {sorted(found.get(planted.row_id, set()))}")


COSMETIC = [p for p in PLANTED if "cosmetic" in p.problem]


@pytest.mark.parametrize("planted", COSMETIC, ids=[f"{p.row_id}-{p.code}" for p in COSMETIC])
def test_cosmetic_problem_is_only_flagged(planted: Planted, outdir: Path) -> None:
    """What the manifest calls cosmetic is recorded, and the row is kept as it was."""
    out = outdir / f"{planted.pipeline}-{planted.file}"
    caught(planted.pipeline, planted.file, str(out))
    events = [e for e in pq.read_table(out / "events.parquet").to_pylist()
              if e["row_id"] == planted.row_id]
    assert (planted.stage, planted.code) in {(e["stage"], e["code"]) for e in events}
    assert {e["action"] for e in events} == {"flag"}


RUNS = sorted({(p.pipeline, p.file) for p in PLANTED})


@pytest.mark.parametrize(("pipeline", "file"), RUNS, ids=[f"{p}-{f}" for p, f in RUNS])
def test_only_planted_rows_are_dropped(pipeline: str, file: str, outdir: Path) -> None:
    """No clean row of the sample is quarantined, and the totals add up."""
    out = outdir / f"{pipeline}-{file}"
    _, report, _ = caught(pipeline, file, str(out))
    t = report["totals"]
    assert t["kept"] + t["quarantined"] == t["read"]
    listed = {p.row_id for p in PLANTED if p.pipeline == pipeline}
    dropped = set()
    for f in (out / "quarantine").glob("*.parquet"):
        q = pq.read_table(f)
        if q.num_rows:
            dropped |= set(q.column("_cleanpipe_row_id").to_pylist())
    assert dropped <= listed, sorted(dropped - listed)
    assert t["quarantined"] == len(dropped)


def test_demo_keeps_legitimate_chinese_spacing_and_punctuation(outdir: Path) -> None:
    """U+3000 and full-width punctuation are legitimate Chinese text: the demo's text stages
    must leave them in every kept row."""
    out = outdir / "demo-alpaca_zh.jsonl"
    caught("demo", "alpaca_zh.jsonl", str(out))
    kept = pq.read_table(sorted((out / "data").glob("*.parquet"))).column("output").to_pylist()
    dropped = set()
    for f in (out / "quarantine").glob("*.parquet"):
        q = pq.read_table(f)
        if q.num_rows:
            dropped |= set(q.column("_cleanpipe_row_id").to_pylist())
    lines = (SAMPLE_DIR / "alpaca_zh.jsonl").read_text(encoding="utf-8").splitlines()
    src = [json.loads(x)["output"] for i, x in enumerate(lines, start=1)
           if f"alpaca_zh.jsonl:{i}" not in dropped]
    assert len(src) == len(kept)
    assert sum("\u3000" in t for t in kept) >= 20
    for ch in ("\u3000", "，", "。", "（", "）", "“", "”"):
        # repairs may add some (mojibake decodes to "。"); nothing may remove one
        assert sum(t.count(ch) for t in kept) >= sum(t.count(ch) for t in src), ch


def test_every_sample_file_is_package_data() -> None:
    """A wheel ships the whole sample (the tokenizer sits in a subfolder, which a plain
    ``sample/*`` pattern would miss)."""
    from pathlib import PurePosixPath

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = conf["tool"]["setuptools"]["package-data"]["cleanpipe"]
    pkg = SAMPLE_DIR.parent
    for f in sorted(SAMPLE_DIR.rglob("*")):
        if f.is_file() and "__pycache__" not in f.parts:
            rel = PurePosixPath(f.relative_to(pkg).as_posix())
            assert any(len(rel.parts) == len(PurePosixPath(p).parts) and rel.match(p)
                       for p in patterns), rel
