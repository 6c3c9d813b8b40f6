"""The benchmark helpers measure what they claim: memory of the whole process tree, scaling
copies that are not duplicates of each other, interleaved repetitions summarised as median and
min–max, and cold runs that really start from an empty cache."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from _caches import CACHE_VARS, cache_env, empty_cache, installer_traces, jit_index_files
from _common import LoadWatch, measure, runnable_tasks
from _repeats import Spread, interleaved, ratio_spread
from bench_peers import one_file, plan, seconds_until
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


def test_runnable_tasks_count_a_busy_child():
    assert runnable_tasks() >= 1  # this test's own process is running
    # A child that spins for 1 s is runnable the whole time: the mean counts it (other work
    # on a shared machine can only add to it).
    m = measure([sys.executable, "-c",
                 "import time\nt = time.time()\nwhile time.time() - t < 1: pass"])
    assert m.rc == 0
    assert m.runnable_mean >= 0.5
    with LoadWatch(0.01) as w:
        t = time.time()
        while time.time() - t < 0.3:
            pass
    assert w.runnable_mean >= 0.5
    assert w.cell().count("→") == 1


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



# --- repeated, interleaved runs and the cache state they start from (issue 19, item 5) ---

def test_interleaved_runs_every_item_once_per_round_in_the_same_order():
    order = interleaved(["a", "b", "c"], 3)
    assert [i for _, i in order] == list("abcabcabc")
    assert [r for r, _ in order] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    # Never the same tool twice in a row: a burst of load cannot hit one tool's runs only.
    assert all(x != y for (_, x), (_, y) in itertools.pairwise(order))
    with pytest.raises(ValueError):
        interleaved(["a"], 0)


@pytest.mark.parametrize(
    ("values", "median", "low", "high"),
    [([7.0], 7.0, 7.0, 7.0), ([3.0, 1.0, 2.0], 2.0, 1.0, 3.0),
     ([4.0, 1.0, 10.0, 2.0], 3.0, 1.0, 10.0)],
)
def test_spread_is_median_and_min_max(values, median, low, high):
    s = Spread.of(values)
    assert (s.median, s.low, s.high, s.n) == (median, low, high, len(values))
    assert s.fmt("{:.1f}") == f"{median:.1f} ({low:.1f}–{high:.1f})"


def test_spread_of_nothing_is_an_error():
    with pytest.raises(ValueError):
        Spread.of([])


def test_ratio_spread_bounds_hold_every_pair_of_runs():
    slow, fast = [9.0, 12.0, 30.0], [1.5, 2.0, 2.5]
    med, lo, hi = ratio_spread(Spread.of(slow), Spread.of(fast))
    pairs = [s / f for s in slow for f in fast]
    assert med == 12.0 / 2.0
    assert (lo, hi) == (min(pairs), max(pairs))


def test_cache_env_points_every_cache_inside_the_root(tmp_path):
    env = cache_env(tmp_path / "tool")
    assert set(env) == set(CACHE_VARS) == {"NUMBA_CACHE_DIR", "XDG_CACHE_HOME", "HF_HOME"}
    assert len(set(env.values())) == len(env)
    assert all(tmp_path / "tool" in Path(v).parents for v in env.values())


def test_empty_cache_removes_only_what_is_under_the_root(tmp_path):
    work = tmp_path / "work"
    root = work / "caches" / "cleanpipe"
    other = work / "caches" / "datatrove" / "keep.bin"
    outside = tmp_path / "user_cache" / "keep.nbi"
    for f in (root / "numba" / "a.nbi", root / "numba" / "a.nbc", root / "xdg" / "x" / "y",
              other, outside):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"1")
    assert len(jit_index_files(root)) == 1
    assert empty_cache(root, within=work) == 3
    assert not any(p.is_file() for p in root.rglob("*"))
    assert jit_index_files(root) == []
    assert other.exists() and outside.exists()
    # The folders the environment points at exist again, empty, ready for the run.
    assert all((root / sub).is_dir() for sub in CACHE_VARS.values())


def test_installer_traces_name_a_run_that_installed_packages(tmp_path):
    work = tmp_path / "work"
    root = work / "caches" / "peer"
    empty_cache(root, within=work)
    assert installer_traces(root) == []
    # What `uv pip install` leaves when XDG_CACHE_HOME points into the tool's cache.
    (Path(cache_env(root)["XDG_CACHE_HOME"]) / "uv" / "wheels-v8").mkdir(parents=True)
    assert installer_traces(root) == ["uv"]
    empty_cache(root, within=work)
    assert installer_traces(root) == []


@pytest.mark.parametrize("target", ["outside", "within", "parent"])
def test_empty_cache_refuses_a_folder_it_did_not_create(tmp_path, target):
    work = tmp_path / "work"
    work.mkdir()
    keep = {"outside": tmp_path / "elsewhere", "within": work, "parent": tmp_path}[target]
    (keep / "sub").mkdir(parents=True, exist_ok=True)
    (keep / "sub" / "precious").write_bytes(b"1")
    with pytest.raises(ValueError):
        empty_cache(keep, within=work)
    assert (keep / "sub" / "precious").exists()


NUMBA_PROBE = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import probe_mod
    probe_mod.twice(3)
    s = probe_mod.twice.stats
    print(json.dumps({"hits": sum(s.cache_hits.values()), "misses": sum(s.cache_misses.values())}))
""")


