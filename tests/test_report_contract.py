"""The stage-to-report contract: every shipped pipeline's report.json holds what its stages
declare they publish (``Stage.publishes``), token histograms count every row, the figures do
not depend on workers or batch sizes, and report.html draws the token and label charts.

The shipped pipelines run on a few hundred real rows of their kind, with the real Qwen3
tokenizer, as ``benchmarks/bench_quality.py`` prepares them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from cleanpipe import Pipeline
from cleanpipe.contract import published as pub
from cleanpipe.report import load_report, validate
from cleanpipe.report.schema import load_schema
from cleanpipe.stages.context_length import ContextLength
from cleanpipe.stages.registry import stage_classes
from cleanpipe.stages.trainable_tokens import TrainableTokens
from tests.conftest import REPO, realdata

sys.path.insert(0, str(REPO / "benchmarks"))

import bench_quality as bq
import quality_corpus as qc

ROWS = 120
SHIPPED = sorted(p.stem for p in bq.PIPELINES.glob("*.yaml"))


def _published(report: dict[str, Any], i: int) -> dict[str, Any]:
    st = report["stages"][i]
    return {**st.get("distributions", {}), **st.get("totals", {})}


def _rows_without_sequence(stage: dict[str, Any]) -> int:
    return stage["codes"].get("render_error", {}).get("rows", 0)


# ----------------------------------------------------------------------- the declaration


def test_schema_lists_every_published_name_with_its_kind() -> None:
    defs = load_schema()["$defs"]
    dists = defs["published_distributions"]["properties"]
    totals = defs["published_totals"]["properties"]
    assert set(dists) | set(totals) == set(pub.NAMES)
    for name, kind in pub.NAMES.items():
        ref = (dists if name in dists else totals)[name]["$ref"].rsplit("/", 1)[-1]
        assert ref == kind.value, name


def test_every_stage_publishes_only_declared_names() -> None:
    for name, cls in stage_classes().items():
        assert cls.publishes <= set(pub.NAMES), name
    # the stages that measure token lengths say so
    assert pub.TOKENS_BEFORE in ContextLength.publishes
    assert pub.SUPERVISED_TOKENS_AFTER in TrainableTokens.publishes


# ----------------------------------------------------------------------- shipped pipelines


@pytest.fixture(scope="module")
def shipped_runs(shared_data: Path, tmp_path_factory) -> dict[str, tuple[Pipeline, dict, Path]]:
    """Each shipped pipeline, run once on real rows of its kind: (pipeline, report, dir)."""
    tokenizer = realdata("tokenizers", "qwen3")
    trainer = bq.Trainer(tokenizer)
    work = tmp_path_factory.mktemp("shipped")
    out: dict[str, tuple[Pipeline, dict, Path]] = {}
    corpora: dict[str, bq.Corpus] = {}
    for name in SHIPPED:
        src = bq.PIPELINES / f"{name}.yaml"
        spec = yaml.safe_load(src.read_text(encoding="utf-8"))
        (corpus_name,) = bq.corpora_for(spec)[:1]
        if corpus_name not in corpora:
            corpora[corpus_name] = bq.build_corpus(corpus_name, shared_data, ROWS,
                                                   trainer.token_len)
        corpus = corpora[corpus_name]
        d = work / name
        d.mkdir()
        yaml_path = bq.prepared_pipeline(src, tokenizer, corpus.labels_file, d)
        data = d / "corpus.jsonl"
        bq.write_corpus(corpus, data, bq.extra_columns(spec))
        pipe = Pipeline.from_yaml(yaml_path)
        pipe.run(data, None, workers=1, report_dir=d / "report")
        out[name] = (pipe, load_report(d / "report"), d / "report")
    return out


@pytest.mark.realdata
@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_report_holds_what_its_stages_declare(shipped_runs, name: str) -> None:
    pipe, report, _ = shipped_runs[name]
    validate(report)
    assert report["totals"]["read"] > 0
    for i, stage in enumerate(pipe.spec.stages):
        entry = report["stages"][i]
        assert entry["name"] == stage.name
        assert set(_published(report, i)) == set(stage.publishes), stage.name
        for key in (pub.TOKENS_BEFORE, pub.TOKENS_AFTER):
            if key not in stage.publishes:
                continue
            hist = entry["distributions"][key]
            assert hist["edges"] == sorted(hist["edges"])
            assert len(hist["counts"]) == len(hist["edges"]) == len(hist["bounded"])
            assert all(b <= c for b, c in zip(hist["bounded"], hist["counts"], strict=True))
        if pub.TOKENS_BEFORE in stage.publishes:
            # every row that reached the stage with a sequence is in a bucket
            measured = entry["rows_in"] - _rows_without_sequence(entry)
            assert sum(entry["distributions"][pub.TOKENS_BEFORE]["counts"]) == measured > 0
            # after: the rows written (later stages, the dedups, drop some it passed on)
            assert sum(entry["distributions"][pub.TOKENS_AFTER]["counts"]) == \
                report["totals"]["kept"] <= entry["rows_out"]
        if pub.ROWS_MEASURED in stage.publishes:
            totals = entry["totals"]
            assert totals[pub.ROWS_MEASURED]["value"] == measured
            assert totals[pub.SHARE_OVER_WINDOW]["value"] == pytest.approx(
                totals[pub.ROWS_OVER_WINDOW]["value"] / measured, abs=1e-6)
        if pub.LABELS in stage.publishes:
            labels = entry["distributions"][pub.LABELS]
            invalid = sum(entry["codes"].get(c, {}).get("rows", 0)
                          for c in ("unknown_label", "null_label"))
            assert sum(labels.values()) == entry["rows_in"] - invalid > 0
            assert report["distributions"]["labels"] == labels
    # per text field: every read row's string as read, every kept row's after cleaning
    fields = report["distributions"]["fields"]
    unreadable = sum(r["rows"] for r in report["reasons"]
                     if r["stage"] == "read" and r["action"] == "drop")
    for f in pipe.spec.fields or []:
        assert fields["before"][f]["strings"] == report["totals"]["read"] - unreadable, f
        assert fields["after"][f]["strings"] == report["totals"]["kept"], f
        assert 0 < fields["after"][f]["max_chars"] <= fields["after"][f]["chars"], f
    assert fields["before"] and set(fields["after"]) <= set(fields["before"])
    # the run-level charts come from the first stage publishing each
    for key in (pub.TOKENS_BEFORE, pub.TOKENS_AFTER, pub.LABELS):
        first = next((i for i, s in enumerate(pipe.spec.stages) if key in s.publishes), None)
        if first is None:
            assert key not in report["distributions"]
        else:
            assert report["distributions"][key] == report["stages"][first]["distributions"][key]


@pytest.mark.realdata
def test_dedup_memory_figures_are_diagnostics_not_stage_details(shipped_runs) -> None:
    _, report, _ = shipped_runs["sft_alpaca"]
    dedup = [s for s in report["stages"] if s["name"] in ("exact_dedup", "minhash_dedup")]
    assert dedup
    for s in dedup:
        assert pub.MEMORY not in s["section"]
        assert s["diagnostics"][pub.MEMORY]["names_and_snippets_bytes_per_row"] > 0


# ----------------------------------------------------------------------- exact figures


def _alpaca_rows(n: int) -> list[dict[str, str]]:
    """The first ``n`` rows of LLaMA-Factory's alpaca demos, Chinese then English."""
    recs = []
    for lang in ("zh", "en"):
        recs += json.loads(realdata("sft_llamafactory_demos", f"alpaca_{lang}_demo.json")
                           .read_text(encoding="utf-8"))
    return [{k: r[k] for k in ("instruction", "input", "output")} for r in recs[:n]]


