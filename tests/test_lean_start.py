"""The ``cleanpipe`` command starts lean (issue #18: the main process runs alone until its
workers fork, so what it loads is on every run's critical path): pyarrow does not import
pandas (~0.13 s), nor does choosing the precompiled kernels load LLVM (~20 ms and a
~100 MB mapping), and neither changes what a run gives or how pandas objects convert."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cleanpipe import precompiled
from cleanpipe.pandas_probe import defer_pandas

_COMMAND = """\
import atexit, json, sys
path = sys.argv[1]
def report():
    seen = {m: m in sys.modules for m in ("pandas", "llvmlite.binding.ffi", "numba")}
    if seen["pandas"]:  # imported after the deferral: pyarrow must convert its objects again
        import pandas as pd, pyarrow as pa
        seen["series_nulls"] = pa.array(pd.Series([1.5, None])).null_count
    with open(path, "w") as fh:
        json.dump(seen, fh)
atexit.register(report)
sys.argv = ["cleanpipe", *sys.argv[2:]]
from cleanpipe.cli import entry
entry()
"""

_PIPELINE = """\
name: lean
fields: [text]
stages:
  - stage: unicode_fix
  - stage: exact_dedup
  - stage: minhash_dedup
    threshold: 0.7
"""


_ROWS = ["the quick brown fox jumps over the lazy dog by the river bank today",
         "the quick brown fox jumps over the lazy dog by the river bank today!",
         "cafÃ© au lait, s’il vous plaît", "something else entirely, and longer than that"]


def _command(tmp_path: Path, *extra: str) -> dict[str, object]:
    """``cleanpipe run`` (the command's own entry point) on :data:`_ROWS`; returns which
    modules it had loaded at exit."""
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in _ROWS), encoding="utf-8")
    (tmp_path / "p.yaml").write_text(_PIPELINE, encoding="utf-8")
    seen = tmp_path / "modules.json"
    proc = subprocess.run(
        [sys.executable, "-c", _COMMAND, str(seen), "run", str(tmp_path / "p.yaml"),
         "--input", str(src), "--output", str(tmp_path / "out"), "--workers", "1",
         "--no-progress", "--quiet", *extra],
        capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert (report["totals"]["read"], report["totals"]["kept"]) == (4, 3)
    return json.loads(seen.read_text())


def test_the_command_loads_neither_pandas_nor_llvm(tmp_path: Path) -> None:
    if not precompiled.load_twins(host=True):  # pragma: no cover - make test builds them
        pytest.skip("no precompiled kernels for this CPU: a run compiles with numba")
    assert _command(tmp_path) == {"pandas": False, "llvmlite.binding.ffi": False,
                                  "numba": False}


def test_the_command_writes_a_dataset_with_pandas_deferred(tmp_path: Path) -> None:
    """``--format hf`` imports ``datasets``, which imports pandas after the deferral: the
    dataset is written and opens, and pyarrow converts pandas objects as usual again."""
    import datasets

    seen = _command(tmp_path, "--format", "hf")
    assert seen["pandas"] is True and seen["series_nulls"] == 1
    got = datasets.load_from_disk(str(tmp_path / "out" / "data"))["text"]
    assert got == [_ROWS[0], "café au lait, s’il vous plaît", _ROWS[3]]


_LATER = """\
import json, sys
from cleanpipe.pandas_probe import defer_pandas
import pyarrow as pa, pyarrow.compute as pc
out = {"deferred": defer_pandas()}
out["nulls"] = pa.array([1, None]).null_count
out["equal"] = pc.equal(pa.array(["a", "b"]), "a").to_pylist()
out["pandas_before"] = "pandas" in sys.modules
import pandas as pd
out["series_nulls"] = pa.array(pd.Series([1.5, None])).null_count
out["series_text"] = pa.array(pd.Series(["a", None])).to_pylist()
out["watching"] = any(type(f).__name__ == "_PandasWatch" for f in sys.meta_path)
print(json.dumps(out))
"""


def test_pandas_imported_later_converts_as_usual() -> None:
    """pyarrow's first probe is answered "no pandas"; once something imports pandas, a
    Series converts as without the deferral (its NaN a null, its None a null)."""
    proc = subprocess.run([sys.executable, "-c", _LATER], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {
        "deferred": True, "nulls": 1, "equal": [True, False], "pandas_before": False,
        "series_nulls": 1, "series_text": ["a", None], "watching": False}


def test_no_deferral_once_pandas_is_imported() -> None:
    import pandas  # noqa: F401

    before = list(sys.meta_path)
    assert defer_pandas() is False
    assert sys.meta_path == before


def test_cpu_features_from_the_kernel_are_llvms() -> None:
    """What ``/proc/cpuinfo`` gives of the levels' features is what LLVM finds."""
    if not Path("/proc/cpuinfo").is_file():  # pragma: no cover - Linux only
        pytest.skip("no /proc/cpuinfo")
    import llvmlite.binding as llvm

    llvms = {k for k, on in llvm.get_host_cpu_features().items() if on} & precompiled.LEVEL_FEATURES
    assert precompiled.cpu_features() == llvms
    assert precompiled.host_level() == precompiled.host_level(frozenset(llvms))


def test_cpuinfo_features_need_every_processor() -> None:
    text = ("processor : 0\nflags : fpu pni ssse3 sse4_1 abm lahf_lm\n\n"
            "processor : 1\nflags : fpu pni ssse3 abm\n")
    assert precompiled.cpuinfo_features(text) == {"sse3", "ssse3", "lzcnt"}
    assert precompiled.cpuinfo_features("processor : 0\nvendor_id : x\n") is None
