"""LLVM's code is let go once the kernels are loaded (issue #18): importing numba maps ~100 MB
of ``libllvmlite.so`` into every process that imports it, counted in the run's memory.
Letting it go changes nothing but memory: kernels loaded before still run, and new ones
still compile (the pages are mapped again from the file)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from cleanpipe.memory import COMPILER_LIBRARIES, clean_library_ranges, release_compiler_pages

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads /proc/self/smaps")


def _library_rss_kb() -> int:
    """Resident kB of this process's mappings of :data:`COMPILER_LIBRARIES`."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        parts = line.split(None, 5)
        if parts and "-" in parts[0] and not parts[0].endswith(":"):
            inside = len(parts) == 6 and Path(parts[5]).name.startswith(COMPILER_LIBRARIES)
        elif inside and parts[:1] == ["Rss:"]:
            total += int(parts[1])
    return total


def test_llvm_code_is_let_go_and_kernels_still_run() -> None:
    from numba import njit

    @njit(cache=False)
    def before(a):  # type: ignore[no-untyped-def]
        return (a * 3).sum()

    x = np.arange(10, dtype=np.int64)
    assert before(x) == 135
    held = _library_rss_kb()
    assert held > 20_000, "numba's import maps tens of MB of LLVM's code"
    release_compiler_pages()
    assert _library_rss_kb() < held / 4
    assert before(x) == 135  # a loaded kernel runs without LLVM's code

    @njit(cache=False)
    def after(a):  # type: ignore[no-untyped-def]
        return (a + 1).max()

    assert after(x) == 10  # compiling again maps the code again


def test_only_unmodified_read_only_mappings_are_let_go() -> None:
    smaps = "\n".join([
        "1000-2000 r-xp 00000000 08:01 7 /lib/libllvmlite.so",   # code: let go
        "Rss: 4 kB", "Anonymous: 0 kB",
        "2000-3000 r--p 00001000 08:01 7 /lib/libllvmlite.so",   # relocated: kept
        "Anonymous: 4 kB",
        "3000-4000 rw-p 00002000 08:01 7 /lib/libllvmlite.so",   # writable: kept
        "Anonymous: 0 kB",
        "4000-5000 r-xp 00000000 08:01 8 /lib/libarrow.so",      # another library: kept
        "Anonymous: 0 kB",
        "5000-6000 rw-p 00000000 00:00 0 ",                      # anonymous: kept
        "Anonymous: 4 kB",
    ])
    assert clean_library_ranges(COMPILER_LIBRARIES, smaps) == [(0x1000, 0x1000)]


def test_nothing_is_read_where_llvm_was_never_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process served by the precompiled kernels never loads LLVM: letting it go then costs
    nothing (reading smaps takes ~20 ms in a run's main process, ~0.1 s in a Ray driver)."""
    import cleanpipe.memory as memory

    def unexpected() -> None:
        raise AssertionError("smaps read although LLVM's library was never loaded")

    monkeypatch.delitem(sys.modules, "llvmlite.binding.ffi", raising=False)
    monkeypatch.setattr(memory, "_madvise", unexpected)
    release_compiler_pages()