def _jsonl(rows: list[dict[str, Any]], path: Path) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


@pytest.mark.realdata
def test_exact_totals_equal_the_trainers_own_count(tmp_path) -> None:
    """With ``exact_counts``, total and supervised tokens are the figures a trainer computes
    (``bench_quality.Trainer``: the tokenizers library and jinja2, nothing of cleanpipe's)."""
    tokenizer = realdata("tokenizers", "qwen3")
    rows = _alpaca_rows(200)
    window = 256
    stages = [ContextLength(tokenizer=str(tokenizer), max_length=window, exact_counts=True,
                            action="flag"),
              TrainableTokens(tokenizer=str(tokenizer), max_length=window, exact_counts=True)]
    report = Pipeline(stages=stages, fields=["instruction", "input", "output"]).run(
        _jsonl(rows, tmp_path / "alpaca.jsonl"), None, workers=1)
    trainer = bq.Trainer(tokenizer)
    seqs = [trainer.sequence(qc.ALPACA, r) for r in rows]
    lengths = [len(s[0]) for s in seqs]
    cl, tt = report["stages"][0]["totals"], report["stages"][1]["totals"]
    assert cl[pub.TOTAL_TOKENS_BEFORE] == {"value": sum(lengths), "bounded_rows": 0}
    assert cl[pub.ROWS_OVER_WINDOW]["value"] == sum(n > window for n in lengths) > 0
    untruncated = sum(sum(s[1]) for s in seqs)
    within = sum(sum(s[1][:window]) for s in seqs)
    assert tt[pub.SUPERVISED_TOKENS_BEFORE] == {"value": untruncated, "bounded_rows": 0}
    assert tt[pub.SUPERVISED_TOKENS_AFTER] == {"value": within, "bounded_rows": 0}
    assert within < untruncated  # the window cut some answers


