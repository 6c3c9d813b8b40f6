"""The planted-defect evaluation, small: every shipped pipeline on a few hundred real rows
per corpus repairs, drops or flags each planted defect (recall >= 0.97 per class), changes at
most 0.5% of the clean rows and no clean row's trained token sequence.

The full version is ``benchmarks/bench_quality.py`` (``make bench``); this runs its
``evaluate`` with fewer rows and one worker.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, realdata

sys.path.insert(0, str(REPO / "benchmarks"))

import bench_quality as bq
import quality_corpus as qc

pytestmark = pytest.mark.realdata

ROWS = 240
SHIPPED = sorted(p.stem for p in bq.PIPELINES.glob("*.yaml"))


class Evaluation(tuple):
    """``evaluate``'s (results, unmatched), shown short in pytest's failure header."""

    def __repr__(self) -> str:
        return f"<{len(self[0])} pipeline/corpus runs>"


@pytest.fixture(scope="module")
def evaluation(shared_data: Path) -> Evaluation:
    realdata("tokenizers", "qwen3", "tokenizer.json")
    return Evaluation(bq.evaluate(ROWS, workers=1, root=shared_data))


def _explain(results: list[bq.Result]) -> str:
    lines = []
    for r in results:
        for f in r.failures():
            lines.append(f"{r.pipeline}/{r.corpus}: {f}")
            cls = f.split(":")[0] if ":" in f else "clean"
            lines += [f"    {ex}" for ex in r.misses.get(cls, r.misses.get("clean", []))]
    return "\n".join(lines)


def test_every_shipped_pipeline_has_a_corpus(evaluation):
    _, unmatched = evaluation
    assert unmatched == [], f"no planted corpus matches: {unmatched}"


@pytest.mark.parametrize("pipeline", SHIPPED)
def test_shipped_pipeline_meets_the_bounds(evaluation, pipeline):
    results = [r for r in evaluation[0] if r.pipeline == pipeline]
    assert results, f"{pipeline}: no planted corpus matches its fields and stages"
    for r in results:
        assert r.recall, f"{pipeline}/{r.corpus}: nothing planted"
    assert not any(r.failures() for r in results), "\n" + _explain(results)


def test_the_judge_fails_a_pipeline_that_does_nothing(tmp_path, shared_data):
    """The bounds can fail: with no stages, every repair and drop class is missed while the
    clean rows stay as they are."""
    realdata("tokenizers", "qwen3", "tokenizer.json")
    root = shared_data
    trainer = bq.Trainer(root / "tokenizers" / "qwen3")
    corpus = bq.build_corpus("alpaca_en", root, 120, trainer.token_len)
    nothing = tmp_path / "nothing.yaml"
    nothing.write_text("name: nothing\nfields: [instruction, input, output]\nstages: []\n")
    result = bq.run_one(nothing, corpus, trainer, tmp_path)
    missed = {c for c, (hits, n) in result.recall.items() if hits < n}
    expected_missed = {r.cls for r in corpus.rows if r.expect in ("repaired", "dropped")
                       and r.cls not in result.not_covered}  # no stage, no claim
    assert expected_missed and expected_missed <= missed
    assert result.clean_changed == result.token_changed == 0


def test_corpus_is_deterministic_and_its_clean_rows_are_clean(shared_data):
    realdata("sft_llamafactory_demos", "alpaca_zh_demo.json")
    root = shared_data
    trainer = bq.Trainer(realdata("tokenizers", "qwen3"))
    a = bq.build_corpus("alpaca_zh", root, 120, trainer.token_len)
    b = bq.build_corpus("alpaca_zh", root, 120, trainer.token_len)
    assert [(r.qid, r.rec, r.cls) for r in a.rows] == [(r.qid, r.rec, r.cls) for r in b.rows]
    clean = [r for r in a.rows if r.cls == "clean"]
    assert clean and all(qc.is_clean_text(t) for r in clean
                         for t in (r.rec["instruction"], r.rec["output"]))
    # Latin-1 mojibake of Chinese carries C1 characters: the evidence ftfy needs
    lat = [r for r in a.rows if r.cls == "mojibake_latin1"]
    assert lat and all(any("\x80" <= ch <= "\x9f" for v in r.rec.values() for ch in v or "")
                       for r in lat)
