"""One big JSON Lines file is read in bounded blocks (cleanpipe.io.line_blocks) with the
same results as when it is read whole: the block size (``$CLEANPIPE_READ_BLOCK_BYTES``)
never changes data, quarantine, events or the report; plain, gzip and zstd alike. The
same rows in one file or in shards give the same data. Progress moves with the blocks."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from cleanpipe.engine.local import Sinks, execute
from cleanpipe.engine.progress import Progress
from cleanpipe.io.line_blocks import BLOCK_ENV
from cleanpipe.io.readers import ReadOptions, read_shard
from cleanpipe.io.readers import jsonl as jsonl_reader
from cleanpipe.io.sources import resolve_sources
from cleanpipe.pipeline import Pipeline
from tests._robust_helpers import cli, output_files, read_parts, stable_report, write_pipeline
from tests.conftest import realdata

# a drop (regex), a rewrite (whitespace) and a flag-free global stage: quarantine from a
# stage and from the reader, events from the reader and from stages, a second pass
STAGES = ("[{stage: regex_filter, patterns: {text: 'drop me'}, action: drop},"
          " {stage: whitespace}, {stage: exact_dedup}]")


def _odd_lines(n: int = 1500) -> bytes:
    """JSON lines with every kind of odd record the reader handles, spread over the file."""
    out = [b'\xef\xbb\xbf{"text": "first line after a BOM", "meta": {"k": 1}}']
    for i in range(n):
        kind = i % 37
        if kind == 3:
            out.append(b"{broken json")
        elif kind == 5:
            out.append(b"")  # blank line
        elif kind == 7:
            out.append(b'["an", "array"]')
        elif kind == 11:
            out.append(json.dumps({"text": f"bad byte \xff {i}", "meta": {"k": i}},
                                  ensure_ascii=False).encode().replace(b"\xc3\xbf", b"\xff"))
        elif kind == 13:
            out.append(json.dumps({"text": f"drop me {i}", "meta": {"k": i}}).encode())
        elif kind == 17:
            out.append(json.dumps({"text": "same text", "meta": {"k": 0}}).encode())
        elif kind == 19:
            # {} where the file never has keys (an object that has keys elsewhere in the
            # file but is {} in every record of a block reads as null there, not as nulls)
            out.append(json.dumps({"text": f"  spaced   out {i}  ", "meta": {"k": i},
                                   "extra": {}}).encode())
        elif kind == 23:
            out.append(json.dumps({"text": f"long \u2028 line {i} " + "x" * 3000,
                                   "meta": {"k": i}}).encode())
        else:
            out.append(json.dumps({"text": f"row {i} 中文", "meta": {"k": i}},
                                  ensure_ascii=False).encode())
    return b"\n".join(out)  # no line break at the end


def _write(path: Path, data: bytes) -> Path:
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(data))
    elif path.suffix == ".zst":
        import zstandard

        path.write_bytes(zstandard.ZstdCompressor().compress(data))
    else:
        path.write_bytes(data)
    return path


def _run(tmp_path: Path, capsys, monkeypatch, src: Path, name: str, block: int | None,
         decode: str = "replace", stages: str = STAGES, *args: str) -> Path:
    if block is None:
        monkeypatch.delenv(BLOCK_ENV, raising=False)
    else:
        monkeypatch.setenv(BLOCK_ENV, str(block))
    out = tmp_path / name
    pipe = write_pipeline(tmp_path / "pipeline.yaml", src, stages=stages,
                          extra_input=f", on_decode_error: {decode}")
    code, _, err = cli(capsys, "run", str(pipe), "-o", str(out), "-q", "--no-progress",
                       "--batch-size", "64", *args)
    assert code in (0, 1), err
    return out


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.zst"])
@pytest.mark.parametrize("decode", ["replace", "quarantine"])
def test_block_size_never_changes_a_result(tmp_path, capsys, monkeypatch, suffix, decode):
    # batches end at 64 rows or 6 kB of lines: both kinds of cut, across blocks
    monkeypatch.setattr(jsonl_reader, "MAX_BATCH_BYTES", 6000)
    src = _write(tmp_path / f"train{suffix}", _odd_lines())
    whole = _run(tmp_path, capsys, monkeypatch, src, "whole", None, decode)
    fw = output_files(whole)
    rw = stable_report(whole)
    # the fixture really holds what the blocks must not disturb
    codes = {r["code"] for r in rw["reasons"]}
    assert {"parse_error", "regex_match", "exact_duplicate"} <= codes, codes
    assert ("decode_error" in codes) == (decode == "quarantine")
    events = pq.read_table(whole / "events.parquet").column("code").to_pylist()
    assert "empty_object" in events
    assert ("decode_repaired" in events or "decode_replaced" in events) == (decode == "replace")
    # 1 byte: every line its own block; 700: blocks cut across batches; 1 worker and 2
    for block, workers in ((1, "1"), (700, "2"), (4096, "1")):
        cut = _run(tmp_path, capsys, monkeypatch, src, f"b{block}", block, decode, STAGES,
                   "--workers", workers)
        assert output_files(cut) == fw, block
        rc = stable_report(cut)
        assert rc["examples"] == rw["examples"], block
        assert rc == rw, block


def test_block_reader_numbers_lines_as_the_whole_file(tmp_path):
    src = _write(tmp_path / "train.jsonl", _odd_lines(300))
    shard = resolve_sources(str(src))[0]

    def read(block: int) -> tuple[list, list, list, int]:
        rows, numbers, bad, nbytes = [], [], [], 0
        for chunk in read_shard(shard, ReadOptions(batch_size=50, block_bytes=block)):
            rows += chunk.batch.to_pylist()
            numbers += chunk.numbers.tolist()
            bad += [(b.line, b.code, b.message, b.byte_offset) for b in chunk.bad]
            nbytes += chunk.bytes_read
        return rows, numbers, bad, nbytes

    whole = read(1 << 30)
    assert whole[3] == src.stat().st_size
    assert any(code == "parse_error" for _, code, _, _ in whole[2])
    for block in (1, 97, 5000):
        assert read(block) == whole


def test_one_file_and_shards_give_the_same_data(tmp_path, capsys, monkeypatch):
    lines = _odd_lines(1200).split(b"\n")[1:]  # no BOM: each shard starts like the file
    (tmp_path / "one").mkdir()
    (tmp_path / "shards").mkdir()
    one = _write(tmp_path / "one" / "train.jsonl", b"\n".join(lines))
    step = 150
    for k in range(0, len(lines), step):
        _write(tmp_path / "shards" / f"part-{k // step:03d}.jsonl", b"\n".join(lines[k:k + step]))
    a = _run(tmp_path, capsys, monkeypatch, one, "a", 2048)
    b = _run(tmp_path, capsys, monkeypatch, tmp_path / "shards", "b", 2048)
    assert read_parts(a / "data").to_pylist() == read_parts(b / "data").to_pylist()
    ra, rb = stable_report(a), stable_report(b)
    assert ra["totals"] == rb["totals"]
    assert ra["reasons"] == rb["reasons"]


def test_progress_prints_lines_as_blocks_are_read(tmp_path, monkeypatch):
    """Not on a terminal: a line every ``interval`` seconds, bytes growing with each."""
    monkeypatch.setenv(BLOCK_ENV, "4096")
    # pieces of 100 lines (a piece is at most 1 MiB): this small file reads as a big one does
    monkeypatch.setattr(jsonl_reader, "PIECE_LINES", 100)
    src = _write(tmp_path / "train.jsonl", _odd_lines(1500))
    clock = iter(float(t) for t in range(0, 10**6, 5))
    out = io.StringIO()
    prog = Progress(stream=out, interval=10, clock=lambda: next(clock))
    pipe = Pipeline.from_yaml(write_pipeline(tmp_path / "p.yaml", src, stages="[]",
                                             extra="batch_size: 50\n"))
    for _ in execute(pipe.spec, str(src), Sinks(), workers=1, progress=prog):
        pass
    lines = [ln for ln in out.getvalue().splitlines() if " MB read " in ln]
    assert len(lines) >= 5, out.getvalue()
    mbs = [float(ln.split(" rows, ")[1].split(" MB")[0]) for ln in lines]
    rows = [int(ln.split(": ")[1].split(" rows")[0].replace(",", "")) for ln in lines]
    # the bytes read move with the rows: the file is not read whole before the first batch
    assert mbs == sorted(mbs) and len(set(mbs)) >= 3, lines
    assert rows == sorted(rows) and rows[-1] > rows[0]
    assert prog.bytes == src.stat().st_size


@pytest.mark.realdata
def test_real_corpus_block_size_never_changes_a_result(tmp_path, capsys, monkeypatch):
    shards = sorted(realdata("sft_self_instruct_t0_50k", "data_per_template").glob("*.jsonl"))
    src = tmp_path / "t0.jsonl"
    with src.open("wb") as fh:
        for s in shards[:6]:
            fh.write(s.read_bytes())
    stages = "[{stage: unicode_fix}, {stage: exact_dedup}]"
    whole = _run(tmp_path, capsys, monkeypatch, src, "whole", None, "replace", stages,
                 "--workers", "2")
    cut = _run(tmp_path, capsys, monkeypatch, src, "cut", 65536, "replace", stages,
               "--workers", "2")
    assert stable_report(whole)["totals"]["read"] > 1000
    assert output_files(cut) == output_files(whole)
    assert stable_report(cut) == stable_report(whole)


def test_held_back_drops_keep_their_order_when_spilled(tmp_path):
    """A shard's dropped rows wait for its unreadable records, on disk past hold_rows."""
    from cleanpipe.engine.rows import QuarantineRows
    from cleanpipe.engine.shard_quarantine import ShardQuarantine

    def q(ids: list[str]) -> QuarantineRows:
        return QuarantineRows(None, ids, np.arange(len(ids)), "s", [["x"]] * len(ids),
                              [[]] * len(ids))

    out: list[list[str]] = []
    held = ShardQuarantine(lambda x: out.append(x.row_ids), tmp_path, hold_rows=2)
    held.dropped("a", q(["a:1", "a:2"]))
    held.dropped("a", q(["a:3"]))  # past hold_rows: to disk
    held.unreadable("a", q(["a:9"]))
    held.dropped("a", q(["a:10"]))
    held.unreadable("b", q(["b:4"]))  # a new shard: a's drops go out first
    held.flush()
    assert out == [["a:9"], ["a:1", "a:2"], ["a:3"], ["a:10"], ["b:4"]]
