"""`cleanpipe check` exit codes with a gate: 0 pass, 1 gate failed, 2 config error,
3 unreadable input, and junit.xml parsed back."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from cleanpipe.cli import main
from cleanpipe.report import load_report
from tests.conftest import realdata


def _data(tmp_path, n=20):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"text": f"row {i}"}) + "\n" for i in range(n)), "utf-8")
    return path


def _pipeline(tmp_path, gate: str) -> str:
    path = tmp_path / "pipe.yaml"
    path.write_text(f"name: gate-test\nfields: [text]\nstages: []\ngate:\n{gate}\n", "utf-8")
    return str(path)


def _check(tmp_path, pipeline, data, capsys):
    code = main(["check", pipeline, "--input", str(data), "--report-dir",
                 str(tmp_path / "rep"), "--quiet", "--no-progress", "--workers", "1"])
    return code, capsys.readouterr()


def test_exit_0_when_the_gate_passes(tmp_path, capsys) -> None:
    code, _ = _check(tmp_path, _pipeline(tmp_path, "  min_rows_out: 20"), _data(tmp_path),
                     capsys)
    assert code == 0
    report = load_report(tmp_path / "rep")
    assert report["verdict"]["passed"] and report["output"]["written"] is False
    suite = ET.parse(tmp_path / "rep" / "junit.xml").getroot().find("testsuite")
    assert {c.get("name") for c in suite.iter("testcase")} == {"no_fail_findings",
                                                                "min_rows_out"}
    assert suite.get("failures") == "0"


def test_exit_1_when_the_gate_fails(tmp_path, capsys) -> None:
    code, _ = _check(tmp_path, _pipeline(tmp_path, "  min_rows_out: 21"), _data(tmp_path),
                     capsys)
    assert code == 1
    cases = ET.parse(tmp_path / "rep" / "junit.xml").getroot().iter("testcase")
    failures = {c.get("name"): c.find("failure").get("message") for c in cases
                if c.find("failure") is not None}
    assert failures == {"min_rows_out": "20 rows out (minimum 21)"}


@pytest.mark.parametrize("gate", ["  max_droped_fraction: 0.1", "  max_dropped_fraction: 2",
                                  "  never: {a: 1}"])
def test_exit_2_on_an_invalid_gate(tmp_path, capsys, gate) -> None:
    code, io = _check(tmp_path, _pipeline(tmp_path, gate), _data(tmp_path), capsys)
    assert code == 2
    assert "gate" in io.err
    # no gate ran: the report folder holds only the error, never a verdict that passed
    rep = json.loads((tmp_path / "rep" / "report.json").read_text(encoding="utf-8"))
    assert rep["verdict"] == {"passed": False, "exit_code": 2, "rules": []}
    assert "gate" in rep["error"]["message"] and "totals" not in rep


def test_exit_3_on_unreadable_input(tmp_path, capsys) -> None:
    code, io = _check(tmp_path, _pipeline(tmp_path, "  min_rows_out: 1"),
                      tmp_path / "missing.jsonl", capsys)
    assert code == 3 and io.err


@pytest.mark.realdata
def test_exit_1_on_real_data_min_rows(tmp_path, capsys) -> None:
    data = realdata("sft_self_instruct_t0_50k", "data_per_template", "trec_trec1.jsonl")
    pipe = tmp_path / "pipe.yaml"
    pipe.write_text("name: t0\nfields: [prompt, completion]\nstages: []\n"
                    "gate:\n  min_rows_out: 201\n", "utf-8")
    code, _ = _check(tmp_path, str(pipe), data, capsys)
    assert code == 1
    assert load_report(tmp_path / "rep")["totals"]["read"] == 200


def _empty_check(tmp_path, capsys, pipeline: str, data) -> tuple[int, str]:
    code = main(["check", pipeline, "--input", str(data), "--report-dir",
                 str(tmp_path / "rep"), "--no-progress", "--workers", "1"])
    return code, capsys.readouterr().out


def _says_empty(tmp_path, out: str) -> None:
    reason = "min_rows_out: the input has no rows: 0 rows out (minimum 1)"
    assert f"failed: {reason}" in out
    report = load_report(tmp_path / "rep")
    assert report["totals"]["read"] == 0 and not report["verdict"]["passed"]
    (rule,) = [r for r in report["verdict"]["rules"] if not r["passed"]]
    assert rule["name"] == "min_rows_out" and rule["message"].startswith("the input has no rows")
    cases = ET.parse(tmp_path / "rep" / "junit.xml").getroot().iter("testcase")
    failures = {c.get("name"): c.find("failure").get("message") for c in cases
                if c.find("failure") is not None}
    assert list(failures) == ["min_rows_out"]
    assert failures["min_rows_out"].startswith("the input has no rows")


@pytest.mark.parametrize("gate", [None, "  max_dropped_fraction: 0.1"])
def test_empty_input_fails_the_gate_by_default(tmp_path, capsys, gate) -> None:
    """No `gate:` at all, or one without min_rows_out: an input with no rows exits 1."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", "utf-8")
    pipe = tmp_path / "pipe.yaml"
    pipe.write_text("name: t\nfields: [text]\nstages: [{stage: unicode_fix}]\n"
                    + (f"gate:\n{gate}\n" if gate else ""), "utf-8")
    code, out = _empty_check(tmp_path, capsys, str(pipe), empty)
    assert code == 1
    _says_empty(tmp_path, out)


def test_empty_input_allowed_when_asked(tmp_path, capsys) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", "utf-8")
    code, _ = _check(tmp_path, _pipeline(tmp_path, "  min_rows_out: 0"), empty, capsys)
    assert code == 0


@pytest.mark.realdata
def test_empty_real_shard_fails_a_shipped_pipeline(tmp_path, capsys) -> None:
    """One of the 11 empty T0 shards, checked with the shipped prompt/completion pipeline."""
    from cleanpipe.cli import PIPELINES_DIR

    data = realdata("sft_self_instruct_t0_50k", "data_per_template",
                    "trec_fine_grained_HUM.jsonl")
    assert data.stat().st_size == 0
    code, out = _empty_check(tmp_path, capsys,
                             str(PIPELINES_DIR / "sft_prompt_completion.yaml"), data)
    assert code == 1
    _says_empty(tmp_path, out)
