"""Which allocator Arrow uses during a run, so memory freed by one batch goes back to the OS.

A run streams hundreds of MB of record batches through each process, a few MB at a time.
pyarrow's default pool (mimalloc) keeps freed pages for reuse; over the t0 benchmark that
kept the main process about 100 MB above what it was using. The system allocator hands
large blocks (every batch's buffers) back when they are freed, at no measurable cost in
speed for batch-sized allocations.

    >>> import pyarrow as pa
    >>> before = pa.default_memory_pool().backend_name
    >>> with returning_pool():
    ...     pa.default_memory_pool().backend_name
    'system'
    >>> pa.default_memory_pool().backend_name == before
    True
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

import pyarrow as pa


def use_returning_pool() -> None:
    """Make the system allocator Arrow's default for the rest of this process (workers)."""
    pa.set_memory_pool(pa.system_memory_pool())


@contextmanager
def returning_pool() -> Iterator[None]:
    """The system allocator as Arrow's default inside the block, the previous one after.

    Buffers keep a reference to the pool that allocated them, so arrays made inside the
    block and freed after it are returned to the right allocator.
    """
    previous = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(previous)


@cache
def _malloc_trim() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    name = ctypes.util.find_library("c")
    try:
        fn = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc
        return None
    if fn is not None:
        fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


def release_free_memory() -> None:
    """Hand the C heap's free pages back to the OS (glibc's ``malloc_trim``; elsewhere a
    no-op).

    Batches freed in another order than they were allocated leave free holes inside the
    heap that glibc keeps; over a run they add up to tens of MB per process. Trimming
    costs about a millisecond, so the engine does it between batches, not per allocation.
    """
    fn = _malloc_trim()
    if fn is not None:
        fn(0)