@pytest.mark.realdata
def test_rows_proven_short_are_placed_by_a_sound_bound(tmp_path) -> None:
    tokenizer = str(realdata("tokenizers", "qwen3"))
    rows = _jsonl(_alpaca_rows(200), tmp_path / "alpaca.jsonl")
    fields = ["instruction", "input", "output"]

    def totals(exact: bool) -> dict[str, Any]:
        stages = [ContextLength(tokenizer=tokenizer, max_length=4096, exact_counts=exact),
                  TrainableTokens(tokenizer=tokenizer, max_length=4096, exact_counts=exact)]
        return Pipeline(stages=stages, fields=fields).run(rows, None, workers=1)

    fast, exact = totals(False), totals(True)
    f_hist = fast["stages"][0]["distributions"][pub.TOKENS_BEFORE]
    e_hist = exact["stages"][0]["distributions"][pub.TOKENS_BEFORE]
    assert sum(f_hist["counts"]) == sum(e_hist["counts"]) == 200
    assert sum(f_hist["bounded"]) > 0 and sum(e_hist["bounded"]) == 0
    # a bound never places a row below its true bucket: cumulative counts dominate
    f_cum = e_cum = 0
    for f, e in zip(f_hist["counts"], e_hist["counts"], strict=True):
        f_cum, e_cum = f_cum + f, e_cum + e
        assert f_cum <= e_cum
    for s in (0, 1):
        for key, t in fast["stages"][s]["totals"].items():
            if t["bounded_rows"]:
                assert t["value"] >= exact["stages"][s]["totals"][key]["value"], key


# ----------------------------------------------------------------------- merging


@pytest.mark.realdata
def test_published_figures_do_not_depend_on_workers_or_batches(tmp_path) -> None:
    tokenizer = str(realdata("tokenizers", "qwen3"))
    data = _jsonl(_alpaca_rows(240), tmp_path / "alpaca.jsonl")
    yaml_text = (
        "fields: [instruction, input, output]\nbatch_size: BATCH\nstages:\n"
        f"  - stage: context_length\n    tokenizer: {tokenizer}\n    max_length: 160\n"
        "    actions: {too_long: fix}\n"
        f"  - stage: trainable_tokens\n    tokenizer: {tokenizer}\n    max_length: 160\n"
        "  - stage: exact_dedup\n")
    seen = []
    for workers, bs in ((1, 240), (2, 25), (1, 25)):
        y = tmp_path / f"p{workers}_{bs}.yaml"
        y.write_text(yaml_text.replace("BATCH", str(bs)), encoding="utf-8")
        report = Pipeline.from_yaml(y).run(data, None, workers=workers)
        assert report["timing"]["workers"] == workers
        seen.append(([(s["distributions"], s["totals"], s["metrics"])
                      for s in report["stages"]], report["distributions"]))
    assert all(s == seen[0] for s in seen[1:])
    cl = seen[0][0][0]
    assert cl[2]["truncated"] > 0 and sum(cl[0][pub.TOKENS_AFTER]["counts"]) == 240


