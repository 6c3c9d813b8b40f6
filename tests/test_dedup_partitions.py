"""Distributed MinHash clustering without a cluster: the partition steps and the Ray driver
logic run in-process on a stand-in for Ray (tasks run at once), compared with the in-memory
path."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cleanpipe.contract.stage import BatchContext
from cleanpipe.dedup import bands, cluster, kernels, stars
from cleanpipe.engine import ray_dedup
from cleanpipe.stages.minhash_dedup import MinHashDedup

# -- an in-process stand-in for the bits of Ray the driver logic uses ----------------------

class _InProcessTask:
    """``ray.remote(fn)``: ``.remote(...)`` calls ``fn`` at once; ``num_returns`` splits
    its result into that many values, as Ray makes that many objects."""

    def __init__(self, fn: Any, num_returns: int = 1) -> None:
        self.fn = fn
        self.num_returns = num_returns

    def options(self, *, num_returns: int = 1, **_: Any) -> _InProcessTask:
        return _InProcessTask(self.fn, num_returns)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        out = self.fn(*args, **kwargs)
        return out if self.num_returns == 1 else list(out)


def _get(refs: Any) -> Any:
    return list(refs) if isinstance(refs, list) else refs


def _wait(refs: list[Any], **_: Any) -> tuple[list[Any], list[Any]]:
    return list(refs), []  # made at once: every object is ready


FAKE_RAY = SimpleNamespace(put=lambda x: x, get=_get, wait=_wait,
                           remote=lambda **_: (lambda fn: _InProcessTask(fn)))


# -- data ----------------------------------------------------------------------------------

def _corpus(seed: int, n_base: int = 60) -> list[str]:
    """Random sentences, each copied with small edits a few times (chains of edits too),
    shuffled; a few empty rows (no shingles)."""
    rnd = random.Random(seed)
    words = [f"w{i}" for i in range(300)]
    out = []
    for _ in range(n_base):
        s = [rnd.choice(words) for _ in range(rnd.randint(12, 40))]
        out.append(" ".join(s))
        for _ in range(rnd.randint(0, 4)):
            s = list(s)
            s[rnd.randrange(len(s))] = rnd.choice(words)  # edit the previous copy: chains
            out.append(" ".join(s))
    out += ["", "  "]
    rnd.shuffle(out)
    return out


def _batches(texts: list[str], size: int) -> list[tuple[pa.RecordBatch, np.ndarray]]:
    out = []
    for start in range(0, len(texts), size):
        b = pa.record_batch({"text": texts[start:start + size]})
        # seqs with gaps, as the engine's (shard base + line) numbers have
        out.append((b, 3 * np.arange(start, start + b.num_rows, dtype=np.int64) + 1))
    return out


def _local(stage: MinHashDedup, batches: list) -> tuple[pa.Table, dict]:
    for b, seq in batches:
        ids = pa.array([f"f:{s}" for s in seq])
        ctx = BatchContext(b, ["text"], ids)
        stage.observe(stage.prepare(b, ctx), seq, b, ctx)
    stage.finalize()
    seq = np.concatenate([s for _, s in batches])
    return stage.decisions_for(seq), stage.report_section()


def _distributed(stage: MinHashDedup, batches: list, parts: int) -> tuple[pa.Table, dict]:
    dist = ray_dedup.RayMinHash(stage, FAKE_RAY, parts)
    for b, seq in batches:
        ids = pa.array([f"f:{s}" for s in seq])
        prepared = stage.prepare(b, BatchContext(b, ["text"], ids))
        dist.observe(prepared, SimpleNamespace(seq=seq, row_ids=ids))
    decisions = dist.finalize()
    blocks = decisions.to_arrow_refs() if decisions is not None else []
    return (pa.concat_tables(blocks) if blocks else None), stage.report_section()


def _rows(t: pa.Table | None) -> list[tuple]:
    if t is None:
        return []
    return sorted(zip(t.column("seq").to_pylist(), t.column("code").to_pylist(),
                      t.column("detail").to_pylist(), strict=True))


def _without_memory(section: dict) -> dict:
    return {k: v for k, v in section.items() if k != "memory"}


CONFIGS = [
    {"threshold": 0.7},
    {"threshold": 0.7, "keep": "longest"},
    {"threshold": 0.7, "keep": "last", "max_bucket_pairs": 2},  # star buckets
    {"threshold": 0.5, "verify": "none", "num_perm": 64},
    {"threshold": 0.8, "num_perm": 64, "report_clusters": 3},
]


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("parts", [1, 3])
def test_distributed_steps_match_in_memory(cfg: dict, parts: int) -> None:
    texts = _corpus(seed=len(str(cfg)) + parts)
    ref = pa.table({"text": [texts[5], texts[9] + " extra", "nothing like the corpus"]})
    make = lambda: MinHashDedup(fields=["text"], reference=[ref], **cfg)  # noqa: E731
    batches = _batches(texts, 37)
    local_dec, local_rep = _local(make(), batches)
    dist_dec, dist_rep = _distributed(make(), batches, parts)
    assert _rows(dist_dec) == _rows(local_dec)
    assert _without_memory(dist_rep) == _without_memory(local_rep)
    # the corpus does exercise what is compared
    assert local_rep["duplicates"] > 10 and local_rep["contamination"]["rows"] >= 1


def _qa_batches(seed: int) -> list[tuple[pa.RecordBatch, np.ndarray]]:
    """Prompt/answer rows: a few passages each asked several questions (some with the same
    answer), and edited copies of whole rows."""
    rnd = random.Random(seed)
    texts = _corpus(seed, n_base=30)
    rows = []
    for k in range(0, len(texts) - 3, 4):
        passage = " ".join(texts[k:k + 3]) + "."
        for q in range(rnd.randint(1, 4)):
            rows.append((f"{passage} question {k} {q} about it?", f"answer {q % 2} {k}"))
    rows += [(p.replace(" w1", " w2", 1), a) for p, a in rnd.sample(rows, len(rows) // 3)]
    rows += [("", ""), ("", "only an answer here")]
    rnd.shuffle(rows)
    out = []
    for start in range(0, len(rows), 23):
        chunk = rows[start:start + 23]
        b = pa.record_batch({"text": [p for p, _ in chunk], "a": [a for _, a in chunk]})
        out.append((b, 2 * np.arange(start, start + b.num_rows, dtype=np.int64)))
    return out


@pytest.mark.parametrize("keep", ["first", "longest"])
def test_distributed_parts_match_in_memory(keep: str) -> None:
    """Prompt and response compared separately: same decisions and report on both paths."""
    batches = _qa_batches(seed=3)
    ref = pa.table({"text": [batches[0][0].column("text")[0].as_py()],
                    "a": [batches[0][0].column("a")[0].as_py()]})
    make = lambda: MinHashDedup(prompt_fields=["text"], response_fields=["a"],  # noqa: E731
                                threshold=0.7, keep=keep, reference=[ref])
    local_dec, local_rep = _local(make(), batches)
    dist_dec, dist_rep = _distributed(make(), batches, 3)
    assert _rows(dist_dec) == _rows(local_dec)
    assert _without_memory(dist_rep) == _without_memory(local_rep)
    assert local_rep["compared"] == "prompt and response"
    assert local_rep["duplicates"] >= 5 and local_rep["contamination"]["rows"] >= 1
    members = [m for c in local_rep["largest_clusters"] for m in c["members"]]
    assert any(d["part"] == "prompt" for m in members for d in m["differences"])


class _UnknownGrouping(MinHashDedup):
    name = "_test_unknown_grouping"

    def distributed_grouping(self) -> str:
        return "a grouping no engine has"


def test_grouping_is_found_by_the_name_the_stage_declares() -> None:
    """The Ray engine picks a stage's grouping by the name the stage declares, not by its
    class; a stage declaring none, or one the engine lacks, observes and finalizes on the
    driver."""
    from cleanpipe.stages.exact_dedup import ExactDedup

    assert type(ray_dedup.distributed(MinHashDedup(), FAKE_RAY, 2)) is ray_dedup.RayMinHash
    assert type(ray_dedup.distributed(ExactDedup(), FAKE_RAY, 2)) is ray_dedup.RayExactDedup
    assert ray_dedup.distributed(ExactDedup(label_field="label"), FAKE_RAY, 2) is None
    assert ray_dedup.distributed(_UnknownGrouping(), FAKE_RAY, 2) is None


def test_distributed_steps_on_empty_and_unique_input() -> None:
    for texts in ([""], ["alpha beta gamma delta epsilon", "one two three four five six"]):
        batches = _batches(texts, 10)
        local_dec, local_rep = _local(MinHashDedup(fields=["text"]), batches)
        dist_dec, dist_rep = _distributed(MinHashDedup(fields=["text"]), batches, 2)
        assert _rows(dist_dec) == _rows(local_dec) == []
        assert _without_memory(dist_rep) == _without_memory(local_rep)


# -- the pieces ------------------------------------------------------------------------------

def _graph(seed: int, n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = a != b
    return np.maximum(a, b)[keep], np.minimum(a, b)[keep]


@pytest.mark.parametrize("seed", range(5))
def test_star_components_equal_union_find(seed: int) -> None:
    hi, lo = _graph(seed, 400, 300 + 50 * seed)
    nodes, labels = stars.components(hi, lo)
    uf = kernels.union_find(400, lo, hi)
    assert nodes.tolist() == np.unique(np.concatenate([hi, lo])).tolist()
    assert labels.tolist() == uf[nodes].tolist()


def test_star_components_long_chain_in_scrambled_order() -> None:
    # a path whose node numbers are scrambled: the minimum sits in the middle
    rng = np.random.default_rng(7)
    path = rng.permutation(2000)
    a, b = path[:-1], path[1:]
    nodes, labels = stars.components(np.maximum(a, b), np.minimum(a, b))
    assert nodes.size == 2000 and set(labels.tolist()) == {0}


def test_partitioned_bucket_pairs_equal_in_memory_candidates() -> None:
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 40, size=(500, 4)).astype(np.uint64)
    valid = rng.random(500) > 0.1
    seq = np.arange(500, dtype=np.int64) * 2
    t = bands.sketch_table(seq, keys, valid, None, None, np.zeros(500, np.int64), None, None)
    rows = bands.band_rows(t)
    from cleanpipe.dedup import partition_steps
    from cleanpipe.engine.ray_shuffle import partition_of

    part = partition_of(partition_steps.band_key_hash(rows), 3)
    found = pa.concat_tables([bands.bucket_pairs(rows.filter(pa.array(part == p)), 8)
                              for p in range(3)])
    got = bands.unique_pairs(found)
    left, right = cluster.candidate_pairs(keys, valid, 8)
    assert got.column("left").to_pylist() == (seq[left]).tolist()
    assert got.column("right").to_pylist() == (seq[right]).tolist()


def _exact_run(stage: Any, batches: list, parts: int | None) -> tuple[list[tuple], dict]:
    """Exact dedup in memory (``parts=None``) or through the distributed grouping."""
    dist = None if parts is None else ray_dedup.RayExactDedup(stage, FAKE_RAY, parts)
    for b, seq in batches:
        ids = pa.array([f"f:{s}" for s in seq])
        ctx = BatchContext(b, ["text"], ids)
        prepared = stage.prepare(b, ctx)
        if dist is None:
            stage.observe(prepared, seq, b, ctx)
        else:
            dist.observe(prepared, SimpleNamespace(seq=seq, row_ids=ids))
    if dist is None:
        stage.finalize()
        dec = stage.decisions_for(np.concatenate([s for _, s in batches]))
    else:
        out = dist.finalize()
        dec = pa.concat_tables(out.to_arrow_refs()) if out is not None and out.refs else None
    return _rows(dec), _without_memory(stage.report_section())


@pytest.mark.parametrize("keep", ["first", "last", "longest"])
@pytest.mark.parametrize("parts", [1, 4])
def test_distributed_exact_groups_match_in_memory(keep: str, parts: int) -> None:
    from cleanpipe.stages.exact_dedup import ExactDedup

    rnd = random.Random(parts)
    base = [f"row {i} " + "x" * rnd.randint(0, 5) for i in range(40)]
    texts = [rnd.choice(base) + rnd.choice(["", " ", "  "]) for _ in range(300)]
    ref = pa.table({"text": [base[3], base[7], "not in the corpus"]})
    batches = _batches(texts, 29)

    def make() -> ExactDedup:
        return ExactDedup(fields=["text"], keep=keep, reference=[ref], report_clusters=4)

    local = _exact_run(make(), batches, None)
    dist = _exact_run(make(), batches, parts)
    assert dist == local
    assert local[1]["duplicates"] > 100 and local[1]["contamination"]["rows"] > 0
