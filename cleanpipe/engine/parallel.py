"""An order-preserving, bounded parallel map over worker processes.

Results come back in input order whatever the number of workers, and at most ``window``
items are in flight, so memory stays bounded however long the input is.

    >>> list(ordered_map(abs, [-1, 2, -3], workers=1))
    [1, 2, 3]
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def ordered_map(fn: Callable[[T], R], items: Iterable[T], workers: int,
                initializer: Callable[..., None] | None = None, initargs: tuple[Any, ...] = (),
                window: int | None = None) -> Iterator[R]:
    """``map(fn, items)`` on ``workers`` processes (in this process when ``workers <= 1``)."""
    if workers <= 1:
        if initializer is not None:
            initializer(*initargs)
        for it in items:
            yield fn(it)
        return
    window = window or 2 * workers
    # spawn, not fork: tokenizers and numba hold threads that a fork would copy half-alive
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=initializer,
                             initargs=initargs) as ex:
        pending: deque[Future[R]] = deque()
        try:
            for it in items:
                pending.append(ex.submit(fn, it))
                if len(pending) >= window:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()
