"""Same input and config → byte-identical data, quarantine and events, same report.json
apart from timings; with 1 and 2 workers and different batch sizes."""

from __future__ import annotations

import json
from pathlib import Path

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


@pytest.mark.parametrize("which", ["fixture", "instructionwild"])
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
    rc = stable_report(c)
    # the batch size is part of the recorded config; everything counted must agree
    ra["pipeline"]["config"].pop("batch_size")
    rc["pipeline"]["config"].pop("batch_size")
    ra["pipeline"].pop("config_hash")
    rc["pipeline"].pop("config_hash")
    assert ra == rc
    assert ra["totals"]["quarantined"] > 0
    if which == "fixture":  # parse, decode and regex drops all present
        assert {r["code"] for r in ra["reasons"]} >= {"parse_error", "decode_error", "regex_match"}
    assert ra["totals"]["kept"] + ra["totals"]["quarantined"] == ra["totals"]["read"]
