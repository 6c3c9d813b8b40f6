"""WorkerPool: one set of workers for several maps, started from the arguments as they were
when the pool was made, results in input order."""

from __future__ import annotations

import os
import time

from cleanpipe.engine.parallel import WorkerPool

_STATE: dict[str, object] = {}


def _init(value: list[str]) -> None:
    _STATE["init"] = list(value)


def _read(i: int) -> tuple[int, object, int]:
    return i, _STATE.get("init"), os.getpid()


def test_one_pool_serves_several_maps_in_order():
    with WorkerPool(2, _init, (["a"],)) as pool:
        first = list(pool.map(_read, range(20)))
        second = list(pool.map(_read, range(20, 30)))
    assert [r[0] for r in first + second] == list(range(30))
    pids = {r[2] for r in first + second}
    assert len(pids) <= 2 and os.getpid() not in pids
    assert all(r[1] == ["a"] for r in first + second)


def _wait_for_later_tasks(job: tuple[int, str, int]) -> bool:
    """Task 0 waits (20 s at most) until tasks 1..``later`` have started; the others mark
    their start and return at once."""
    i, folder, later = job
    if i:
        open(os.path.join(folder, str(i)), "w").close()
        return True
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if all(os.path.exists(os.path.join(folder, str(k))) for k in range(1, later + 1)):
            return True
        time.sleep(0.01)
    return False


def test_a_slow_task_does_not_hold_up_the_other_workers(tmp_path):
    # Results come back in input order; before, the pool took no new task while the
    # first one ran once 4 (2 a worker) were out, and the other worker sat idle.
    later = 6
    with WorkerPool(2) as pool:
        got = list(pool.map(_wait_for_later_tasks,
                            [(i, str(tmp_path), later) for i in range(later + 1)]))
    assert got == [True] * (later + 1)


def test_workers_get_the_initargs_as_they_were_when_the_pool_was_made():
    value = ["as made"]
    with WorkerPool(2, _init, (value,)) as pool:
        value[0] = "changed later"  # workers start on the first task, after this
        got = {r[1][0] for r in pool.map(_read, range(8))}  # type: ignore[index]
    assert got == {"as made"}


def test_one_worker_runs_in_this_process_and_initialises_once():
    _STATE.clear()
    with WorkerPool(1, _init, (["local"],)) as pool:
        assert [r[2] for r in pool.map(_read, range(3))] == [os.getpid()] * 3
        _STATE["init"] = ["kept"]
        assert next(iter(pool.map(_read, [0])))[1] == ["kept"]


def test_progress_bar_starts_no_thread() -> None:
    # A second thread would make the engine start workers from a fork server (more memory).
    import io
    import threading

    from tqdm import tqdm

    from cleanpipe.engine.progress import Progress
    from cleanpipe.engine.worker_start import can_fork_here

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    before = threading.active_count()
    prog = Progress(stream=Terminal())
    prog.set_total_bytes(10 << 30)
    prog.advance_bytes(1 << 20)
    prog.advance_rows(100)
    try:
        assert threading.active_count() == before
        assert can_fork_here() == (before == 1 and "fork" in __import__(
            "multiprocessing").get_all_start_methods())
        assert prog._bar is not None and tqdm.monitor_interval != 0  # tqdm itself untouched
    finally:
        prog.close()
        if tqdm.monitor is not None:
            tqdm.monitor.exit()


def _parallelism(_: int) -> str | None:
    return os.environ.get("TOKENIZERS_PARALLELISM")


def test_pool_workers_leave_the_cores_to_the_pool_unless_told_otherwise(monkeypatch) -> None:
    """Each of several workers running its own tokenizer thread pool oversubscribes the
    cores: workers switch it off, but keep a value the user set; both start methods."""
    for start in ("fork", "forkserver"):
        monkeypatch.setenv("CLEANPIPE_WORKER_START", start)
        monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
        with WorkerPool(2, _init, (["a"],)) as pool:
            assert set(pool.map(_parallelism, range(4))) == {"false"}
        assert "TOKENIZERS_PARALLELISM" not in os.environ  # this process untouched
        monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
        with WorkerPool(2, _init, (["a"],)) as pool:
            assert set(pool.map(_parallelism, range(4))) == {"true"}
