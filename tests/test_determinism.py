"""Same input and config → byte-identical data, quarantine and events, same report.json
apart from timings; with 1 and 2 workers and different batch sizes."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests._robust_helpers import cli, output_files, stable_report, write_pipeline
from tests.conftest import realdata

STAGES = "[{stage: regex_filter, patterns: {q: '\\\\?$', url: 'https?://'}, action: drop}]"


def _run(tmp_path, capsys, src, name, *args):
    out = tmp_path / name
    pipe = write_pipeline(tmp_path / "p.yaml", src, stages=STAGES,
                          extra_input=", on_decode_error: quarantine")
    code, _, err = cli(capsys, "run", str(pipe), "-o", str(out), "-q", "--no-progress", *args)
    assert code in (0, 1), err
    return out


def _mixed_input(tmp_path: Path) -> Path:
    d = tmp_path / "in"
    d.mkdir()
    for k in range(3):
        with (d / f"s{k}.jsonl").open("wb") as f:
            for i in range(700):
                kind = 3 if i % 50 == 3 else i % 3  # a few bad bytes, not a foreign encoding
                text = ["plain 中文 %d", "why %d?", "see http://x/%d", "bad \xff %d"][kind] % i
                line = json.dumps({"text": text, "k": k}, ensure_ascii=False).encode()
                # a raw 0xFF byte: invalid UTF-8, quarantined as decode_error
                f.write(line.replace("\xff".encode(), b"\xff") + b"\n")
            f.write(b"{broken\n")
    return d


@pytest.mark.parametrize("which", ["fixture", pytest.param("instructionwild",
                                                 marks=pytest.mark.realdata)])
def test_byte_identical_across_runs_workers_and_batches(tmp_path, capsys, which):
    src = _mixed_input(tmp_path) if which == "fixture" else realdata("sft_instructionwild")
    a = _run(tmp_path, capsys, src, "a", "--workers", "1")
    b = _run(tmp_path, capsys, src, "b", "--workers", "1")
    c = _run(tmp_path, capsys, src, "c", "--workers", "2", "--batch-size", "97")
    fa, fb, fc = output_files(a), output_files(b), output_files(c)
    assert {"events.parquet", "_SUCCESS"} <= set(fa)
    assert any(k.startswith("quarantine/") for k in fa) and any(k.startswith("data/") for k in fa)
    assert fa == fb
    assert fa == fc
    ra = stable_report(a)
    assert ra == stable_report(b)
    # the batch size and workers are recorded with the timings; the rest must agree,
    # config_hash included
    assert ra == stable_report(c)
    assert ra["totals"]["quarantined"] > 0
    if which == "fixture":  # parse, decode and regex drops all present
        assert {r["code"] for r in ra["reasons"]} >= {"parse_error", "decode_error", "regex_match"}
    assert ra["totals"]["kept"] + ra["totals"]["quarantined"] == ra["totals"]["read"]


# --- byte identity across --workers 1/2 x --batch-size 50/1000/default (issue 15, item 7) ---

T0 = ("sft_self_instruct_t0_50k", "data_per_template")
#: fix, flag and drop; stateless stages before and after a global one (whose second pass
#: is merged with the next stage's results), and a global flagging stage at the end
T0_STAGES = """
  - stage: control_chars
  - stage: invisible_chars
  - stage: whitespace
  - stage: special_tokens
    tokens: ["<|endoftext|>"]
  - stage: exact_dedup
  - stage: regex_filter
    patterns: {question: '\\?\\s*$'}
  - stage: outliers
