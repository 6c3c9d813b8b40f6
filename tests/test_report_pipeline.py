"""End to end: the engine's report of a real run validates against the schema, renders, and
the gate and JUnit agree with counts computed independently from the data."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import polars as pl
import pyarrow as pa
import pytest

from cleanpipe import Pipeline
from cleanpipe.cli import SAMPLE_DIR
from cleanpipe.gate import GateConfig
from cleanpipe.report import load_report
from cleanpipe.report.schema import validate
from cleanpipe.stages.invisible_chars import InvisibleChars
from cleanpipe.stages.trainable_tokens import TrainableTokens
from tests.conftest import realdata
from tests.guard_data import t0_guard_stages

EOS = "<|endoftext|>"
SAMPLE_TOKENIZER = SAMPLE_DIR / "tokenizer"


def _t0_frame(folder) -> pl.DataFrame:
    return pl.concat([pl.read_ndjson(p) for p in sorted(folder.glob("*.jsonl"))
                      if p.stat().st_size], how="diagonal_relaxed")


def _expected_empty(df: pl.DataFrame) -> int:
    """Completions that are nothing but the ``<|endoftext|>`` literal."""
    return int(df.select((pl.col("completion").str.replace_all(EOS, "", literal=True) == "")
                         .sum()).item())


def _count(df: pl.DataFrame, char: str) -> int:
    """Occurrences of ``char`` in the prompts and completions."""
    return int(df.select(pl.sum_horizontal(pl.col(c).str.count_matches(char, literal=True)
                                           .sum() for c in ("prompt", "completion"))).item())


@pytest.fixture(scope="module")
def t0_run(tmp_path_factory, shared_data):
    folder = realdata("sft_self_instruct_t0_50k", "data_per_template")
    out = tmp_path_factory.mktemp("t0") / "out"
    stages = [InvisibleChars(), *t0_guard_stages(realdata("tokenizers", "qwen3"))]
    pipe = Pipeline(stages=stages, fields=["prompt", "completion"])
    pipe.spec.gate = GateConfig(max_dropped_fraction=0.05, never=["no_trainable_tokens"],
                                max_reason_count={"invisible_chars/bidi_control": 10_000},
                                min_rows_out=50_000)
    report = pipe.run(folder, out, workers=1)
    return _t0_frame(folder), out, report


@pytest.mark.realdata
def test_real_run_report_validates_and_matches_the_data(t0_run) -> None:
    df, out, report = t0_run
    validate(report)
    assert load_report(out / "report.json") == json.loads(json.dumps(report))
    empty = _expected_empty(df)
    assert empty > 1000  # PROVENANCE: ~1,400 completions empty once <|endoftext|> is removed
    reasons = {(r["stage"], r["code"]): r for r in report["reasons"]}
    assert reasons[("trainable_tokens", "no_trainable_tokens")]["rows"] == empty
    assert report["totals"]["quarantined"] == empty
    assert report["totals"]["read"] == 55185


@pytest.mark.realdata
def test_real_run_verdict_and_junit(t0_run) -> None:
    _, out, report = t0_run
    v = report["verdict"]
    by_name = {r["name"]: r["passed"] for r in v["rules"]}
    assert by_name["never[no_trainable_tokens]"] is False
    assert by_name["max_dropped_fraction"] is True  # ~2.5% < 5%
    assert by_name["min_rows_out"] is True
    assert (v["passed"], v["exit_code"]) == (False, 1)
    root = ET.parse(out / "junit.xml").getroot()
    cases = {c.get("name"): c.find("failure") is None for c in root.iter("testcase")}
    assert cases == by_name


@pytest.mark.realdata
def test_real_run_renders(t0_run) -> None:
    df, out, report = t0_run
    md = (out / "report.md").read_text("utf-8")
    assert "❌ gate FAILED" in md and "no\\_trainable\\_tokens" in md
    page = (out / "report.html").read_text("utf-8")
    assert 'aria-label="Characters per row"' in page
    # t0 holds left-to-right marks (no zero-width space): counted in the data directly
    lrm = _count(df, "\u200e")
    assert lrm > 0 and _count(df, "\u200b") == 0
    (inv,) = [s for s in report["stages"] if s["name"] == "invisible_chars"]
    assert inv["metrics"]["codepoints"]["U+200E"] == lrm
    assert "U+200E LEFT-TO-RIGHT MARK" in page and "U+200B" not in page


def test_small_fixture_run_with_invisible_characters(tmp_path) -> None:
    table = pa.table({"prompt": ["hi\u200b there", "a", "b", "c"],
                      "completion": ["ok", "", "fine\u200b\u200b", "yes"]})
    trainable = TrainableTokens(tokenizer=str(SAMPLE_TOKENIZER), template="{prompt}{completion}",
                                response_field="completion")
    pipe = Pipeline(stages=[InvisibleChars(), trainable], fields=["prompt", "completion"])
    pipe.spec.gate = GateConfig(max_reason_count={"zero_width": 1})
    report = pipe.run(table, None, workers=1, report_dir=tmp_path)
    validate(report)
    assert report["totals"] == {"read": 4, "kept": 3, "quarantined": 1, "changed": 2,
                                "flagged": 0, "failed": 0}
    (zw,) = [s for s in report["stages"] if s["name"] == "invisible_chars"]
    assert zw["metrics"]["codepoints"] == {"U+200B": 3}
    assert report["verdict"]["exit_code"] == 1  # zero_width hit 2 rows > 1
    page = (tmp_path / "report.html").read_text("utf-8")
    assert "hi⟨U+200B⟩ there" in page and "U+200B ZERO WIDTH SPACE" in page


def test_dedup_stage_report_validates_and_renders_its_clusters(tmp_path) -> None:
    texts = ["same text"] * 3 + ["other"] * 2 + [f"unique {i}" for i in range(5)]
    pipe = Pipeline(stages=[{"stage": "exact_dedup"}], fields=["text"])
    pipe.spec.gate = GateConfig(max_reason_count={"exact_duplicate": 2})
    report = pipe.run(pa.table({"text": texts}), None, workers=1, report_dir=tmp_path)
    validate(report)
    (dd,) = report["stages"]
    assert dd["dropped"] == 3 and report["totals"]["kept"] == 7
    assert report["verdict"]["exit_code"] == 1  # 3 duplicates > 2
    page = (tmp_path / "report.html").read_text("utf-8")
    assert "<h3>exact_dedup</h3>" in page
    # {size: count} maps become bar charts, lists of clusters tables
    checked = 0
    for key, value in dd["section"].items():
        if isinstance(value, dict) and value and all(
                isinstance(v, (int, float)) for v in value.values()):
            assert f'aria-label="exact_dedup: {key}"' in page
            checked += 1
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            assert f"<h4>exact_dedup: {key}</h4>" in page
            checked += 1
    assert checked >= 2, dd["section"]
