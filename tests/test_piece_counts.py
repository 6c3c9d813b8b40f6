"""The piece-count cache that the local engine's forked workers share
(cleanpipe.templating.piece_counts), alone and under LoadedTokenizer on real text."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.json as pj
import pytest

from cleanpipe.templating import piece_counts
from cleanpipe.templating.piece_counts import PieceCounts
from cleanpipe.templating.tokenizer import LoadedTokenizer
from tests.conftest import realdata

FORK = mp.get_context("fork")


class Recorder:
    """An ``encode`` that counts words and remembers what it was asked, in order."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, pieces: list[str]) -> list[int]:
        self.asked += pieces
        return [len(p.split()) for p in pieces]


def _fill(counts: PieceCounts, pieces: list[str], encode: Callable[[list[str]], list[int]]
          ) -> list[int]:
    counted = np.full(len(pieces), -1, dtype=np.int64)
    counts.fill(pieces, counted, np.arange(len(pieces)), encode)
    return counted.tolist()


def _in_child(fn: Callable[[], None]) -> None:
    p = FORK.Process(target=fn)
    p.start()
    p.join(30)
    assert p.exitcode == 0


PIECES = [f"piece {i} " + "w " * (i % 7) for i in range(300)]


def test_each_piece_is_encoded_once_in_a_process() -> None:
    counts, enc = PieceCounts(), Recorder()
    assert _fill(counts, PIECES[:200], enc) == [len(p.split()) for p in PIECES[:200]]
    assert _fill(counts, PIECES, enc) == [len(p.split()) for p in PIECES]
    assert sorted(enc.asked) == sorted(PIECES)


def test_a_forked_sibling_s_counts_are_read_not_encoded() -> None:
    counts = PieceCounts()  # made before the forks, as the engine's warm-up does

    def child() -> None:
        _fill(counts, PIECES[:200], Recorder())

    _in_child(child)
    enc = Recorder()
    assert _fill(counts, PIECES, enc) == [len(p.split()) for p in PIECES]
    assert sorted(enc.asked) == sorted(PIECES[200:])


def test_pieces_a_sibling_claimed_are_encoded_last() -> None:
    counts = PieceCounts()

    def claimer() -> None:  # claims the first half, then ends before it counts any
        counts.log.claim(PIECES[:150])

    _in_child(claimer)
    enc = Recorder()
    assert _fill(counts, PIECES, enc) == [len(p.split()) for p in PIECES]
    # still all counted here, the unclaimed half first
    assert sorted(enc.asked[:150]) == sorted(PIECES[150:])
    assert sorted(enc.asked[150:]) == sorted(PIECES[:150])


def test_a_full_log_only_costs_encoding() -> None:
    counts = PieceCounts(capacity=4096)

    def child() -> None:
        _fill(counts, PIECES[:50], Recorder())  # fits
        _fill(counts, PIECES, Recorder())  # the other 250 pieces' records do not

    _in_child(child)
    enc = Recorder()
    assert _fill(counts, PIECES, enc) == [len(p.split()) for p in PIECES]
    assert sorted(enc.asked) == sorted(PIECES[50:])
    assert counts.log.sharing


def test_a_lock_held_by_a_killed_sibling_switches_sharing_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(piece_counts, "WAIT_S", 0.2)
    counts = PieceCounts()
    ready = FORK.Event()

    def holder() -> None:
        counts.log.lock.acquire()
        ready.set()
        signal.pause()

    p = FORK.Process(target=holder)
    p.start()
    assert ready.wait(30)
    os.kill(p.pid, signal.SIGKILL)
    p.join(30)
    enc = Recorder()
    assert _fill(counts, PIECES, enc) == [len(p.split()) for p in PIECES]
    assert sorted(enc.asked) == sorted(PIECES)
    assert not counts.log.sharing


def test_a_pickled_copy_has_a_private_empty_log() -> None:
    counts = PieceCounts()
    copy = pickle.loads(pickle.dumps(counts))

    def child() -> None:  # counts into the copy's log, which is not the original's
        _fill(copy, PIECES[:10], Recorder())

    _in_child(child)
    enc = Recorder()
    _fill(counts, PIECES[:10], enc)
    assert sorted(enc.asked) == sorted(PIECES[:10])


def test_counts_published_while_encoding_spare_the_claimed_pieces() -> None:
    # A sibling claimed the first half; while this process encodes the other half, the
    # sibling's counts arrive: the claimed half is then read, not encoded again.
    counts = PieceCounts()

    def claimer() -> None:
        counts.log.claim(PIECES[:150])

    _in_child(claimer)
    asked: list[str] = []

    def encode(pieces: list[str]) -> list[int]:
        if not asked:  # the sibling finishes meanwhile
            counts.log.publish(PIECES[:150], [len(p.split()) for p in PIECES[:150]])
        asked.extend(pieces)
        return [len(p.split()) for p in pieces]

    assert _fill(counts, PIECES, encode) == [len(p.split()) for p in PIECES]
    assert sorted(asked) == sorted(PIECES[150:])


