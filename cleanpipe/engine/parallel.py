"""An order-preserving, bounded parallel map over worker processes started once.

Results come back in input order whatever the number of workers, and at most ``window``
items are in flight, so memory stays bounded however long the input is. A
:class:`WorkerPool` keeps its processes for several maps (a pipeline with global stages
streams its rows through the workers once per pass), so the start-up cost — a Python with
numpy, pyarrow, numba and the stages' modules — is paid once per run, not once per pass.

    >>> with WorkerPool(1) as pool:
    ...     list(pool.map(abs, [-1, 2])), list(pool.map(abs, [-3]))
    ([1, 2], [3])
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import pickle
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from types import TracebackType
from typing import Any, TypeVar

from cleanpipe.engine.worker_death import die_with_parent
from cleanpipe.engine.worker_start import (
    WorkerStart,
    can_fork_here,
    leave_cores_to_engine,
    run_warm_up,
    worker_context,
)
from cleanpipe.memory import release_compiler_pages

T = TypeVar("T")
R = TypeVar("R")


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class WorkerPool:
    """``workers`` processes (none when ``workers <= 1``: maps run in this process), each
    set up once by ``initializer(*initargs)``.

    The workers are forked, so they share the pages of what was loaded before the fork:
    from this process when it runs no other thread (the CLI), else from a fork server (see
    :mod:`cleanpipe.engine.worker_start`) that imports ``preload``. Before the fork,
    ``initializer(*initargs)`` and then ``warm`` (a module-level function: loading what
    every worker would otherwise load itself) run on a copy of the arguments, in this
    process or in the server; ``release`` drops that copy here when the pool is done.
    """

    def __init__(self, workers: int, initializer: Callable[..., None] | None = None,
                 initargs: tuple[Any, ...] = (), preload: Sequence[str] = (),
                 warm: Callable[[], None] | None = None,
                 release: Callable[[], None] | None = None) -> None:
        self.workers = workers
        self._initializer, self._initargs = initializer, initargs
        self._preload = tuple(preload)
        self._warm, self._release = warm, release
        self._warmed_here = False
        self._ex: ProcessPoolExecutor | None = None
        self._start: WorkerStart | None = None
        self._local_ready = False

    def __enter__(self) -> WorkerPool:
        if self.workers > 1:
            # Workers start when work first reaches them, possibly after the caller changed
            # the objects in initargs (a global stage's state after its pass): pickle them
            # now, so every worker starts from the same bytes.
            frozen = pickle.dumps((self._initializer, self._initargs, self._warm),
                                  protocol=pickle.HIGHEST_PROTOCOL)
            if can_fork_here():
                self._ex = self._fork_here(frozen)
            else:
                self._start = worker_context(self._preload, frozen)
                self._ex = ProcessPoolExecutor(self.workers, mp_context=self._start.context,
                                               initializer=_init_from,
                                               initargs=(frozen, self._start.parent_pid))
            # the warm-up loaded the kernels the workers run: LLVM's code, mapped here by
            # importing numba (~100 MB), is no longer needed here (see the function)
            release_compiler_pages()
        return self

    def _fork_here(self, frozen: bytes) -> ProcessPoolExecutor:
        """Workers forked from this process, after it ran the initializer and ``warm`` on
        copies of the arguments: they share this process's modules and the warmed state."""
        initializer, initargs, warm = pickle.loads(frozen)
        self._warmed_here = True
        if initializer is not None:
            initializer(*initargs)
        if warm is not None:
            try:
                run_warm_up(warm)
            except Exception:  # best effort: a worker meets the error again and reports it
                pass
        ex = ProcessPoolExecutor(self.workers, mp_context=mp.get_context("fork"),
                                 initializer=_start_worker, initargs=(os.getpid(),))
        # With fork, the executor starts every worker at the first submit: do it now, while
        # this process has no other thread and the collector leaves inherited objects alone.
        # The young generations hold the warm-up's garbage; a full collection here (~50 ms
        # of start-up, every run) found 10 unreachable objects more on the t0 pipeline.
        gc.collect(1)
        gc.freeze()
        try:
            ex.submit(int).result()
        finally:
            gc.unfreeze()
        return ex

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._ex is not None:
            # queued work nobody will read is dropped; running tasks are waited for, so no
            # worker outlives the pool
            self._ex.shutdown(wait=True, cancel_futures=True)
            self._ex = None
        if self._start is not None:
            self._start.close()
            self._start = None
        if self._warmed_here and self._release is not None:
            self._release()  # the warmed copies, held for the forks only
        self._warmed_here = False

    def map(self, fn: Callable[[T], R], items: Iterable[T],
            window: int | None = None) -> Iterator[R]:
        """``map(fn, items)`` over the pool's workers, in input order."""
        if self._ex is None:
            if self._initializer is not None and not self._local_ready:
                self._initializer(*self._initargs)
                self._local_ready = True
            for it in items:
                yield fn(it)
            return
        # Two unfinished tasks per worker: one running, one queued behind it so it never
        # idles while this process reads the next batch. Results wait for the earlier ones
        # (input order), but a slow task does not hold the other workers up: up to
        # ``window`` more finished ones may wait behind it.
        window = window or 2 * self.workers
        pending: deque[Future[R]] = deque()
        try:
            for it in items:
                pending.append(self._ex.submit(fn, it))
                while True:
                    while pending and pending[0].done():
                        yield pending.popleft().result()
                    unfinished = [f for f in pending if not f.done()]
                    if len(unfinished) < window and len(pending) < 2 * window:
                        break
                    wait(unfinished, return_when=FIRST_COMPLETED)
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()


def _start_worker(parent: int) -> None:
    """What every pool worker does first: die with ``parent``, and leave the cores to the
    pool (:func:`~cleanpipe.engine.worker_start.leave_cores_to_engine`)."""
    die_with_parent(parent)
    leave_cores_to_engine()


def _init_from(frozen: bytes, parent: int) -> None:
    _start_worker(parent)
    # imported here, not at the top: in the fork server it must come last (it runs the warm-up)
    from cleanpipe.engine import fork_server

    if fork_server.warmed_for(frozen):  # forked from a server that ran it already
        return
    initializer, initargs, _warm = pickle.loads(frozen)
    if initializer is not None:
        initializer(*initargs)