# ----------------------------------------------------------------------- report.html
# (the headless Chromium, ``browser``, is a fixture of tests/conftest.py)



@pytest.mark.realdata
@pytest.mark.browser
def test_report_html_draws_the_published_charts(shipped_runs, browser) -> None:
    for name in SHIPPED:
        pipe, _, report_dir = shipped_runs[name]
        page = browser.new_page()
        page.goto((report_dir / "report.html").as_uri(), wait_until="load")
        charts = {c["label"]: c for c in page.eval_on_selector_all(
            "svg.plot", """els => els.map(svg => ({
                label: svg.getAttribute('aria-label'),
                h: svg.getBoundingClientRect().height,
                bars: [...svg.querySelectorAll('rect')].filter(b => {
                    const q = b.getBoundingClientRect();
                    return q.width > 0 && q.height > 0; }).length}))""")}
        declared = set().union(*(s.publishes for s in pipe.spec.stages))
        for label, key in (("Tokens per row", pub.TOKENS_BEFORE),
                           ("Rows per label", pub.LABELS)):
            if key in declared:
                assert label in charts, f"{name}: no {label!r} chart"
                assert charts[label]["h"] > 50 and charts[label]["bars"] > 0, (name, label)
            else:
                assert label not in charts, name
        diag = page.query_selector("details:has(> summary:text('Diagnostics'))")
        has_memory = any(s["diagnostics"] for s in shipped_runs[name][1]["stages"])
        assert (diag is not None) == has_memory, name
        if diag is not None:
            assert not diag.get_property("open").json_value()  # collapsed
        page.close()


# ----------------------------------------------------------------------- small fixtures


def test_split_batches_sum_to_the_whole_batch_figures() -> None:
    """What a stage publishes, summed over any split into batches (as the engine merges
    workers' metrics), equals the figures of the whole batch."""
    from cleanpipe.contract.stage import BatchContext
    from cleanpipe.engine.apply import merge_metrics
    from cleanpipe.stages.token_ids import TokenIdCheck

    lengths = [1, 5, 31, 32, 33, 64, 700, 5000, 0, 2]
    ids = [list(range(n)) for n in lengths]
    labels = [[-100] * (n // 2) + [1] * (n - n // 2) for n in lengths]
    batch = pa.RecordBatch.from_pydict({"input_ids": ids, "labels": labels})
    stage = TokenIdCheck(vocab_size=6000, attention_mask_field=None)

    def figures(sizes: list[int]) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        start = 0
        for size in sizes:
            part = batch.slice(start, size)
            merge_metrics(merged, stage.process(part, BatchContext(part)).metrics)
            start += size
        return {k: v.to_json() for k, v in stage.summary(merged).values.items()}

    whole = figures([len(lengths)])
    assert figures([3, 3, 4]) == figures([1] * len(lengths)) == whole
    hist = whole[pub.TOKENS_BEFORE]
    assert sum(hist["counts"]) == len(lengths)
    # the empty row has every label masked: dropped, so not among the rows passed on
    assert sum(whole[pub.TOKENS_AFTER]["counts"]) == len(lengths) - 1
    # sorted buckets: 0,1,2,5,31 | 32,33 | 64 | 700 | 5000
    nonzero = [(e, c) for e, c in zip(hist["edges"], hist["counts"], strict=True) if c]
    assert nonzero == [(0, 5), (32, 2), (64, 1), (512, 1), (4096, 1)]
    assert whole[pub.TOTAL_TOKENS_BEFORE] == {"value": sum(lengths), "bounded_rows": 0}
    assert whole[pub.SUPERVISED_TOKENS_BEFORE]["value"] == sum(n - n // 2 for n in lengths)


def test_labels_stage_publishes_its_tally() -> None:
    from cleanpipe.contract.stage import BatchContext
    from cleanpipe.stages.labels import LabelCheck

    batch = pa.RecordBatch.from_pydict({"label": ["pos", "neg", "pos", "meh", None]})
    stage = LabelCheck(labels=["neg", "pos"])
    res = stage.process(batch, BatchContext(batch))
    assert stage.summary(res.metrics).values[pub.LABELS] == pub.Tally({"neg": 1, "pos": 2})