def test_the_process_that_made_the_log_writes_nothing_to_it() -> None:
    # Its forks inherit its cache; a process that never forks pickles nothing.
    counts = PieceCounts()
    _fill(counts, PIECES, Recorder())
    seen: dict[str, int] = {}
    claimed: set[int] = set()
    counts.log.read_into(seen, claimed)
    assert seen == {} and claimed == set()


class RecordingTokenizer:
    """An HF tokenizer that remembers how many characters it was asked to encode."""

    def __init__(self, inner: Any, asked: list[int]) -> None:
        self.inner, self.asked = inner, asked

    def encode_batch_fast(self, texts: list[str], add_special_tokens: bool) -> Any:
        self.asked.append(sum(map(len, texts)))
        return self.inner.encode_batch_fast(texts, add_special_tokens=add_special_tokens)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _t0_texts(template: str, n: int) -> list[str]:
    table = pj.read_json(realdata("sft_self_instruct_t0_50k", "data_per_template",
                                  f"{template}.jsonl"))
    return [p + c for p, c in zip(table["prompt"].to_pylist()[:n],
                                  table["completion"].to_pylist()[:n], strict=True)]


@pytest.mark.realdata
def test_forked_workers_share_exact_counts_of_t0() -> None:
    # t0 asks about one passage under several prompt templates. Two processes forked from
    # the one that loaded Qwen3, as the local engine's workers are, each count one
    # template's rows, the second after the first ended: the second encodes little more
    # than its template's own words, and every count equals the whole text's encoding.
    parts = [_t0_texts(f"wiki_hop_original_choose_best_object_affirmative_{k}", 60)
             for k in (1, 2)]
    tok = LoadedTokenizer.load(realdata("tokenizers", "qwen3"))
    result = FORK.Queue()

    def worker(texts: list[str]) -> None:
        asked: list[int] = []
        tok.tokenizer = RecordingTokenizer(tok.tokenizer, asked)
        counts, _ = tok.count_above(texts, 0)
        result.put((counts.tolist(), sum(asked)))

    runs = []
    for texts in parts:
        p = FORK.Process(target=worker, args=(texts,))
        p.start()
        runs.append(result.get(timeout=120))
        p.join(30)
    for texts, (counts, _) in zip(parts, runs, strict=True):
        assert counts == [len(e.ids) for e in tok.tokenizer.encode_batch(texts)]
    (_, chars_one), (_, chars_two) = runs
    assert chars_one > 0.5 * sum(map(len, parts[0]))
    assert 0 < chars_two < 0.05 * chars_one


# Run in a fresh interpreter: with no other thread there, the engine forks the workers from
# it, and they inherit the recording below (pytest's process may hold threads of earlier
# tests, and then workers come from a fork server this test could not instrument).
ENGINE_RUN = """
import json, sys
import multiprocessing as mp
from cleanpipe.engine.worker_start import can_fork_here
from cleanpipe.pipeline import Pipeline
from cleanpipe.stages.context_length import ContextLength
from cleanpipe.templating.piece_counts import PieceCounts

src, out, tokenizer = sys.argv[1:]
encoded = mp.get_context("fork").Value("q", 0)
real_fill = PieceCounts.fill

def fill(self, uniq, counted, ids, encode):
    def recording(pieces):
        with encoded.get_lock():
            encoded.value += sum(map(len, pieces))
        return encode(pieces)
    real_fill(self, uniq, counted, ids, recording)

PieceCounts.fill = fill
assert can_fork_here()
stage = ContextLength(tokenizer=tokenizer, max_length=1024, template="{prompt}{completion}",
                      response_field="completion")
rep = Pipeline(stages=[stage], fields=["prompt", "completion"],
               batch_size=20).run(src, out, workers=2)
print(json.dumps({"workers": rep["timing"]["workers"], "rows_out": rep["stages"][0]["rows_out"],
                  "encoded": encoded.value}))
"""


@pytest.mark.realdata
def test_the_local_engine_s_workers_share_piece_counts(tmp_path: Path) -> None:
    # The same 100 passages under two templates, one template after the other, in batches
    # of 20 rows over 2 workers: the workers together encode about one template's text,
    # not each its own share of both (the tokenizer must load before the workers fork).
    rows = []
    for k in (1, 2):
        name = f"wiki_hop_original_choose_best_object_affirmative_{k}"
        table = pj.read_json(realdata("sft_self_instruct_t0_50k", "data_per_template",
                                      f"{name}.jsonl"))
        rows += table.slice(0, 100).select(["prompt", "completion"]).to_pylist()
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    run = subprocess.run([sys.executable, "-c", ENGINE_RUN, str(src), str(tmp_path / "out"),
                          str(realdata("tokenizers", "qwen3"))],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["workers"] == 2
    assert got["rows_out"] < len(rows)  # long rows were counted in full
    one_template = sum(len(r["prompt"]) + len(r["completion"]) for r in rows[:100])
    assert 0.5 * one_template < got["encoded"] < 1.1 * one_template
