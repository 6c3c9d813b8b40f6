"""`cleanpipe diff A B`: counts per reason, new/gone reasons, verdict change, exit codes."""

from __future__ import annotations

import copy
import json

import pytest

from cleanpipe import Pipeline
from cleanpipe.cli import main
from cleanpipe.commands.diff import diff_reports, render_diff
from cleanpipe.report import example_report, write_reports
from tests.conftest import realdata
from tests.guard_data import t0_guard_stages


def _pair(tmp_path):
    a = example_report()
    b = copy.deepcopy(a)
    b["totals"].update(read=1100, kept=1040, quarantined=60)
    for r in b["reasons"]:
        if r["code"] == "exact_duplicate":
            r["rows"] = r["events"] = 45
    b["reasons"] = [r for r in b["reasons"] if r["code"] != "unknown_label"]
    b["reasons"].append({"stage": "labels", "code": "label_out_of_range", "action": "drop",
                         "events": 2, "rows": 2})
    b["input"]["fingerprint"] = "sha256:" + "0" * 64
    write_reports(a, tmp_path / "a")
    write_reports(b, tmp_path / "b")
    return a, b


def test_diff_reports_counts_and_statuses(tmp_path) -> None:
    a, b = _pair(tmp_path)
    d = diff_reports(a, b)
    by = {r["reason"]: r for r in d["reasons"]}
    assert (by["exact_dedup/exact_duplicate"]["status"], by["exact_dedup/exact_duplicate"]["delta"]
            ) == ("up", 20)
    assert by["labels/label_out_of_range"]["status"] == "new"
    assert by["labels/unknown_label"]["status"] == "gone"
    assert by["unicode/mojibake"]["status"] == "same"
    assert d["new_reasons"] == ["labels/label_out_of_range"]
    assert d["gone_reasons"] == ["labels/unknown_label"]
    assert d["totals"]["read"] == {"a": 1000, "b": 1100, "delta": 100}
    assert d["same_pipeline"] and not d["same_input"]
    # new and gone first, then the biggest moves
    assert [r["status"] for r in d["reasons"]][:3] == ["new", "gone", "up"]


def test_render_diff_markdown(tmp_path) -> None:
    a, b = _pair(tmp_path)
    md = render_diff(diff_reports(a, b), "a/report.json", "b/report.json")
    assert "**input changed**" in md and "same pipeline config" in md
    assert "| labels/label\\_out\\_of\\_range | new | drop | 0 | 2 | +2 |" in md
    assert "| read | 1,000 | 1,100 | +100 |" in md


def test_cli_diff_exit_codes(tmp_path, capsys) -> None:
    _pair(tmp_path)
    a, b = str(tmp_path / "a" / "report.json"), str(tmp_path / "b")
    assert main(["diff", a, b]) == 0
    assert "label\\_out\\_of\\_range" in capsys.readouterr().out
    assert main(["diff", a, b, "--fail-on-new"]) == 1
    assert "new reasons" in capsys.readouterr().err
    assert main(["diff", b, a, "--fail-on-new"]) == 1  # unknown_label is new that way round
    assert main(["diff", a, a, "--fail-on-new"]) == 0
    capsys.readouterr()
    assert main(["diff", a, b, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["new_reasons"] == ["labels/label_out_of_range"]


def test_cli_diff_unreadable_or_invalid_report_exits_3(tmp_path, capsys) -> None:
    _pair(tmp_path)
    a = str(tmp_path / "a" / "report.json")
    assert main(["diff", a, str(tmp_path / "missing.json")]) == 3
    (tmp_path / "bad.json").write_text("{not json", "utf-8")
    assert main(["diff", a, str(tmp_path / "bad.json")]) == 3
    (tmp_path / "other.json").write_text(json.dumps({"schema_version": "1"}), "utf-8")
    assert main(["diff", str(tmp_path / "other.json"), a]) == 3
    assert "cannot read the report" in capsys.readouterr().err


def test_cli_diff_usage_error_exits_2(capsys) -> None:
    try:
        main(["diff", "only-one"])
    except SystemExit as e:
        assert e.code == 2
    else:  # pragma: no cover
        raise AssertionError("argparse accepted a missing argument")


@pytest.mark.realdata
def test_diff_of_two_real_runs(tmp_path, capsys) -> None:
    t0 = ("sft_self_instruct_t0_50k", "data_per_template")
    runs = {"a": realdata(*t0, "trec_trec1.jsonl"), "b": realdata(*t0, "ag_news_classify.jsonl")}
    stages = t0_guard_stages(realdata("tokenizers", "qwen3"))
    for name, path in runs.items():
        Pipeline(stages=stages, fields=["prompt", "completion"]).run(
            path, None, workers=1, report_dir=tmp_path / name)
    assert main(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    # trec_trec1: every completion is only <|endoftext|> (PROVENANCE: 200 empty outputs)
    assert d["gone_reasons"] == ["trainable_tokens/no_trainable_tokens"]
    (empty,) = [r for r in d["reasons"] if r["reason"] == "trainable_tokens/no_trainable_tokens"]
    assert empty["a"] == 200 and empty["b"] == 0
    assert not d["same_input"] and d["same_pipeline"]
