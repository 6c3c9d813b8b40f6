"""The report's "after" token figures are those of the rows the run writes.

"Before" counts the rows reaching a token stage; "after" the rows written to the cleaned
dataset, the figure a user compares with the trainer's log, even where a global dedup after
the token stage still drops rows (as in every shipped SFT pipeline), and where a later stage
rewrites a row the token stage measured. The oracle tokenizes the written rows with the
``tokenizers`` library (tests/written_totals.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from cleanpipe import Pipeline
from cleanpipe.contract import published as pub
from cleanpipe.contract.stage import Action
from cleanpipe.stages.context_length import ContextLength
from cleanpipe.stages.exact_dedup import ExactDedup
from cleanpipe.stages.trainable_tokens import TrainableTokens
from cleanpipe.templating.word_tokenizer import word_tokenizer_file
from tests.conftest import realdata
from tests.written_totals import (
    GROWN,
    TEMPLATE,
    WINDOW,
    after_figures,
    oracle,
    pipeline,
    write_corpus,
    written_rows,
)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> str:
    return word_tokenizer_file(str(tmp_path_factory.mktemp("tok")))


@dataclass
class Run:
    src: Path
    out: Path
    report: dict[str, Any]
    written: list[dict[str, Any]]


def _run(pipe: Pipeline, src: Path, out: Path) -> Run:
    report = pipe.run(src, out / "out", workers=1, report_dir=out / "report")
    return Run(src, out, report, written_rows(out / "out"))


@pytest.fixture(scope="module")
def exact(tokenizer: str, tmp_path_factory) -> Run:
    """The pipeline with ``exact_counts: true``: every "after" figure exact."""
    d = tmp_path_factory.mktemp("exact")
    return _run(pipeline(tokenizer), write_corpus(d / "in.jsonl"), d)


def test_after_totals_count_the_rows_written_after_dedup(tokenizer: str, exact: Run) -> None:
    src, report, written = exact.src, exact.report, exact.written
    stages = {s["name"]: s for s in report["stages"]}
    # the fixture's point: dedup drops rows the token stages passed on, one was truncated
    dropped_later = stages["exact_dedup"]["dropped"] + stages["minhash_dedup"]["dropped"]
    assert stages["exact_dedup"]["dropped"] > 0 and stages["minhash_dedup"]["dropped"] > 0
    assert stages["context_length"]["changed"] > 0
    assert len(written) == report["totals"]["kept"] == stages["trainable_tokens"][
        "rows_out"] - dropped_later
    want = oracle(tokenizer, written)
    got = after_figures(report)
    assert got == {**want, "bounded": (0, 0)}
    assert sum(got["hist"]) == len(written)
    # the run-level chart is the same, kept rows only
    assert report["distributions"][pub.TOKENS_AFTER]["counts"] == want["hist"]
    # before: every row that reached the stage, untruncated
    reached = [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines()]
    assert stages["context_length"]["totals"][pub.TOTAL_TOKENS_BEFORE]["value"] == oracle(
        tokenizer, reached)["total"] > want["total"]


def test_a_row_rewritten_after_the_token_stages_is_counted_as_written(
        tokenizer: str, tmp_path) -> None:
    run = _run(pipeline(tokenizer, grow=True), write_corpus(tmp_path / "in.jsonl"), tmp_path)
    grown = [r for r in run.written if r["output"].endswith(GROWN)]
    assert len(grown) == 2
    # one grown row is now over the window: counted whole, as written, not truncated
    assert max(len(TEMPLATE.format(**r).split()) for r in grown) > WINDOW
    assert after_figures(run.report) == {**oracle(tokenizer, run.written), "bounded": (0, 0)}


def test_the_figures_never_reach_the_written_rows(exact: Run) -> None:
    """The per-row figures travel beside the rows, never as columns: the data written has
    the input's columns only."""
    files = list((exact.out / "out" / "data").glob("*.parquet"))
    assert files
    for f in files:
        assert pq.read_schema(f).names == ["prompt", "output"]


def test_report_labels_what_before_and_after_count(exact: Run) -> None:
    html = (exact.out / "report" / "report.html").read_text(encoding="utf-8")
    md = (exact.out / "report" / "report.md").read_text(encoding="utf-8")
    for page in (html, md):
        assert "before: rows reaching the stage" in page
        assert "after: rows written" in page


def test_upper_bounds_stay_marked_over_the_rows_written(tokenizer: str, exact: Run,
                                                       tmp_path) -> None:
    """Default ``exact_counts: false``: rows placed by a bound keep their mark, and the
    bounded total is at least the exact one, over the same written rows."""
    fast = _run(pipeline(tokenizer, exact=False), exact.src, tmp_path)
    assert fast.written == exact.written
    f, e = after_figures(fast.report), after_figures(exact.report)
    assert 0 < f["bounded"][0] <= len(fast.written) and e["bounded"] == (0, 0)
    assert f["total"] >= e["total"]
    assert sum(fast.report["stages"][0]["distributions"][pub.TOKENS_AFTER]["bounded"]) == \
        f["bounded"][0]


@pytest.mark.realdata
def test_after_totals_equal_the_trainers_count_of_the_written_rows(tmp_path) -> None:
    """Real alpaca rows and the Qwen3 tokenizer, some of them twice: the after figures
    are the trainer's own count (``bench_quality.Trainer``: jinja2 and tokenizers) of the
    rows written."""
    import sys

    from tests.conftest import REPO

    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_quality as bq
    import quality_corpus as qc

    tokenizer = realdata("tokenizers", "qwen3")
    recs = json.loads(realdata("sft_llamafactory_demos", "alpaca_en_demo.json")
                      .read_text(encoding="utf-8"))
    rows = [{k: r[k] for k in ("instruction", "input", "output")} for r in recs[:60]]
    rows += rows[:15]  # duplicates: exact_dedup drops them after the token stages
    src = tmp_path / "alpaca.jsonl"
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                   encoding="utf-8")
    window = 256
    stages = [ContextLength(tokenizer=str(tokenizer), max_length=window, exact_counts=True,
                            action=Action.FLAG),
              TrainableTokens(tokenizer=str(tokenizer), max_length=window, exact_counts=True),
              ExactDedup()]
    report = Pipeline(stages=stages, fields=["instruction", "input", "output"]).run(
        src, tmp_path / "out", workers=1)
    written = written_rows(tmp_path / "out")
    assert len(written) == 60 == report["totals"]["kept"]
    trainer = bq.Trainer(tokenizer)
    seqs = [trainer.sequence(qc.ALPACA, r) for r in written]
    cl, tt = report["stages"][0]["totals"], report["stages"][1]["totals"]
    assert cl[pub.TOTAL_TOKENS_AFTER] == {"value": sum(len(s[0]) for s in seqs),
                                          "bounded_rows": 0}
    assert tt[pub.SUPERVISED_TOKENS_AFTER] == {"value": sum(sum(s[1][:window]) for s in seqs),
                                               "bounded_rows": 0}
    everyone = [trainer.sequence(qc.ALPACA, r) for r in rows]
    assert cl[pub.TOTAL_TOKENS_BEFORE]["value"] == sum(len(s[0]) for s in everyone)