def test_numba_kernels_go_to_the_cache_env_and_cold_means_compiled(tmp_path):
    """The mechanism bench_peers relies on: with cache_env, numba writes a cache=True kernel
    under the tool's cache root (not next to the module), a run after empty_cache compiles,
    and the next run loads it from that cache. (Emptying removes the index files:
    test_empty_cache_removes_only_what_is_under_the_root.)"""
    pytest.importorskip("numba")
    src = tmp_path / "src"
    src.mkdir()
    (src / "probe_mod.py").write_text(
        "from numba import njit\n\n@njit(cache=True)\ndef twice(x):\n    return 2 * x\n")
    work = tmp_path / "work"
    root = work / "caches" / "probe"

    def run() -> dict[str, int]:
        env = {**os.environ, **cache_env(root)}
        out = subprocess.run([sys.executable, "-c", NUMBA_PROBE, str(src)], env=env,
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    empty_cache(root, within=work)
    assert run() == {"hits": 0, "misses": 1}  # cold: compiled in the run
    assert [p.name.split(".")[0] for p in jit_index_files(root)] == ["probe_mod"]
    assert not list(src.rglob("*.nbi"))  # nothing written beside the module
    assert run() == {"hits": 1, "misses": 0}  # warm: loaded from the tool's cache


def test_plan_interleaves_and_keeps_warm_after_cold():
    order = plan(["cleanpipe", "datatrove", "datajuicer"], ["shards", "onefile"], 3)
    slots = [s for _, s in order]
    assert len(slots) == 3 * 2 * 4
    for slot in set(slots):
        assert slots.count(slot) == 3
    per_round = len(slots) // 3
    for r in range(3):
        rnd = slots[r * per_round:(r + 1) * per_round]
        assert rnd == slots[:per_round]  # every round in the same order
        for inp in ("shards", "onefile"):
            cold = rnd.index((inp, "cleanpipe", "cold"))
            warm = rnd.index((inp, "cleanpipe", "warm"))
            assert cold + 1 < warm  # warm reuses the cold run's cache, a peer in between
    assert {s for s in slots if s[1] != "cleanpipe"} == {
        (i, t, "cold") for i in ("shards", "onefile") for t in ("datatrove", "datajuicer")}


def test_one_file_keeps_every_row_in_order_and_names_its_origin(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(b'{"prompt": "1"}\n\n{"prompt": "2"}\n')
    b.write_bytes(b'{"prompt": "3"}\n{"prompt": "4"}')  # no final newline
    dst = tmp_path / "one" / "all.jsonl"
    origin = one_file([a, b], dst)
    lines = dst.read_bytes().split(b"\n")
    assert lines[-1] == b""
    assert [json.loads(x)["prompt"] for x in lines[:-1]] == ["1", "2", "3", "4"]
    assert origin == ["a.jsonl:1", "a.jsonl:3", "b.jsonl:1", "b.jsonl:2"]


@pytest.mark.parametrize(("now", "hhmm", "expected"), [
    ("2026-12-03T19:35:00", "20:25", 50 * 60),
    ("2026-12-03T19:35:30", "19:36", 30),
    ("2026-12-03T23:50:00", "00:10", 20 * 60),
])
def test_seconds_until_a_clock_time(now, hhmm, expected):
    from datetime import UTC, datetime

    t = datetime.fromisoformat(now).replace(tzinfo=UTC).timestamp()
    assert seconds_until(hhmm, t) == expected
