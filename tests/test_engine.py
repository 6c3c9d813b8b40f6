"""Engine: streaming, conservation, provenance, nested round-trips, outputs, workers."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from cleanpipe import Pipeline
from cleanpipe.contract.stage import (
    Action,
    BatchResult,
    BatchStage,
    Findings,
    GlobalStage,
    TextResult,
    TextStage,
)
from tests.conftest import realdata


class Shout(TextStage):
    """Upper-cases strings containing "!" (fix), drops strings containing "DROPME"."""

    name = "_test_shout"
    codes = {"bang": Action.FIX, "dropme": Action.DROP}

    def transform(self, texts: pa.Array) -> TextResult:
        f = Findings(self.name)
        bang = pc.fill_null(pc.match_substring(texts, "!"), False)
        drop = pc.fill_null(pc.match_substring(texts, "DROPME"), False)
        f.add(bang, "bang", self.action_of("bang"))
        f.add(drop, "dropme", self.action_of("dropme"))
        if self.action_of("bang") is not Action.FIX:
            return TextResult(texts, f)
        return TextResult(pc.if_else(bang, pc.utf8_upper(texts), texts), f)


class OddSeq(GlobalStage):
    """Drops every row whose text was already seen (keep first): a toy global stage."""

    name = "_test_dedupish"
    codes = {"dup": Action.DROP}

    def model_post_init(self, __context: object) -> None:
        self._seen: dict[str, int] = {}
        self._drop: set[int] = set()

    def prepare(self, batch, ctx):
        return ctx.texts(ctx.text_fields[0]).values.to_pylist()

    def observe(self, prepared, seq, batch, ctx):
        for s, t in zip(seq.tolist(), prepared, strict=True):
            if t in self._seen:
                self._drop.add(s)
            else:
                self._seen[t] = s

    def decide(self, batch, seq, ctx):
        f = Findings(self.name)
        mask = np.array([s in self._drop for s in seq.tolist()], dtype=bool)
        f.add(mask, "dup", self.action_of("dup"), detail="seen before")
        return BatchResult(None, f)


class NeedsLabel(BatchStage):
    name = "_test_label"
    codes = {"no_label": Action.FLAG}

    def process(self, batch, ctx):
        f = Findings(self.name)
        f.add(pc.is_null(batch.column("label")), "no_label", self.action_of("no_label"))
        return BatchResult(None, f)


def _write_jsonl(path: Path, recs: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs))


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    d = tmp_path / "in"
    d.mkdir()
    _write_jsonl(d / "a.jsonl", [{"text": "hi!", "label": 1}, {"text": "plain", "label": None},
                                 {"text": "x DROPME", "label": 2}])
    (d / "b.jsonl").write_text("")  # an empty shard
    _write_jsonl(d / "c.jsonl", [{"text": "plain", "label": 3}, {"text": "z\u2028z", "label": 4}])
    (d / "d.jsonl").write_text('{"text": "ok", "label": 5}\n{not json\n')
    return d


def test_conservation_ids_and_reasons(corpus: Path, tmp_path: Path) -> None:
    p = Pipeline(stages=[Shout(), NeedsLabel(), OddSeq()], fields=["text"])
    out = tmp_path / "out"
    r = p.run(corpus, out)
    t = r["totals"]
    assert t["read"] == 7 and t["kept"] + t["quarantined"] == t["read"]
    kept = pq.read_table(out / "data")
    assert kept.column("text").to_pylist() == ["HI!", "plain", "z\u2028z", "ok"]
    q = pq.read_table(out / "quarantine").to_pylist()
    by_id = {row["_cleanpipe_row_id"]: row for row in q}
    assert set(by_id) == {"a.jsonl:3", "c.jsonl:1", "d.jsonl:2"}
    assert by_id["a.jsonl:3"]["_cleanpipe_reasons"] == ["dropme"]
    assert by_id["a.jsonl:3"]["text"] == "x DROPME"  # unchanged
    assert by_id["c.jsonl:1"]["_cleanpipe_reasons"] == ["dup"]
    assert by_id["d.jsonl:2"]["_cleanpipe_reasons"] == ["parse_error"]
    assert by_id["d.jsonl:2"]["_cleanpipe_raw"] == "{not json"
    stages = {s["name"]: s for s in r["stages"]}
    assert stages["_test_shout"]["changed"] == 1
    assert stages["_test_label"]["flagged"] == 1
    assert stages["_test_dedupish"]["dropped"] == 1
    ev = pq.read_table(out / "events.parquet").to_pylist()
    assert {(e["row_id"], e["code"]) for e in ev} == {
        ("a.jsonl:1", "bang"), ("a.jsonl:3", "dropme"), ("a.jsonl:2", "no_label"),
        ("c.jsonl:1", "dup")}
    assert (out / "_SUCCESS").exists()


def test_outputs_reopen_with_datasets(corpus: Path, tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    for fmt in ("parquet", "jsonl", "hf"):
        p = Pipeline(stages=[Shout()], fields=["text"], output={"format": fmt})
        out = tmp_path / f"out-{fmt}"
        p.run(corpus, out)
        if fmt == "hf":
            ds = datasets.load_from_disk(str(out / "data"))
        else:
            ds = datasets.load_dataset(str(out), split="train")
        assert ds["text"] == ["HI!", "plain", "plain", "z\u2028z", "ok"]
        qds = datasets.load_dataset(str(out), "quarantine", split="train") if fmt != "hf" \
            else None
        if qds is not None:
            assert qds["_cleanpipe_row_id"] == ["a.jsonl:3", "d.jsonl:2"]


def test_existing_output_needs_overwrite(corpus: Path, tmp_path: Path) -> None:
    from cleanpipe.io.writers import OutputError

    out = tmp_path / "o"
    p = Pipeline(stages=[], fields=["text"])
    p.run(corpus, out)
    with pytest.raises(OutputError, match="--overwrite"):
        p.run(corpus, out)
    p.run(corpus, out, overwrite=True)
    assert not list(tmp_path.glob(".o.tmp-*"))


def test_workers_and_batch_size_do_not_change_output(corpus: Path, tmp_path: Path) -> None:
    outs = []
    for workers, bs in ((1, 4096), (2, 1), (2, 2)):
        p = Pipeline(stages=[Shout(), OddSeq()], fields=["text"], batch_size=bs)
        out = tmp_path / f"o{workers}{bs}"
        r = p.run(corpus, out, workers=workers)
        outs.append(((out / "data" / "train-00000-of-00001.parquet").read_bytes(),
                     pq.read_table(out / "quarantine").to_pylist(), r["totals"]))
    assert outs[0] == outs[1] == outs[2]


class FakeClock:
    """Stands in for ``time.perf_counter``: time passes only when a test stage says so."""

    def __init__(self) -> None:
        self.now = 0.0
        self.ticks: dict[str, int] = {}

    def __call__(self) -> float:
        return self.now

    def spend(self, who: str, seconds: float) -> None:
        self.now += seconds
        self.ticks[who] = self.ticks.get(who, 0) + 1


CLOCK = FakeClock()


class Slow(TextStage):
    """Changes nothing, and takes 1 s of the fake clock per call: an expensive stage
    upstream of a global one."""

    name = "_test_slow"
    codes = {}

    def transform(self, texts: pa.Array) -> TextResult:
        CLOCK.spend(self.name, 1.0)
        return TextResult(texts, Findings(self.name))


class SlowObserve(OddSeq):
    """The toy global stage, taking 100 s of the fake clock per observed batch."""

    name = "_test_slow_observe"

    def observe(self, prepared, seq, batch, ctx):
        CLOCK.spend(self.name, 100.0)
        super().observe(prepared, seq, batch, ctx)


def test_global_stage_seconds_exclude_upstream_stages(corpus: Path, monkeypatch) -> None:
    # In one process the global stage's first pass pulls every batch through the stages
    # before it; their time must not be booked to it (the profile benchmark ranks stages
    # by these seconds). A fake clock makes the seconds exact.
    monkeypatch.setattr(time, "perf_counter", CLOCK)
    monkeypatch.setattr(CLOCK, "ticks", {})
    report = Pipeline(stages=[Slow(), SlowObserve()], fields=["text"], batch_size=1).run(
        corpus, workers=1)
    booked = {s["name"]: s["seconds"] for s in report["stages"]}
    assert CLOCK.ticks == {"_test_slow": 6, "_test_slow_observe": 6}  # 6 readable rows
    # exactly what each stage spent of the fake clock: none of the upstream 6 x 1 s went to
    # the global stage
    assert booked == {"_test_slow": 6 * 1.0, "_test_slow_observe": 6 * 100.0}


def test_engine_run_gives_its_state_once_the_rows_are_consumed(corpus: Path) -> None:
    """``execute`` returns a run object, not a generator whose StopIteration carries the
    state: the state is there after the last kept row, and not before."""
    from cleanpipe.engine.core import Sinks
    from cleanpipe.engine.local import execute

    spec = Pipeline(stages=[Shout()], fields=["text"]).spec
    kept: list[str] = []
    run = execute(spec, corpus, Sinks(kept=lambda rows: kept.extend(rows.row_ids.to_pylist())),
                  workers=1)
    with pytest.raises(RuntimeError, match="not finished"):
        run.state  # noqa: B018 - the property is what is tested
    ids = [i for rows in run for i in rows.row_ids.to_pylist()]
    assert ids == kept == ["a.jsonl:1", "a.jsonl:2", "c.jsonl:1", "c.jsonl:2", "d.jsonl:1"]
    assert run.state.kept == 5 and run.state.quarantined == 2 and run.state.read == 7
    again = execute(spec, corpus, Sinks(), workers=1).finish()
    assert (again.kept, again.quarantined) == (5, 2)


def test_generator_form(corpus: Path) -> None:
    p = Pipeline(stages=[Shout()], fields=["text"])
    texts = [t for b in p.iter_batches(corpus) for t in b.column("text").to_pylist()]
    assert texts == ["HI!", "plain", "plain", "z\u2028z", "ok"]
    assert p.last_state is not None and p.last_state.quarantined == 2


def test_nested_round_trip_and_rewrite(tmp_path: Path) -> None:
    recs = [{"conversations": [{"from": "human", "value": "a!"}, {"from": "gpt", "value": "b"}],
             "system": None},
            {"conversations": [], "system": "s"}]
    src = tmp_path / "chat.json"
    src.write_text(json.dumps(recs))
    p = Pipeline(stages=[Shout()], fields=["conversations[*].value"])
    p.run(src, tmp_path / "o")
    t = pq.read_table(tmp_path / "o" / "data")
    assert t.to_pylist() == [
        {"conversations": [{"from": "human", "value": "A!"}, {"from": "gpt", "value": "b"}],
         "system": None}, {"conversations": [], "system": "s"}]


def test_in_memory_inputs() -> None:
    pl = pytest.importorskip("polars")
    datasets = pytest.importorskip("datasets")
    p = Pipeline(stages=[Shout()], fields=["text"])
    for src in (pa.table({"text": ["a!", "b"]}), pl.DataFrame({"text": ["a!", "b"]}),
                datasets.Dataset.from_dict({"text": ["a!", "b"]})):
        out = [t for b in p.iter_batches(src) for t in b.column("text").to_pylist()]
        assert out == ["A!", "b"]


@pytest.mark.realdata
def test_t0_all_shards_passthrough(tmp_path: Path) -> None:
    src = realdata("sft_self_instruct_t0_50k", "data_per_template")
    p = Pipeline(stages=[], fields=["prompt", "completion"])
    r = p.run(src, tmp_path / "o")
    assert r["input"]["files"] == 294
    assert r["totals"]["read"] == r["totals"]["kept"] == 55185
    t = pq.read_table(tmp_path / "o" / "data")
    assert t.num_rows == 55185 and t.schema.names == ["prompt", "completion"]


@pytest.mark.realdata
def test_iflytek_u2028_not_split(tmp_path: Path) -> None:
    src = realdata("cls_fewclue_tnews_iflytek_eprstmt", "iflytek", "train_few_all.json")
    raw = src.read_bytes()
    n_lines = raw.count(b"\n") + (0 if raw.endswith(b"\n") else 1)
    assert "\u2028".encode() in raw
    p = Pipeline(stages=[], fields=["sentence"])
    r = p.run(src, tmp_path / "o")
    assert r["totals"]["read"] == n_lines == r["totals"]["kept"]
    texts = pq.read_table(tmp_path / "o" / "data").column("sentence").to_pylist()
    assert any("\u2028" in t for t in texts)


@pytest.mark.realdata
@pytest.mark.parametrize("name,field", [("alpaca_en_demo.json", "output"),
                                        ("glaive_toolcall_en_demo.json",
                                         "conversations[*].value")])
def test_llamafactory_round_trip_unchanged(tmp_path: Path, name: str, field: str) -> None:
    src = realdata("sft_llamafactory_demos", name)
    p = Pipeline(stages=[Shout(actions={"bang": "flag", "dropme": "flag"})], fields=[field])
    p.run(src, tmp_path / "o")
    original = json.loads(src.read_text())
    t = pq.read_table(tmp_path / "o" / "data")
    assert t.to_pylist() == original


@pytest.mark.realdata
def test_real_outputs_reopen_with_datasets(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    src = realdata("sft_llamafactory_demos", "alpaca_zh_demo.json")
    original = json.loads(src.read_text())
    for fmt in ("parquet", "jsonl", "hf"):
        p = Pipeline(stages=[], fields=["instruction", "input", "output"],
                     output={"format": fmt})
        out = tmp_path / fmt
        r = p.run(src, out)
        assert r["totals"]["kept"] == len(original)
        ds = (datasets.load_from_disk(str(out / "data")) if fmt == "hf"
              else datasets.load_dataset(str(out), split="train"))
        assert ds.to_list() == original


@pytest.mark.parametrize("workers", [1, 2])
def test_workers_keep_rows_between_dedup_stages_and_the_spill_serves_the_others(
        tmp_path: Path, monkeypatch, workers: int) -> None:
    """Between two stages that decide from a decisions table (the dedups), each worker keeps
    the rows it cleaned (engine.held_rows) and the driver sees none of their columns; a
    global stage without one (``OddSeq``) still gets its rows back through the driver's
    spill. Either way the output is that of one process with the spill alone."""
    from cleanpipe.engine import local
    from cleanpipe.io.readers import jsonl as jsonl_reader
    from cleanpipe.stages.exact_dedup import ExactDedup
    from cleanpipe.stages.minhash_dedup import MinHashDedup

    # pieces of 256 lines: the workers parse most of them, each in two 128-row batches
    monkeypatch.setattr(jsonl_reader, "PIECE_LINES", 256)
    src = tmp_path / "in.jsonl"
    _write_jsonl(src, [{"text": f"row {i % 300} " + "w " * (i % 5)} for i in range(2000)])

    def run(stages: list, out: Path) -> tuple[dict, list]:
        spilled: list[list[str]] = []
        real = local.Spill.write

        def write(self, rows):
            spilled.append(rows.data.schema.names)
            real(self, rows)

        monkeypatch.setattr(local.Spill, "write", write)
        rep = Pipeline(stages=stages, fields=["text"], batch_size=128).run(
            src, out, workers=workers)
        monkeypatch.setattr(local.Spill, "write", real)
        rows = (pq.read_table(out / "data").to_pylist(),
                pq.read_table(out / "quarantine").to_pylist())
        return {"totals": rep["totals"], "rows": rows}, spilled

    held, spilled = run([ExactDedup(), OddSeq(), MinHashDedup()], tmp_path / "held")
    # only OddSeq's first pass came back to the driver: 2000 rows in 128-row batches
    assert spilled and all(names == ["text"] for names in spilled)
    assert len(spilled) <= 2000 // 128 + 1

    # the reference: every global stage decided by the driver, from its spill
    monkeypatch.setattr(ExactDedup, "has_decisions_table", lambda self: False)
    monkeypatch.setattr(MinHashDedup, "has_decisions_table", lambda self: False)
    ref, spilled_ref = run([ExactDedup(), OddSeq(), MinHashDedup()], tmp_path / "ref")
    assert len(spilled_ref) > len(spilled)
    assert held == ref and held["totals"]["quarantined"] > 1000


def test_held_rows_files_go_once_the_next_segment_has_read_them(tmp_path: Path,
                                                                 monkeypatch) -> None:
    """A segment's held-rows files are deleted as soon as the next segment has read them,
    not at the end of the run: with two dedups, the first one's files are gone when the
    second one finalizes, and only then do the second one's exist."""
    from cleanpipe.engine import local
    from cleanpipe.io.readers import jsonl as jsonl_reader
    from cleanpipe.stages.exact_dedup import ExactDedup
    from cleanpipe.stages.minhash_dedup import MinHashDedup

    monkeypatch.setattr(jsonl_reader, "PIECE_LINES", 256)
    src = tmp_path / "in.jsonl"
    _write_jsonl(src, [{"text": f"row {i % 300} " + "w " * (i % 5)} for i in range(2000)])
    seen: list[list[str]] = []
    real = local.LocalEngine.second_pass

    def second_pass(self, idx, decisions):
        seen.append(sorted(p.name.rsplit("-", 1)[0] for p in self.spill_dir.iterdir()
                           if p.name.startswith("held-")))
        real(self, idx, decisions)

    monkeypatch.setattr(local.LocalEngine, "second_pass", second_pass)
    rep = Pipeline(stages=[ExactDedup(), MinHashDedup()], fields=["text"],
                   batch_size=128).run(src, tmp_path / "out", workers=2)
    assert rep["totals"]["quarantined"] > 1000
    assert len(seen) == 2
    assert seen[0] and set(seen[0]) == {"held-0"}
    assert seen[1] and set(seen[1]) == {"held-1"}


