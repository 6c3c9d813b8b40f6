"""Inputs and outputs on pyarrow filesystems: s3:// (a local moto server), file://, errors.

The rule checked throughout: the same corpus gives the same kept rows, quarantine, events
and report counts (and input fingerprint) whether it is read from a disk or a bucket, and
written to a disk or a bucket.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from cleanpipe import Pipeline
from cleanpipe.io.filesystems import reason
from cleanpipe.io.readers import read_table
from cleanpipe.io.sources import InputError, resolve_sources
from cleanpipe.io.uri_output import UriDir
from cleanpipe.io.writers import OutputError
from cleanpipe.stages.exact_dedup import ExactDedup
from cleanpipe.stages.whitespace import Whitespace
from tests._robust_helpers import cli, write_pipeline
from tests._s3_server import S3, s3_server, unique_prefix
from tests.conftest import realdata

PIPELINE = "stages:\n  - {stage: whitespace, action: fix}\n  - stage: exact_dedup\n"


@pytest.fixture(scope="module")
def s3():
    yield from s3_server()


def _corpus(root: Path) -> Path:
    """Shards in folders whose sorted order differs between strings and path components
    (``a-b/`` sorts before ``a/`` as a string, after it as a path), compressed and empty
    shards, a broken line, duplicates across shards, and files a folder read skips."""
    import zstandard

    rows = [{"text": f"row {i}  with  spaces", "n": i} for i in range(6)]
    lines = [json.dumps(r) for r in rows]
    (root / "a").mkdir(parents=True)
    (root / "a-b").mkdir()
    (root / "a" / "part-0.jsonl").write_text(
        "\n".join([*lines[:3], '{"text": broken', "", lines[0]]) + "\n", encoding="utf-8")
    (root / "a-b" / "part-1.jsonl.gz").write_bytes(
        gzip.compress(("\n".join(lines[2:5]) + "\n").encode()))
    (root / "part-2.jsonl.zst").write_bytes(
        zstandard.ZstdCompressor().compress(("\n".join(lines[4:]) + "\n").encode()))
    (root / "empty.jsonl").write_bytes(b"")
    (root / "README.md").write_text("not data")
    (root / ".hidden.jsonl").write_text('{"text": "skipped"}\n')
    return root


def _tables(fs: pafs.FileSystem, base: str, sub: str) -> pa.Table:
    sel = pafs.FileSelector(f"{base}/{sub}", recursive=True)
    files = sorted(i.path for i in fs.get_file_info(sel) if i.path.endswith(".parquet"))
    return pa.concat_tables([pq.read_table(f, filesystem=fs) for f in files])


def _comparable(report: dict[str, Any]) -> dict[str, Any]:
    r = json.loads(json.dumps(report, default=str))
    for s in r["stages"]:
        s.pop("seconds")
        # a dedup stage's diagnostics say where its index lived (driver or Ray's object
        # store) and how big its buffers were: engine facts, not results
        s.pop("diagnostics", None)
    inp = dict(r["input"])
    inp.pop("paths")  # where it was read from: the one thing that differs
    return {"totals": r["totals"], "stages": r["stages"], "input": inp,
            "verdict": r.get("verdict")}


def _same_outputs(local_out: Path, fs: pafs.FileSystem, remote_base: str) -> dict[str, Any]:
    """Assert data, quarantine, events and report of two output folders agree."""
    loc = pafs.LocalFileSystem()
    for sub in ("data", "quarantine"):
        assert _tables(fs, remote_base, sub).equals(_tables(loc, str(local_out), sub)), sub
    with fs.open_input_file(f"{remote_base}/events.parquet") as fh:
        assert pq.read_table(fh).equals(pq.read_table(local_out / "events.parquet"))
    with fs.open_input_stream(f"{remote_base}/report.json") as fh:
        remote = json.loads(fh.readall())
    local = json.loads((local_out / "report.json").read_text(encoding="utf-8"))
    assert _comparable(remote) == _comparable(local)
    assert fs.get_file_info(f"{remote_base}/_SUCCESS").type == pafs.FileType.File
    return local


# ---------------------------------------------------------------------------- s3 end to end


def test_s3_jsonl_in_parquet_out_same_as_local(s3: S3, tmp_path: Path, capsys) -> None:
    corpus = _corpus(tmp_path / "corpus")
    prefix = unique_prefix("e2e")
    s3.upload(corpus, f"{prefix}/in")
    pipe = write_pipeline(tmp_path / "p.yaml", stages="[{stage: whitespace, action: fix},"
                          " {stage: exact_dedup}]")
    code, _, err = cli(capsys, "run", str(pipe), "-i", str(corpus), "-o",
                       str(tmp_path / "local"), "-q")
    assert code == 0, err
    code, _, err = cli(capsys, "run", str(pipe), "-i", s3.uri(f"{prefix}/in/"), "-o",
                       s3.uri(f"{prefix}/out"), "-q")
    assert code == 0, err
    local = _same_outputs(tmp_path / "local", s3.fs, f"cleanpipe-test/{prefix}/out")
    # the fixture exercises what it should: a read error, a fix, a duplicate, 4 shards
    assert local["input"]["files"] == 4
    assert local["totals"]["read"] == 10 and local["totals"]["quarantined"] >= 3
    q = _tables(s3.fs, f"cleanpipe-test/{prefix}/out", "quarantine").to_pylist()
    ids = {r["_cleanpipe_row_id"]: r["_cleanpipe_reasons"] for r in q}
    assert ids["a/part-0.jsonl:4"] == ["parse_error"]  # name:line, relative to the prefix
    assert "a-b/part-1.jsonl.gz:1" in ids  # a row also in a/ (path order: a/ read first)
    # nothing left but the output: no temporary prefix, the marker present
    keys = s3.keys(prefix)
    assert not [k for k in keys if ".tmp-" in k]
    assert f"{prefix}/out/_SUCCESS" in keys


def test_s3_text_shards_downloaded_once(s3: S3, tmp_path: Path, monkeypatch) -> None:
    """The fingerprint and the reader share one download of a remote JSONL shard."""
    import cleanpipe.engine.reading as reading
    import cleanpipe.io.readers.opening as opening

    corpus = _corpus(tmp_path / "corpus")
    prefix = unique_prefix("once")
    s3.upload(corpus, f"{prefix}/in")
    local = Pipeline(stages=[]).run(str(corpus), None)
    fetched: list[str] = []

    def counting(fs: pafs.FileSystem, path: str) -> bytes:
        fetched.append(path)
        return real(fs, path)

    real = reading.read_bytes
    monkeypatch.setattr(reading, "read_bytes", counting)
    monkeypatch.setattr(opening, "read_bytes", counting)
    monkeypatch.setattr(reading, "iter_blocks", lambda *a: pytest.fail("read twice"))
    report = Pipeline(stages=[]).run(s3.uri(f"{prefix}/in"), None)
    assert sorted(fetched) == sorted(f"cleanpipe-test/{prefix}/in/{n}" for n in (
        "a/part-0.jsonl", "a-b/part-1.jsonl.gz", "empty.jsonl", "part-2.jsonl.zst"))
    assert report["input"]["fingerprint"] == local["input"]["fingerprint"]


def test_s3_overwrite_semantics(s3: S3, tmp_path: Path, capsys) -> None:
    src = tmp_path / "x.jsonl"
    src.write_text('{"text": "a"}\n{"text": "b"}\n', encoding="utf-8")
    pipe = write_pipeline(tmp_path / "p.yaml")
    prefix = unique_prefix("ow")
    s3.put(f"{prefix}/out/stale.txt", b"not written by cleanpipe")
    for extra in ((), ("--overwrite",)):  # a folder cleanpipe did not write is never replaced
        code, _, err = cli(capsys, "run", str(pipe), "-i", str(src), "-o",
                           s3.uri(f"{prefix}/out"), *extra)
        assert code == 2
        assert err.strip() == (f"cleanpipe: s3://cleanpipe-test/{prefix}/out: not replaced:"
                               " it was not written by cleanpipe (no _cleanpipe.json; it holds"
                               " stale.txt); choose another --output")
        assert s3.keys(prefix) == [f"{prefix}/out/stale.txt"]  # refused before any work
    new = s3.uri(f"{prefix}/new")
    assert cli(capsys, "run", str(pipe), "-i", str(src), "-o", new, "-q")[0] == 0
    code, _, err = cli(capsys, "run", str(pipe), "-i", str(src), "-o", new)
    assert code == 2
    assert err.strip() == (f"cleanpipe: s3://cleanpipe-test/{prefix}/new: already exists;"
                           " pass --overwrite to replace it")
    code, _, err = cli(capsys, "run", str(pipe), "-i", str(src), "-o", new, "--overwrite", "-q")
    assert code == 0, err
    keys = s3.keys(f"{prefix}/new")
    assert f"{prefix}/new/_SUCCESS" in keys and f"{prefix}/new/_cleanpipe.json" in keys
    assert f"{prefix}/new/data/train-00000-of-00001.parquet" in keys


def test_s3_check_writes_reports_to_a_uri(s3: S3, tmp_path: Path, capsys) -> None:
    prefix = unique_prefix("chk")
    s3.put(f"{prefix}/in/x.jsonl", b'{"text": "a"}\n{"text": "a"}\n')
    pipe = write_pipeline(tmp_path / "p.yaml", stages="[{stage: exact_dedup}]")
    code, _, err = cli(capsys, "check", str(pipe), "-i", s3.uri(f"{prefix}/in/x.jsonl"),
                       "--report-dir", s3.uri(f"{prefix}/reports"), "-q")
    assert code == 0, err
    assert {"report.json", "report.md", "report.html", "junit.xml"} <= {
        k.rsplit("/", 1)[1] for k in s3.keys(f"{prefix}/reports")}
    with s3.fs.open_input_stream(f"cleanpipe-test/{prefix}/reports/report.json") as fh:
        assert json.loads(fh.readall())["totals"]["quarantined"] == 1


@pytest.mark.realdata
def test_s3_t0_shards_same_as_local(s3: S3, tmp_path: Path) -> None:
    src = realdata("sft_self_instruct_t0_50k", "data_per_template")
    names = ["trec_fine_grained_HUM.jsonl",  # an empty shard
             "trec_fine_grained_open.jsonl", "trec_fine_grained_open_context_first.jsonl",
             "wiki_qa_Generate_Question_from_Topic.jsonl"]
    local_in = tmp_path / "in"
    local_in.mkdir()
    for n in names:
        shutil.copy(src / n, local_in / n)
    prefix = unique_prefix("t0")
    s3.upload(local_in, f"{prefix}/in")

    def make() -> Pipeline:
        return Pipeline(stages=[Whitespace(action="fix"), ExactDedup()], batch_size=512)

    make().run(str(local_in), tmp_path / "local")
    report = make().run(s3.uri(f"{prefix}/in"), s3.uri(f"{prefix}/out"))
    local = _same_outputs(tmp_path / "local", s3.fs, f"cleanpipe-test/{prefix}/out")
    assert local["totals"]["read"] > 300 and local["input"]["files"] == 4
    assert report["input"]["paths"] == [f"s3://cleanpipe-test/{prefix}/in"
                                        + s3.query]  # the query holds no secret here
    t = local["totals"]
    assert t["kept"] + t["quarantined"] == t["read"] and t["changed"] > 0


def test_s3_readers_match_local(s3: S3, tmp_path: Path) -> None:
    """Every format through the remote open path: streams, seekable files, save_to_disk."""
    import datasets
    import zstandard

    d = tmp_path / "formats"
    d.mkdir()
    t = pa.table({"text": ["héllo", "wörld", "x"], "n": [1, 2, 3]})
    pq.write_table(t, d / "a.parquet")
    (d / "b.csv.gz").write_bytes(gzip.compress(b"text,n\nhi,1\n\"multi\nline\",2\n"))
    (d / "c.txt.zst").write_bytes(zstandard.ZstdCompressor().compress(b"one\n\ntwo\n"))
    (d / "d.json").write_text(json.dumps([{"text": "j1"}, {"text": "j2"}]), encoding="utf-8")
    with pa.OSFile(str(d / "e.arrow"), "wb") as fh, pa.ipc.new_file(fh, t.schema) as w:
        w.write_table(t)
    datasets.Dataset.from_dict({"text": ["s1", "s2"]}).save_to_disk(str(d / "f_saved"))
    prefix = unique_prefix("fmt")
    s3.upload(d, prefix)
    local_shards = resolve_sources(str(d))
    remote_shards = resolve_sources(s3.uri(prefix))
    assert [(s.name, s.format, s.compression) for s in remote_shards] == [
        (s.name, s.format, s.compression) for s in local_shards]
    assert [s.format for s in remote_shards] == ["parquet", "csv", "text", "json", "arrow", "hf"]
    for loc, rem in zip(local_shards, remote_shards, strict=True):
        assert rem.path.startswith("s3://cleanpipe-test/")
        assert read_table(s3.uri(rem.open_path.split("/", 1)[1])).equals(
            read_table(loc.path)), loc.name


# ---------------------------------------------------------------------------- errors


def _one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("case", ["no bucket", "no key", "no match", "empty folder",
                                  "out no bucket", "out bucket root", "out is a file",
                                  "unknown scheme"])
def test_s3_errors_are_one_line(s3: S3, tmp_path: Path, capsys, case: str) -> None:
    src = tmp_path / "x.jsonl"
    src.write_text('{"text": "a"}\n', encoding="utf-8")
    prefix = unique_prefix("err")
    s3.put(f"{prefix}/in/notes.md", b"no data here")
    s3.put(f"{prefix}/file", b"x")
    out = s3.uri(f"{prefix}/out")
    inp, code, expected = {
        "no bucket": (s3.uri("x/", bucket="no-such-bucket"), 3,
                      "s3://no-such-bucket/x: the bucket 'no-such-bucket' does not exist"),
        "no key": (s3.uri(f"{prefix}/in/absent.jsonl"), 3,
                   f"s3://cleanpipe-test/{prefix}/in/absent.jsonl: no such file or directory"),
        "no match": (s3.uri(f"{prefix}/in/*.jsonl"), 3,
                     f"s3://cleanpipe-test/{prefix}/in/*.jsonl: the pattern matches no file"),
        "empty folder": (s3.uri(f"{prefix}/in/"), 3,
                         f"s3://cleanpipe-test/{prefix}/in: the folder holds no readable"),
        "out no bucket": (str(src), 2, "s3://no-such-bucket/out: the bucket does not exist"),
        "out bucket root": (str(src), 2, "s3://cleanpipe-test: the output must be a folder"),
        "out is a file": (str(src), 2, f"s3://cleanpipe-test/{prefix}/file: exists and is not"),
        "unknown scheme": ("nosuchfs://bucket/x.jsonl", 3,
                           "nosuchfs://bucket/x.jsonl: cannot open this location"),
    }[case]
    if case == "out no bucket":
        out = s3.uri("out", bucket="no-such-bucket")
    elif case == "out bucket root":
        out = f"s3://cleanpipe-test{s3.query}"
    elif case == "out is a file":
        out = s3.uri(f"{prefix}/file")
    pipe = write_pipeline(tmp_path / "p.yaml")
    got, _, err = cli(capsys, "run", str(pipe), "-i", inp, "-o", out, "--overwrite")
    assert got == code, err
    assert _one_line(err).startswith(f"cleanpipe: {expected}")
    assert not [k for k in s3.keys(prefix) if "/out" in k]  # nothing written


def test_unreachable_endpoint_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    from tests._s3_server import FAKE_ENV, _free_port

    for k, v in FAKE_ENV.items():
        monkeypatch.setenv(k, v)
    port = _free_port()  # nothing listens there
    uri = f"s3://bucket/x.jsonl?endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
    pipe = write_pipeline(tmp_path / "p.yaml")
    code, _, err = cli(capsys, "run", str(pipe), "-i", uri, "-o", str(tmp_path / "o"))
    assert code == 3
    assert _one_line(err) == ("cleanpipe: s3://bucket/x.jsonl: cannot list: cannot reach the"
                              " storage endpoint (network, or a wrong endpoint_override)")


def test_reason_names_credentials_problems() -> None:
    # what AWS answers for a wrong key or a missing permission (moto does not check keys)
    denied = OSError("When getting information for key 'x' in bucket 'b': AWS Error "
                     "ACCESS_DENIED during HeadObject operation: No response body.")
    assert reason(denied).startswith("access denied (ACCESS_DENIED): check the credentials")
    bad_key = OSError("When listing objects under key '' in bucket 'b': AWS Error "
                      "INVALID_ACCESS_KEY_ID during ListObjectsV2 operation: The AWS Access "
                      "Key Id you provided does not exist in our records. (Request ID: 1)")
    assert "AWS_ACCESS_KEY_ID" in reason(bad_key) and "Request ID" not in reason(bad_key)


def test_credentials_in_uri_stay_out_of_report_and_errors(tmp_path: Path, capsys) -> None:
    src = tmp_path / "x.jsonl"
    src.write_text('{"text": "a"}\n', encoding="utf-8")
    pipe = write_pipeline(tmp_path / "p.yaml")
    uri = "s3://AKIDSECRET:verysecret@no-such-bucket/x.jsonl?secret_key=verysecret"
    code, _, err = cli(capsys, "run", str(pipe), "-i", uri, "-o", str(tmp_path / "o"))
    assert code == 3 and "verysecret" not in err and "AKIDSECRET" not in err
    p = Pipeline(stages=[])
    report = p.run(str(src), None)
    assert "verysecret" not in json.dumps(p._report(p.last_state, [uri], None, False))
    assert report["totals"]["read"] == 1


# ---------------------------------------------------------------------------- file://


def test_file_uris_same_as_local_paths(tmp_path: Path, capsys) -> None:
    corpus = _corpus(tmp_path / "corpus")
    pipe = write_pipeline(tmp_path / "p.yaml", stages="[{stage: whitespace, action: fix},"
                          " {stage: exact_dedup}]")
    assert cli(capsys, "run", str(pipe), "-i", str(corpus), "-o", str(tmp_path / "plain"),
               "-q")[0] == 0
    out_uri = (tmp_path / "uri").as_uri()
    assert cli(capsys, "run", str(pipe), "-i", corpus.as_uri() + "/", "-o", out_uri, "-q")[0] == 0
    _same_outputs(tmp_path / "plain", pafs.LocalFileSystem(), str(tmp_path / "uri"))
    assert not list(tmp_path.glob(".uri.tmp-*"))  # the local atomic rename, as for a path
    # a glob URI lists like a local glob: same shards, order (as strings) and names, no
    # hidden files (the pattern names no leading dot)
    for pattern in ("**/*.jsonl*", "*/*.jsonl*", "a/*.jsonl", ".*.jsonl"):
        local = [(s.name, s.size) for s in resolve_sources(str(corpus / pattern))]
        remote = [(s.name, s.size) for s in resolve_sources(f"{corpus.as_uri()}/{pattern}")]
        assert remote == local, pattern
    assert [n for n, _ in local] == [".hidden.jsonl"]
    assert [s.name for s in resolve_sources(corpus.as_uri() + "/**/*.jsonl*")] == [
        "a-b/part-1.jsonl.gz", "a/part-0.jsonl", "empty.jsonl", "part-2.jsonl.zst"]
    with pytest.raises(InputError, match="file:///nonexistent/x: no such file or directory"):
        resolve_sources("file:///nonexistent/x")


# ---------------------------------------------------------------------------- commit order


class _Recorder:
    """An fsspec local filesystem seen by pyarrow as a foreign one (not LocalFileSystem),
    so :class:`UriDir` takes its object-store path; it logs moves and writes, and can fail
    the n-th move."""

    def __init__(self, fail_move: int | None = None, no_move: bool = False) -> None:
        import fsspec.implementations.local as fl

        log: list[tuple[str, str]] = []
        fail = [fail_move]

        class Local(fl.LocalFileSystem):
            cachable = False

            def mv(self, path1: str, path2: str, **kw: Any) -> None:
                if no_move:
                    raise NotImplementedError("this store cannot move")
                log.append(("mv", path2))
                if fail[0] is not None and sum(1 for e in log if e[0] == "mv") == fail[0]:
                    raise OSError("simulated: the store dropped the connection")
                super().mv(path1, path2, **kw)

            def open(self, path: str, mode: str = "rb", **kw: Any) -> Any:
                if "w" in mode:
                    log.append(("write", path))
                return super().open(path, mode, **kw)

        self.log = log
        self.fs = pafs.PyFileSystem(pafs.FSSpecHandler(Local()))


def _fill(tmp: Path) -> None:
    (tmp / "data").mkdir()
    (tmp / "data" / "train-00000-of-00001.parquet").write_bytes(b"x")
    (tmp / "report.json").write_text("{}")


def test_uri_dir_writes_success_marker_last(tmp_path: Path) -> None:
    rec = _Recorder()
    target = str(tmp_path / "bucket" / "out")
    (tmp_path / "bucket").mkdir()
    out = UriDir(rec.fs, target, "mem://bucket/out")
    with out as staging:
        _fill(staging)
        out.commit()
    assert not staging.exists()
    moved = [p for op, p in rec.log if op == "mv"]
    assert sorted(Path(p).relative_to(target).as_posix() for p in moved) == [
        "_cleanpipe.json", "data/train-00000-of-00001.parquet", "report.json"]
    assert rec.log[-1] == ("write", f"{target}/_SUCCESS")
    assert sorted(p.name for p in (tmp_path / "bucket").iterdir()) == ["out"]  # no tmp prefix


def test_uri_dir_without_move_copies(tmp_path: Path) -> None:
    rec = _Recorder(no_move=True)
    (tmp_path / "bucket").mkdir()
    target = tmp_path / "bucket" / "out"
    out = UriDir(rec.fs, str(target), "mem://bucket/out")
    with out as staging:
        _fill(staging)
        out.commit()
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()
                  ) == ["_SUCCESS", "_cleanpipe.json", "data/train-00000-of-00001.parquet",
                        "report.json"]
    assert sorted(p.name for p in (tmp_path / "bucket").iterdir()) == ["out"]


def test_uri_dir_failed_move_leaves_no_marker(tmp_path: Path) -> None:
    rec = _Recorder(fail_move=2)
    (tmp_path / "bucket").mkdir()
    target = tmp_path / "bucket" / "out"
    out = UriDir(rec.fs, str(target), "mem://bucket/out")
    with pytest.raises(OutputError, match=r"^mem://bucket/out: cannot move the output into"
                       r" place \(no _SUCCESS marker"):
        with out as staging:
            _fill(staging)
            out.commit()
    assert not (target / "_SUCCESS").exists()
    assert not staging.exists()
    assert sorted(p.name for p in (tmp_path / "bucket").iterdir()) == ["out"]


def test_uri_dir_error_during_run_uploads_nothing(tmp_path: Path) -> None:
    rec = _Recorder()
    (tmp_path / "bucket").mkdir()
    out = UriDir(rec.fs, str(tmp_path / "bucket" / "out"), "mem://bucket/out")
    with pytest.raises(RuntimeError):
        with out as staging:
            _fill(staging)
            raise RuntimeError("a stage failed")
    assert not staging.exists() and not list((tmp_path / "bucket").iterdir())
    assert not rec.log


# ---------------------------------------------------------------------------- ray engine


@pytest.mark.ray
def test_ray_engine_reads_and_writes_s3(s3: S3, tmp_path: Path) -> None:
    ray = pytest.importorskip("ray", reason="ray is not installed (the ray extra)")
    corpus = _corpus(tmp_path / "corpus")
    prefix = unique_prefix("ray")
    s3.upload(corpus, f"{prefix}/in")

    def make() -> Pipeline:
        return Pipeline(stages=[Whitespace(action="fix"), ExactDedup()], batch_size=2)

    make().run(str(corpus), tmp_path / "local")
    # workers import cleanpipe from this checkout, as the driver does
    repo = Path(__file__).resolve().parents[1]
    ray.init(address="local", num_cpus=2, include_dashboard=False,
             object_store_memory=1 << 29,
             log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": str(repo)}})
    try:
        make().run(s3.uri(f"{prefix}/in/"), s3.uri(f"{prefix}/out"), engine="ray")
    finally:
        ray.shutdown()
    _same_outputs(tmp_path / "local", s3.fs, f"cleanpipe-test/{prefix}/out")