"""

#: t0 templates with exact duplicates (cnn_dailymail) and short texts (ag_news)
T0_FILES = ("cnn_dailymail_3_0_0_2_or_3_sentences", "cnn_dailymail_3_0_0_news_stock",
            "cnn_dailymail_3_0_0_tldr_summary", "ag_news_classify",
            "ag_news_classify_question_first", "ag_news_classify_with_choices",
            "ag_news_recommend", "ag_news_which_section", "ag_news_which_section_choices",
            "app_reviews_convert_to_rating", "app_reviews_generate_review")


def _t0_mixed(tmp_path: Path) -> Path:
    """2,200 real t0 rows in two files of 1,100 rows (so batch sizes 50, 1000 and 4096 cut
    them differently), with lines the reader quarantines: bad JSON, invalid UTF-8, a JSON
    value that is not an object."""
    shards = [realdata(*T0, f"{name}.jsonl") for name in T0_FILES]
    lines = [ln for p in shards for ln in p.read_bytes().splitlines() if ln]
    d = tmp_path / "in"
    d.mkdir()
    half = len(lines) // 2
    bad = [b"{broken json", b'{"prompt": "caf\xe9 ?", "completion": "x"}', b"[1, 2]"]
    for k, part in enumerate((lines[:half], lines[half:])):
        with (d / f"t0_{k}.jsonl").open("wb") as f:
            for i, ln in enumerate(part):
                f.write(ln + b"\n")
                if i % 397 == 11:
                    f.write(bad[i % 3] + b"\n")
    return d


def _snapshot(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file()}


def _without_timing(report_bytes: bytes) -> dict:
    rep = json.loads(report_bytes)
    rep.pop("timing")
    for s in rep["stages"]:
        s.pop("seconds")
    return rep


def _rendered(report_bytes: bytes, tmp: Path) -> dict[str, bytes]:
    """report.md/html and junit.xml as the renderers write them from this report.json."""
    from cleanpipe.report import write_reports

    write_reports(json.loads(report_bytes), tmp)
    return {n: (tmp / n).read_bytes() for n in ("report.md", "report.html", "junit.xml")}


@pytest.mark.realdata
def test_t0_outputs_byte_identical_for_workers_and_batch_sizes(tmp_path, capsys):
    src = _t0_mixed(tmp_path)
    pipe = write_pipeline(tmp_path / "p.yaml", src, stages=T0_STAGES,
                          extra_input=", on_decode_error: quarantine",
                          extra="fields: [prompt, completion]\n")
    out = tmp_path / "out"  # one output path: the report names it
    runs: dict[str, dict[str, bytes]] = {}
    for workers in ("1", "2"):
        for batch in ("50", "1000", None):
            args = ["--workers", workers] + (["--batch-size", batch] if batch else [])
            code, _, err = cli(capsys, "run", str(pipe), "-o", str(out), "-q",
                               "--no-progress", *args)
            assert code in (0, 1), err
            runs[f"w{workers}/b{batch or 'default'}"] = _snapshot(out)
            out.rename(tmp_path / f"run-{len(runs)}")
    base_name, base = next(iter(runs.items()))
    rep = json.loads(base["report.json"])
    # every kind of output is there and non-empty: data, quarantine, events
    assert rep["totals"]["read"] > 2200 and rep["totals"]["quarantined"] > 10
    assert {r["stage"] for r in rep["reasons"] if r["action"] == "drop"} >= {
        "read", "exact_dedup", "regex_filter"}
    assert {r["action"] for r in rep["reasons"]} >= {"fix", "flag", "drop"}
    assert pq.read_metadata(out.parent / "run-1" / "events.parquet").num_rows > 1000
    reports = ("report.json", "report.md", "report.html", "junit.xml")
    for name, files in runs.items():
        assert sorted(files) == sorted(base), name
        for f in files:
            if f not in reports:
                assert files[f] == base[f], f"{f} differs between {base_name} and {name}"
        assert _without_timing(files["report.json"]) == _without_timing(base["report.json"])
        # the other reports are renderings of report.json, nothing more
        assert {n: files[n] for n in reports[1:]} == _rendered(files["report.json"],
                                                               tmp_path / "render" / name)
    batches = {json.loads(f["report.json"])["timing"]["batch_size"] for f in runs.values()}
    assert batches == {50, 1000, 4096}


# --- small fixtures: what used to depend on the batch size and the worker count ---

def _spaced(tmp_path: Path) -> Path:
    """Rows that several stages change, flag and drop, in one file."""
    rows = []
    for i in range(120):
        text = [f"row {i}  with a run ", f"row {i}? ", f"see http://x/{i}", f"row {i}"][i % 4]
        rows.append(json.dumps({"text": text, "other": f"cell  {i} " if i % 3 else "ok"}))
    rows[7] = rows[3]  # an exact duplicate, dropped by exact_dedup's second pass
    p = tmp_path / "spaced.jsonl"
    p.write_text("\n".join(rows) + "\n", "utf-8")
    return p


def _outputs(tmp_path, capsys, src, stages: str, name: str, *args: str) -> dict[str, bytes]:
    pipe = write_pipeline(tmp_path / f"{name}.yaml", src, stages=stages,
                          extra="fields: [text, other]\n")
    out = tmp_path / name
    code, _, err = cli(capsys, "run", str(pipe), "-o", str(out), "-q", "--no-progress", *args)
    assert code in (0, 1), err
    return {k: v for k, v in output_files(out).items() if k != "_SUCCESS"}


def test_events_and_quarantine_do_not_depend_on_the_batch_size(tmp_path, capsys):
    # whitespace reports two codes on one row; two stateless stages drop rows of one batch
    stages = ("[{stage: whitespace}, {stage: regex_filter, patterns: {q: '\\?\\s*$'}},"
              " {stage: regex_filter, patterns: {url: 'https?://'}}]")
    src = _spaced(tmp_path)
    small = _outputs(tmp_path, capsys, src, stages, "b7", "--workers", "1", "--batch-size", "7")
    large = _outputs(tmp_path, capsys, src, stages, "b1000", "--workers", "1",
                     "--batch-size", "1000")
    assert {"events.parquet", "quarantine/quarantine-00000-of-00001.parquet"} <= set(small)
    assert small["events.parquet"] == large["events.parquet"]
    assert small == large
    q = pq.read_table(tmp_path / "b7" / "quarantine").column("_cleanpipe_row_id").to_pylist()
    assert len(q) == 60 and q == sorted(q, key=lambda r: int(r.split(":")[1]))


def test_global_stage_decisions_keep_their_place_with_workers(tmp_path, capsys):
    # exact_dedup's second pass and the stage after it drop rows of the same batches: their
    # results used to be written as the worker pool ran ahead
    stages = ("[{stage: exact_dedup}, {stage: whitespace},"
              " {stage: regex_filter, patterns: {url: 'https?://'}}]")
    src = _spaced(tmp_path)
    one = _outputs(tmp_path, capsys, src, stages, "w1", "--workers", "1", "--batch-size", "5")
    two = _outputs(tmp_path, capsys, src, stages, "w2", "--workers", "2", "--batch-size", "5")
    assert one == two
    stages_seen = pq.read_table(tmp_path / "w2" / "quarantine").column(
        "_cleanpipe_stage").to_pylist()
    assert set(stages_seen) == {"exact_dedup", "regex_filter"}


def test_config_hash_covers_only_what_changes_results(tmp_path):
    from cleanpipe.spec import load_spec_text

    base = ("name: a\ninput: {path: x.jsonl}\noutput: {path: out}\n"
            "stages: [{stage: whitespace}, {stage: minhash_dedup}]\n")

    def digest(text: str) -> str:
        return load_spec_text(text, "p.yaml").config_hash()

    same = [base.replace("name: a", "name: b\ndescription: other words"),
            base + "batch_size: 50\nworkers: 3\n",
            base + "engine: ray\nray_address: auto\n",
            base.replace("x.jsonl", "elsewhere/y.jsonl").replace("out}", "o2}"),
            base.replace("{stage: minhash_dedup}",
                         "{stage: minhash_dedup, spill_dir: /var/tmp}")]
    for text in same:
        assert digest(text) == digest(base), text
    different = [base.replace("x.jsonl}", "x.jsonl, encoding: gb18030}"),
                 base.replace("out}", "out, format: jsonl}"),
                 base.replace("{stage: whitespace}", "{stage: whitespace, action: flag}"),
                 base.replace("{stage: minhash_dedup}", "{stage: minhash_dedup, seed: 2}")]
    for text in different:
        assert digest(text) != digest(base), text


def test_report_examples_do_not_depend_on_the_batch_size():
    import pyarrow as pa

    from cleanpipe import Pipeline

    # trailing spaces in `other` from row 1, in `text` only from row 4: a batch of three
    # rows used to show the first `other` hits, one large batch the `text` hits first
    table = pa.table({"text": ["a " if i >= 3 else "a" for i in range(40)],
                      "other": ["b "] * 40})

    def examples(batch_size: int) -> list[tuple[str, str, str]]:
        pipe = Pipeline(stages=[{"stage": "whitespace"}], fields=["text", "other"],
                        batch_size=batch_size)
        rep = pipe.run(table, workers=1)
        return [(e["row_id"], e["field"], e["before"]) for e in rep["examples"]]

    small = examples(3)
    assert small == examples(1000)
    assert small[0][:2] == ("Table:1", "other") and len(small) >= 5
