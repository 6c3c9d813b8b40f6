"""One big JSON Lines file is parsed by the workers (#18): the driver cuts it into pieces
of a batch's lines and parses only the first batch itself; each other piece is parsed where
it is cleaned, with the row ids, seq, unreadable records, reader fixes and counters it
would get on the driver."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from cleanpipe.engine import read_notes, reading
from cleanpipe.engine.core import Run, Sinks
from cleanpipe.engine.local import execute
from cleanpipe.engine.reading import PieceRead, read_rows, rows_of_chunk
from cleanpipe.engine.rows import Rows
from cleanpipe.io.readers import ReadOptions, read_shard
from cleanpipe.io.readers import jsonl as jsonl_reader
from cleanpipe.io.readers.jsonl import jsonl_pieces, piece_chunks
from cleanpipe.io.sources import resolve_sources
from cleanpipe.spec import spec_from_dict


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch):
    """Pieces of 64 lines: a small file is then many pieces, as a big one is."""
    monkeypatch.setattr(jsonl_reader, "PIECE_LINES", 64)


def _lines(n: int) -> bytes:
    """Records with every kind of odd line the reader handles: broken JSON, blank lines,
    an array, an invalid byte, {} in a nested field, a long record."""
    out = [b'\xef\xbb\xbf{"text": "first", "meta": {"k": 0}}']
    for i in range(1, n):
        kind = i % 29
        if kind == 3:
            out.append(b"{broken")
        elif kind == 5:
            out.append(b"   ")
        elif kind == 7:
            out.append(b"[1, 2]")
        elif kind == 11:
            out.append(b'{"text": "bad \xff byte %d", "meta": {"k": %d}}' % (i, i))
        elif kind == 13:
            out.append(json.dumps({"text": f"empty {i}", "meta": {}}).encode())
        elif kind == 17:
            out.append(json.dumps({"text": "long " + "y" * 5000, "meta": {"k": i}}).encode())
        else:
            out.append(json.dumps({"text": f"row {i} 中文", "meta": {"k": i}},
                                  ensure_ascii=False).encode())
    return b"\n".join(out) + b"\n\n"


def _spec(batch_size: int = 50):
    return spec_from_dict({"fields": ["text"], "stages": [{"stage": "whitespace"}],
                           "batch_size": batch_size})


def _driver_rows(src: Path, batch_size: int) -> list[Rows]:
    """Every chunk of the file parsed on the driver (the reader's own batching)."""
    shard = resolve_sources(str(src))[0]
    return [rows_of_chunk(c, 0, None, ["text"])
            for c in read_shard(shard, ReadOptions(batch_size=batch_size))]


def _flat(rows: list[Rows]) -> dict[str, list]:
    def cat(xs: list[np.ndarray]) -> list:
        return np.concatenate(xs).tolist() if xs else []

    with_rows = [r for r in rows if r.num_rows]
    return {
        "records": [x for r in with_rows for x in r.data.to_pylist()],
        "ids": [x for r in with_rows for x in r.row_ids.to_pylist()],
        "seq": cat([r.seq for r in with_rows]),
        "bad": [x for r in rows if r.unreadable for x in r.unreadable.row_ids],
        "bad_seq": cat([r.unreadable.seq for r in rows if r.unreadable]),
        "events": [x for r in rows if r.read_events is not None
                   for x in r.read_events.to_pylist()],
    }


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_pieces_read_anywhere_give_the_driver_rows(tmp_path, suffix):
    data = _lines(700)
    src = tmp_path / f"train{suffix}"
    src.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    spec = _spec()
    run = Run(spec, Sinks(), None)
    items = list(read_rows(spec, str(src), run.state, run.progress))
    # the driver parses the first piece (up to the first batch with rows); the rest go
    # out unparsed
    first = next(i for i, it in enumerate(items) if isinstance(it, PieceRead))
    assert all(isinstance(it, Rows) for it in items[:first]) and items[0].num_rows
    pieces = items[first:]
    assert all(isinstance(it, PieceRead) for it in pieces) and len(pieces) > 5
    read = [r for it in items for r in ([it] if isinstance(it, Rows) else it.read())]
    assert all(r.num_rows <= spec.batch_size for r in read)
    # a piece travels pickled to a worker: read there, it gives the same rows
    import pickle

    assert _flat([r for p in pieces for r in pickle.loads(pickle.dumps(p)).read()]) == _flat(
        read[len(read) - sum(len(p.read()) for p in pieces):])
    # the same records, ids, seq, unreadable records and fix events as the reader's
    assert _flat(read) == _flat(_driver_rows(src, spec.batch_size))
    flat = _flat(read)
    assert len(flat["bad"]) > 40 and flat["events"]
    # the driver's seq base for the next shard: the last record line, from the bytes
    assert max(p.piece.last_record_line() for p in pieces) == max(flat["seq"] + flat["bad_seq"])


def test_counters_and_examples_match_the_whole_file(tmp_path):
    src = tmp_path / "train.jsonl"
    src.write_bytes(_lines(900))
    spec = _spec(64)
    run = Run(spec, Sinks(), None)
    for it in read_rows(spec, str(src), run.state, run.progress):
        for rows in [it] if isinstance(it, Rows) else it.read():
            assert rows.read_notes is not None
            read_notes.record(run.state, rows.read_notes, run.progress)
    read_notes.finish(run.state, spec.fields)
    # the same file parsed whole, in one batch, on the driver
    ref = Run(spec, Sinks(), None)
    shard = resolve_sources(str(src))[0]
    for c in read_shard(shard, ReadOptions(batch_size=10**6, block_bytes=1 << 30)):
        notes = rows_of_chunk(c, 0, None, ["text"]).read_notes
        assert notes is not None
        read_notes.record(ref.state, notes, ref.progress)
    read_notes.finish(ref.state, spec.fields)
    for key in ("read", "read_codes", "read_fixes", "read_examples", "columns_seen"):
        assert getattr(run.state, key) == getattr(ref.state, key), key
    assert run.state.read_codes["parse_error"] > 10
    assert run.state.input_schema.equals(ref.state.input_schema)


def test_workers_parse_the_pieces(tmp_path, monkeypatch):
    """With 2 workers the driver parses one piece; the others are parsed in the workers,
    and the run's rows, quarantine and counters are those of a run in one process."""
    src = tmp_path / "train.jsonl"
    src.write_bytes(_lines(1500))
    log = tmp_path / "parsed-by"
    real = reading.piece_chunks

    def logged(*args, **kwargs):
        with open(log, "a") as fh:
            fh.write(f"{os.getpid()}\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(reading, "piece_chunks", logged)

    def run(workers: int) -> tuple[list, list, dict]:
        kept, dropped = [], []
        sinks = Sinks(kept=lambda r: kept.extend(zip(r.row_ids.to_pylist(),
                                                       r.data.to_pylist(), strict=True)),
                      quarantine=lambda q: dropped.extend(zip(q.row_ids, q.reasons,
                                                              strict=True)))
        state = execute(_spec(), str(src), sinks, workers=workers).finish()
        return kept, dropped, {"read": state.read, "codes": state.read_codes,
                               "fixes": state.read_fixes, "examples": state.read_examples}

    log.unlink(missing_ok=True)
    two = run(2)
    # the driver parses the first piece (it names the fields, warms the workers up); the
    # workers (forked from the driver, or from a fork server where this patch is not
    # seen) parse the others
    pids = [int(x) for x in log.read_text().split()]
    assert pids.count(os.getpid()) == 1
    one = run(1)
    assert two == one
    blank = sum(1 for i in range(1, 1500) if i % 29 == 5)
    assert len(two[1]) > 40 and two[2]["read"] == 1500 - blank


def test_a_broken_line_still_names_file_and_line_from_a_worker(tmp_path):
    lines = [json.dumps({"text": f"row {i}"}) for i in range(400)]
    lines[321] = "{oops"
    src = tmp_path / "train.jsonl"
    src.write_text("\n".join(lines) + "\n")
    spec = spec_from_dict({"fields": ["text"], "stages": [], "batch_size": 32,
                           "input": {"on_parse_error": "fail"}})
    from cleanpipe.io.sources import InputError

    with pytest.raises(InputError, match=rf"{src}:322: not valid JSON"):
        execute(spec, str(src), Sinks(), workers=2).finish()


@pytest.mark.parametrize("block", [1, 777, 1 << 20])
def test_pieces_depend_on_the_file_alone(tmp_path, monkeypatch, block):
    """Pieces end at PIECE_LINES lines or MAX_BATCH_BYTES bytes of lines from the file's
    start, whatever the read block size and the batch size."""
    monkeypatch.setattr(jsonl_reader, "PIECE_LINES", 64)
    monkeypatch.setattr(jsonl_reader, "MAX_BATCH_BYTES", 3000)
    sizes = [(i * 7919) % 90 for i in range(1000)]
    data = b"".join(json.dumps({"text": "x" * n}).encode() + b"\n" for n in sizes)
    src = tmp_path / "t.jsonl"
    src.write_bytes(data)
    shard = resolve_sources(str(src))[0]
    opts = ReadOptions(batch_size=10, block_bytes=block)
    pieces = list(jsonl_pieces(shard, opts, batches=True))
    assert b"".join(p.data for p in pieces) == data
    assert sum(p.raw_bytes for p in pieces) == len(data)
    # each piece: 64 lines, or the lines up to and including the one that crosses 3000 bytes
    lens = [len(json.dumps({"text": "x" * n})) + 1 for n in sizes]
    at = 0
    for p in pieces:
        assert p.lines_before == at
        cum = np.cumsum(lens[at:at + 64])
        crossing = int(np.searchsorted(cum, 3000))
        assert p.lines == (min(64, len(lens) - at) if crossing >= len(cum) else crossing + 1)
        at += p.lines
    assert at == 1000
    # read, a piece gives batches of at most batch_size rows
    batches = [c.batch for p in pieces for c in piece_chunks(shard, p, opts)]
    assert max(b.num_rows for b in batches) == 10
    assert pa.Table.from_batches(batches).column("text").to_pylist() == ["x" * n for n in sizes]


ODD_FILES = [b"\n\n \n", b"\xef\xbb\xbf\n\n", b'{"a":1}', b'{"a":1}\n{"a":2}',
             b'{"a":1}\r\n\r\n', b"\xef\xbb\xbf" + b'{"a":1}\n\n  \n{"a":2}\n \t\r\n\n',
             b"".join(b'{"t":"%s"}\n' % (b"x" * (i % 50)) + b"\n" * (i % 3 == 0)
                      for i in range(300)) + b" \n"]


@pytest.mark.parametrize("block", [1, 3, 100, 1 << 20])
@pytest.mark.parametrize("batches", [True, False])
def test_pieces_number_their_lines_as_a_count_of_the_file_does(tmp_path, block, batches):
    """Each piece's lines, lines before it and last record line equal those counted in the
    whole file, for files of a few bytes (read in one go with the BOM check), blank tails,
    a missing last line break and a BOM: the reader counts each line break once, so a
    count skipped anywhere would shift every seq after it."""
    for i, data in enumerate(ODD_FILES):
        src = tmp_path / f"odd{i}.jsonl"
        src.write_bytes(data)
        shard = resolve_sources(str(src))[0]
        pieces = list(jsonl_pieces(shard, ReadOptions(block_bytes=block), batches=batches))
        assert b"".join(p.data for p in pieces) == data
        lines = data.split(b"\n")
        if lines[-1] == b"":
            lines.pop()  # the break that ends the file starts no line
        for p in pieces:
            assert p.lines_before == data[:p.bytes_before].count(b"\n")
            assert p.lines == len(p.data.split(b"\n")) - p.data.endswith(b"\n")
            numbered = [(n, line.removeprefix(b"\xef\xbb\xbf") if n == 1 else line)
                        for n, line in enumerate(lines, 1)]
            records = [n for n, line in numbered[p.lines_before:p.lines_before + p.lines]
                       if line.strip(b" \t\r")]
            assert p.last_record_line() == (records[-1] if records else 0)
        assert sum(p.lines for p in pieces) == len(lines)


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_pieces_by_range_carry_no_lines_and_read_the_same_rows(tmp_path, suffix):
    """Workers on this machine are sent a plain file's pieces as byte ranges: no lines
    travel, each worker reads its own, and the rows are those read from the bytes. A
    compressed file has no such ranges: its pieces carry their lines."""
    data = _lines(700)
    src = tmp_path / f"train{suffix}"
    src.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    spec = _spec()

    def items(by_range: bool) -> list:
        run = Run(spec, Sinks(), None)
        return list(read_rows(spec, str(src), run.state, run.progress, by_range=by_range))

    ranged, sent = items(True), items(False)
    pieces = [it for it in ranged if isinstance(it, PieceRead)]
    assert len(pieces) > 5
    import pickle

    if suffix == ".jsonl":
        assert all(p.piece.data == b"" and p.piece.stored for p in pieces)
        assert max(len(pickle.dumps(p)) for p in pieces) < 2000
    else:
        assert all(p.piece.data and p.piece.stored is None for p in pieces)

    def read(its: list) -> list[Rows]:
        return [r for it in its
                for r in ([it] if isinstance(it, Rows) else pickle.loads(pickle.dumps(it)).read())]

    assert _flat(read(ranged)) == _flat(read(sent))


def test_a_file_changed_after_it_was_cut_is_an_error_not_other_rows(tmp_path):
    src = tmp_path / "train.jsonl"
    src.write_bytes(_lines(700))
    spec = _spec()
    run = Run(spec, Sinks(), None)
    pieces = [it for it in read_rows(spec, str(src), run.state, run.progress, by_range=True)
              if isinstance(it, PieceRead)]
    data = bytearray(src.read_bytes())
    at = pieces[2].piece.bytes_before + 12
    data[at:at + 3] = b"XYZ"  # the same size: only the bytes tell
    src.write_bytes(bytes(data))
    from cleanpipe.io.sources import InputError

    assert pieces[1].read()  # untouched pieces still read
    with pytest.raises(InputError, match=rf"{src}: the file changed while it was read"):
        pieces[2].read()


def test_a_piece_by_range_of_a_relative_path_reads_from_another_folder(tmp_path, monkeypatch):
    """A worker may run in another folder (a Ray node started elsewhere): the range names
    the file by its absolute path, while messages keep the path as given."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_bytes(_lines(300))
    monkeypatch.chdir(tmp_path)
    spec = _spec()
    run = Run(spec, Sinks(), None)
    pieces = [it for it in read_rows(spec, "data/train.jsonl", run.state, run.progress,
                                     by_range=True) if isinstance(it, PieceRead)]
    assert pieces and all(p.shard.path == "data/train.jsonl" for p in pieces)
    here = _flat([r for p in pieces for r in p.read()])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert _flat([r for p in pieces for r in p.read()]) == here and here["ids"]
