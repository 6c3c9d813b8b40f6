"""Consecutive batches travel to the workers together (engine/task_groups.py): many small
files make few tasks, and the results are those of one task a batch."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cleanpipe import Pipeline
from cleanpipe.engine import local, shipping, task_groups
from cleanpipe.stages.exact_dedup import ExactDedup
from cleanpipe.stages.minhash_dedup import MinHashDedup
from cleanpipe.stages.whitespace import Whitespace


def test_task_groups_close_on_rows_or_bytes() -> None:
    """A task gets at least one chunk, and no more once it has ``rows`` rows or ``nbytes``
    bytes: long-text rows make smaller tasks, so no task runs three times the others."""
    groups = task_groups.Groups(rows=100, nbytes=1000)
    sizes = [(40, 100), (40, 100), (40, 100), (10, 2000), (30, 400), (30, 400), (5, 5)]
    out = [groups.add(SimpleNamespace(num_rows=n, nbytes=b)) for n, b in sizes]
    out.append(groups.flush())
    made = [[i for i, _ in g] for g in out if g is not None]
    assert made == [[0, 1, 2], [3], [4, 5, 6]]
    assert groups.flush() is None


WORDS = "the quick brown fox jumps over the lazy dog and runs far away to the green hills"


def _shards(folder: Path, files: int, rows: int, words: int = 0) -> list[str]:
    """``files`` small JSON Lines files; rows repeat across files (exact and near copies),
    each with ``words`` more words of its own row's text."""
    folder.mkdir()
    paths = []
    for f in range(files):
        p = folder / f"part-{f:03d}.jsonl"
        p.write_text("".join(json.dumps({"text": f"  {WORDS} item {(f * rows + i) % 97}"
                                                 f" variant {i % 3}  " + " ".join(
                                                     f"w{(f * rows + i) % 97}x{k}"
                                                     for k in range(words))}) + "\n"
                             for i in range(rows)), encoding="utf-8")
        paths.append(str(p))
    return paths


def _clean(paths: list[str], tasks: list[int], monkeypatch: pytest.MonkeyPatch,
           workers: int = 1) -> Any:
    real = local._run_task

    def counted(task: local.Task) -> Any:
        if isinstance(task.item, list):
            tasks.append(len(task.item))
        return real(task)

    monkeypatch.setattr(local, "_run_task", counted)
    pipe = Pipeline(stages=[Whitespace(), ExactDedup(), MinHashDedup(threshold=0.5)])
    result = pipe.clean(paths, workers=workers)
    monkeypatch.setattr(local, "_run_task", real)
    rep = result.report.to_dict()
    rep.pop("timing")
    for s in rep["stages"]:
        s.pop("seconds")
    return (result.dataset.data.table.to_pylist(),
            result.report.quarantine.data.table.to_pylist(), rep)


def test_small_files_share_tasks_with_the_same_results(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    paths = _shards(tmp_path / "in", files=40, rows=30)
    grouped: list[int] = []
    together = _clean(paths, grouped, monkeypatch)
    monkeypatch.setattr(task_groups, "TASK_BYTES", 1)  # every batch a task of its own
    alone: list[int] = []
    apart = _clean(paths, alone, monkeypatch)
    assert len(alone) == 40 and set(alone) == {1}
    assert len(grouped) < 5 and sum(grouped) == 40  # 1,200 rows: one or two tasks
    assert together == apart
    kept, quarantine, rep = together
    assert rep["totals"]["read"] == 1200 and len(kept) + len(quarantine) == 1200
    assert {s["name"]: s["dropped"] > 0 for s in rep["stages"]} == {
        "whitespace": False, "exact_dedup": True, "minhash_dedup": True}


def test_grouped_tasks_in_worker_processes(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Grouped tasks in two worker processes, every output coming back through a file
    (engine/shipping.py): the results of one task a batch in this process."""
    paths = _shards(tmp_path / "in", files=40, rows=100, words=150)
    # with workers forked from this process (no other thread here) every output goes
    # through a file; from a fork server (not patched), the large ones do
    monkeypatch.setattr(shipping, "SHIP_BYTES", 1)
    unused: list[int] = []
    in_workers = _clean(paths, unused, monkeypatch, workers=2)
    monkeypatch.setattr(task_groups, "TASK_BYTES", 1)
    alone: list[int] = []
    in_process = _clean(paths, alone, monkeypatch)
    assert len(alone) == 40
    assert in_workers == in_process
    assert in_workers[2]["totals"]["read"] == 4000
    assert in_workers[2]["totals"]["quarantined"] > 0