def test_large_task_outputs_come_back_through_files_and_leave_none(tmp_path: Path,
                                                                   monkeypatch) -> None:
    """With worker processes, a task output of megabytes (a last segment's rows, a dedup's
    sketches) comes back through a file of the spill folder (engine.shipping), removed as
    soon as it is read; the run's output is that of one process."""
    from cleanpipe.engine import shipping
    from cleanpipe.stages.exact_dedup import ExactDedup
    from cleanpipe.stages.minhash_dedup import MinHashDedup

    src = tmp_path / "in.jsonl"
    _write_jsonl(src, [{"text": f"row {i % 3000} " + "long text " * 60}
                       for i in range(12000)])
    loaded: list[list[str]] = []
    real = shipping.Shipped.load

    def load(self):
        folder = Path(self.path).parent if self.path is not None else None
        out = real(self)
        if folder is not None:  # an output that came back through a file
            loaded.append(sorted(p.name for p in folder.iterdir() if p.name.startswith("out-")))
        return out

    monkeypatch.setattr(shipping.Shipped, "load", load)

    def run(workers: int, out: Path) -> tuple[dict, list]:
        rep = Pipeline(stages=[ExactDedup(), MinHashDedup()], fields=["text"]).run(
            src, out, workers=workers)
        return rep["totals"], [pq.read_table(out / d).to_pylist()
                               for d in ("data", "quarantine")]

    two = run(2, tmp_path / "two")
    assert len(loaded) >= 3  # pieces of 4,096 lines: each segment's outputs
    # at most the outputs still in flight wait in the folder, never every one of the run
    assert max(len(names) for names in loaded) <= 4
    loaded.clear()
    one = run(1, tmp_path / "one")
    assert not loaded and one == two and two[0]["quarantined"] >= 9000


