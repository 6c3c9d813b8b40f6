"""A command that stops on an error still leaves report.json and junit.xml saying why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cleanpipe.cli import main

PIPE = "name: t\nfields: [text]\nstages:\n  - stage: control_chars\n"


def _error_of(report_dir: Path) -> tuple[dict, ET.Element]:
    report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
    suite = ET.parse(report_dir / "junit.xml").getroot()
    errors = suite.findall(".//testcase/error")
    assert len(errors) == 1
    assert suite.get("errors") == "1"
    assert report["verdict"]["passed"] is False
    return report["error"], errors[0]


@pytest.mark.parametrize("command", ["check", "run"])
def test_unreadable_input_exit_3_leaves_reports(tmp_path: Path, command: str) -> None:
    pipe = tmp_path / "p.yaml"
    pipe.write_text(PIPE, encoding="utf-8")
    missing = tmp_path / "no_such_data.jsonl"
    rd = tmp_path / "reports"
    extra = ["-o", str(tmp_path / "out")] if command == "run" else []
    code = main([command, str(pipe), "-i", str(missing), "--report-dir", str(rd),
                 "--no-progress", *extra])
    assert code == 3
    err, el = _error_of(rd)
    assert err["exit_code"] == 3 and "no_such_data.jsonl" in err["message"]
    assert "no_such_data.jsonl" in el.get("message")


def test_config_error_exit_2_leaves_reports(tmp_path: Path, capsys) -> None:
    pipe = tmp_path / "p.yaml"
    pipe.write_text("name: t\nstages:\n  - stage: exact_dedupe\n", encoding="utf-8")
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "a"}\n', encoding="utf-8")
    rd = tmp_path / "reports"
    assert main(["check", str(pipe), "-i", str(data), "--report-dir", str(rd)]) == 2
    err, el = _error_of(rd)
    assert err["exit_code"] == 2 and "exact_dedupe" in err["message"]
    assert "exact_dedupe" in (el.text or "")
    assert err["message"] in capsys.readouterr().err


def test_command_line_error_exit_2_leaves_reports(tmp_path: Path) -> None:
    rd = tmp_path / "reports"
    r = subprocess.run([sys.executable, "-m", "cleanpipe.cli", "check", "p.yaml",
                        "--workers", "many", "--report-dir", str(rd)],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "--workers" in r.stderr
    err, _ = _error_of(rd)
    assert err["exit_code"] == 2


def test_unreachable_remote_input_is_exit_3_not_internal(tmp_path: Path) -> None:
    # The hub endpoint points at a host that never resolves (.invalid), so this holds online
    # as well as offline: an unreachable input is an unreadable input, not a cleanpipe bug.
    pipe = tmp_path / "p.yaml"
    pipe.write_text(PIPE, encoding="utf-8")
    rd = tmp_path / "reports"
    url = "hf://datasets/tatsu-lab/alpaca"
    env = {**os.environ, "HF_ENDPOINT": "https://hub.invalid", "HF_HUB_ETAG_TIMEOUT": "5"}
    r = subprocess.run([sys.executable, "-m", "cleanpipe.cli", "check", str(pipe), "-i", url,
                        "--report-dir", str(rd), "--no-progress"], capture_output=True,
                       text=True, check=False, env=env, timeout=300)
    assert r.returncode == 3, r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and url in err[0] and "internal error" not in err[0]
    assert _error_of(rd)[0]["exit_code"] == 3


def test_report_dir_never_replaces_a_file_cleanpipe_did_not_write(tmp_path: Path,
                                                                  capsys) -> None:
    pipe = tmp_path / "p.yaml"
    pipe.write_text(PIPE, encoding="utf-8")
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "a"}\n', encoding="utf-8")
    rd = tmp_path / "artifacts"
    rd.mkdir()
    (rd / "junit.xml").write_text("<tests of another tool/>", encoding="utf-8")
    (rd / "coverage.xml").write_text("<coverage/>", encoding="utf-8")
    assert main(["check", str(pipe), "-i", str(data), "--report-dir", str(rd)]) == 2
    assert "junit.xml: not replaced" in capsys.readouterr().err
    assert (rd / "junit.xml").read_text(encoding="utf-8") == "<tests of another tool/>"
    assert not (rd / "report.json").exists()
    (rd / "junit.xml").unlink()
    # once cleanpipe wrote them, its own reports are replaced on the next run, and files of
    # other tools in the folder are left alone
    for _ in range(2):
        assert main(["check", str(pipe), "-i", str(data), "--report-dir", str(rd)]) == 0
    assert (rd / "coverage.xml").read_text(encoding="utf-8") == "<coverage/>"
    assert json.loads((rd / "report.json").read_text(encoding="utf-8"))["totals"]["read"] == 1
