"""The benchmark helpers measure what they claim: memory of the whole process tree, and
scaling copies that are not duplicates of each other."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from _common import measure
from bench_scaling import perturb

# Touch one byte per page so the allocation is resident, then stay alive for the sampler.
ALLOC = (
    "import time; b = bytearray({mb} * 1024 * 1024); "
    "b[::4096] = b'x' * len(b[::4096]); time.sleep(0.6)"
)


def test_measure_sees_a_process_allocation():
    small = measure([sys.executable, "-c", "pass"])
    big = measure([sys.executable, "-c", ALLOC.format(mb=300)])
    assert small.rc == big.rc == 0
    # ru_maxrss of a child also counts the parent's pages it had between fork and exec, so
    # under a large pytest process it cannot tell these two apart; the tree sampler can.
    assert big.peak_rss_mb - small.peak_rss_mb > 250


def test_measure_counts_a_forked_grandchild():
    # The parent stays small; only its child allocates. A parent-only figure would miss it.
    code = (
        "import subprocess, sys; "
        f"subprocess.run([sys.executable, '-c', {ALLOC.format(mb=300)!r}], check=True)"
    )
    m = measure([sys.executable, "-c", code])
    assert m.rc == 0
    assert m.peak_rss_mb > 250


def test_measure_reports_failure_exit_code():
    m = measure([sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"])
    assert (m.rc, m.stderr) == (3, "boom")


def shingles(text: str, n: int = 5) -> set[str]:
    w = text.split()
    return {" ".join(w[i : i + n]) for i in range(len(w) - n + 1)}


@pytest.mark.parametrize("copy", [1, 2, 3, 4, 7])
def test_scaling_copies_share_no_shingle_with_the_original(copy):
    text = " ".join(f"w{i}" for i in range(40))
    other = perturb(text, copy)
    assert other != text
    assert len(other.split()) == len(text.split())
    assert not shingles(text) & shingles(other)
    # ...nor with another copy
    assert not shingles(perturb(text, copy + 1)) & shingles(other)