def test_only_a_first_pass_hands_back_the_rows_as_read() -> None:
    # A last segment's rows go to the output: nothing quarantines them any more, so the rows
    # as read stay behind (on t0 they were half of what its tasks sent back).
    from cleanpipe.engine.core import SegmentWorker
    from cleanpipe.engine.rows import Rows
    from cleanpipe.stages.exact_dedup import ExactDedup
    from cleanpipe.stages.invisible_chars import InvisibleChars

    batch = pa.record_batch({"text": ["a\u200bb", "c"]})
    rows = Rows(batch, batch, pa.array(["f:1", "f:2"]), np.arange(2))
    last = SegmentWorker([InvisibleChars()], ["text"], False).run(0, rows).rows
    assert last.data.column("text").to_pylist() != batch.column("text").to_pylist()
    assert last.orig.schema.names == ["rows"] and last.orig.num_rows == 2
    first = SegmentWorker([InvisibleChars(), ExactDedup()], ["text"], False).run(0, rows).rows
    assert first.orig.equals(batch)


def test_small_files_rows_join_between_passes(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A corpus of many small files is read one small batch a file; the rows a worker keeps
    between two passes are joined into batches of up to ``batch_size`` rows
    (``rows.coalesced``), with the per-row values that travel with them (flags, the token
    stages' figures, stale after a rewrite). The outputs are byte for byte those of a run
    that keeps one batch a file, and the token figures are the tokenizers oracle's."""
    from cleanpipe.engine import local
    from cleanpipe.report import FILES
    from cleanpipe.templating.word_tokenizer import word_tokenizer_file
    from tests import written_totals

    tok = word_tokenizer_file(str(tmp_path))
    folder = written_totals.write_small_files(tmp_path / "in")
    held: list[int] = []
    real_hold = local.hold

    def hold(there, folder_, segment):
        held.extend(r.num_rows for r in there)
        return real_hold(there, folder_, segment)

    monkeypatch.setattr(local, "hold", hold)

    def run(out: Path) -> dict:
        pipe = written_totals.pipeline(tok, grow=True, minhash=True, flag_column="flags")
        rep = pipe.run(folder, out, workers=1)
        assert written_totals.after_figures(rep) == {
            **written_totals.oracle(tok, written_totals.written_rows(out)), "bounded": (0, 0)}
        for s in rep["stages"]:
            s.pop("seconds")
            s.pop("diagnostics", None)
        # the written data, quarantine and events (the reports differ in their timings)
        return {"totals": rep["totals"], "stages": rep["stages"],
                "files": {str(f.relative_to(out)): f.read_bytes()
                          for f in sorted(out.rglob("*"))
                          if f.is_file() and f.name not in FILES.values()}}

    joined = run(tmp_path / "joined")
    joined_held = list(held)
    held.clear()
    monkeypatch.setattr(local, "coalesced", lambda parts, batch_rows: parts)
    apart = run(tmp_path / "apart")
    assert joined == apart and joined["totals"]["quarantined"] > 0
    # two passes keep rows: files of two rows joined into batches of up to 7 (batch_size)
    assert sum(joined_held) == sum(held) and max(joined_held) <= 7
    assert len(joined_held) < len(held)
