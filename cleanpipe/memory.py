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
import os
import sys
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


#: ``madvise`` advice: drop the range's page mappings; for a read-only, unmodified mapping of
#: a file the next access maps the same file page again
MADV_DONTNEED = 4
#: shared libraries only needed to compile or load numba kernels: LLVM (~180 MB of code, of
#: which importing numba maps ~100 MB, its static initialisers being spread over the file)
COMPILER_LIBRARIES = ("libllvmlite",)


def clean_library_ranges(names: tuple[str, ...], smaps: str) -> list[tuple[int, int]]:
    """``(start, length)`` of each read-only mapping in ``smaps`` (``/proc/<pid>/smaps``'
    text) of a file whose name starts with one of ``names`` and with no page of its own
    (``Anonymous: 0 kB``: no relocated or written page, every page is the file's).

        >>> clean_library_ranges(("libfoo",),
        ...     "7f00-7f10 r-xp 0 08:01 1 /x/libfoo.so\\nAnonymous: 0 kB\\n"
        ...     "7f10-7f20 r--p 0 08:01 1 /x/libfoo.so\\nAnonymous: 4 kB\\n"
        ...     "7f20-7f30 rw-p 0 08:01 1 /x/libfoo.so\\nAnonymous: 0 kB\\n")
        [(32512, 16)]
    """
    out = []
    head: tuple[int, int] | None = None
    for line in smaps.splitlines():
        parts = line.split(None, 5)
        if parts and "-" in parts[0] and len(parts) >= 5 and not parts[0].endswith(":"):
            head = None
            if (len(parts) == 6 and "w" not in parts[1]
                    and os.path.basename(parts[5]).startswith(names)):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                head = (lo, hi - lo)
        elif head is not None and parts[:1] == ["Anonymous:"]:
            if parts[1] == "0":
                out.append(head)
            head = None
    return out


@cache
def _madvise() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    name = ctypes.util.find_library("c")
    try:
        fn = ctypes.CDLL(name).madvise if name else None
    except (OSError, AttributeError):  # pragma: no cover - no libc
        return None
    if fn is not None:
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        fn.restype = ctypes.c_int
    return fn


def release_compiler_pages() -> None:
    """Let go of the pages of LLVM's code this process maps (:data:`COMPILER_LIBRARIES`,
    numba's JIT) once its kernels are loaded: only compiling or loading a kernel runs that
    code again, a loaded kernel runs without it.

    Importing numba maps about 100 MB of ``libllvmlite.so`` (its static initialisers are
    spread over the file). Only read-only mappings with no page of their own are let go
    (:func:`clean_library_ranges`): each of their pages is the file's, so one used again is
    simply mapped (or read) again, and nothing changes but memory. ``MADV_DONTNEED`` unmaps
    them and leaves them in the page cache, as any file read does: the kernel frees them
    when it needs the memory, and the next run's import of numba finds them there (evicting
    them with ``MADV_PAGEOUT`` would make it read them from disk). Without ``madvise`` (not
    Linux) nothing changes.
    """
    if "llvmlite.binding.ffi" not in sys.modules:
        # that module loads the library: without it nothing of LLVM is mapped here, and
        # reading smaps would cost ~20 ms in a run's main process, ~0.1 s in a Ray driver
        return
    fn = _madvise()
    if fn is None:
        return
    try:
        with open("/proc/self/smaps") as fh:
            smaps = fh.read()
    except OSError:
        return
    for start, length in clean_library_ranges(COMPILER_LIBRARIES, smaps):
        fn(start, length, MADV_DONTNEED)
