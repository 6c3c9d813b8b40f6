"""Compiled kernels are cached per user, outside the package, so a read-only install works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from read_only_install import read_only_copy

from cleanpipe.numba_cache import user_cache_dir

# Runs two kernel-backed stages and reports where numba cached them and whether the
# kernels came from that cache (hits) or were compiled (misses).
_SCRIPT = r"""
import json, os, sys
import numba
import cleanpipe
from cleanpipe.dedup import kernels
from cleanpipe.text import byte_kernels
from cleanpipe.stages.minhash_dedup import MinHashDedup
from cleanpipe.stages.whitespace import Whitespace
rows = {"text": ["the quick brown fox jumps over the lazy dog near the river bank",
                 "the quick brown fox jumps over the lazy dog near the river bank!",
                 "a completely  different sentence about training language models "]}
kept = MinHashDedup(fields=["text"], threshold=0.7)(rows)["text"]
fixed = Whitespace()(rows["text"])
hits = misses = 0
for mod in (kernels, byte_kernels):
    for v in vars(mod).values():
        v = getattr(v, "dispatcher", v)  # kernels marked ahead_of_time wrap theirs
        if isinstance(v, numba.core.registry.CPUDispatcher):
            hits += sum(v.stats.cache_hits.values())
            misses += sum(v.stats.cache_misses.values())
pkg = os.path.dirname(cleanpipe.__file__)
print(json.dumps({"cache_dir": numba.config.CACHE_DIR, "package": pkg,
                  "package_writable": os.access(pkg, os.W_OK), "kept": kept, "fixed": fixed,
                  "hits": hits, "misses": misses}))
"""


# One small kernel: enough to see where its cache lands.
_ONE_KERNEL = r"""
import json, numpy as np, numba
from cleanpipe.dedup import kernels
kernels.union_find(3, np.array([0]), np.array([2]))
print(json.dumps({"cache_dir": numba.config.CACHE_DIR}))
"""


def _run(site: Path, home: Path, extra: dict[str, str] | None = None,
         script: str = _SCRIPT) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    # JIT only: with the ahead-of-time twins (cleanpipe.precompiled) small runs compile
    # nothing, and this is about where compiled kernels are cached.
    env.update(PYTHONPATH=str(site), HOME=str(home), XDG_CACHE_HOME=str(home / "xdg"),
               PYTHONDONTWRITEBYTECODE="1", CLEANPIPE_PRECOMPILED="0", **(extra or {}))
    # Root ignores file modes: drop that privilege so that read-only means read-only.
    prefix = (["setpriv", "--inh-caps=-dac_override,-dac_read_search",
               "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else [])
    proc = subprocess.run([*prefix, sys.executable, "-c", script], env=env, cwd=str(home),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_user_cache_dir_follows_xdg_then_home() -> None:
    assert user_cache_dir({"XDG_CACHE_HOME": "/x/c", "HOME": "/h"}) == Path("/x/c/cleanpipe/numba")
    assert user_cache_dir({"HOME": "/h"}) == Path("/h/.cache/cleanpipe/numba")


def test_read_only_package_caches_kernels_per_user(tmp_path: Path) -> None:
    site = read_only_copy(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    first = _run(site, home)
    assert first["package"] == str(site / "cleanpipe")
    assert first["package_writable"] is False
    assert first["cache_dir"] == str(home / "xdg" / "cleanpipe" / "numba")
    assert len(first["kept"]) == 2  # the near-duplicate went
    assert first["misses"] > 0
    cached = list((home / "xdg" / "cleanpipe" / "numba").rglob("*.nbi"))
    assert cached, "no kernel index written to the per-user cache"
    assert not list(site.rglob("*.nbi"))
    # A second run loads every kernel it needs from that cache instead of compiling.
    second = _run(site, home)
    assert second["hits"] > 0 and second["misses"] == 0
    assert second["kept"] == first["kept"] and second["fixed"] == first["fixed"]


def test_user_numba_cache_dir_is_kept(tmp_path: Path) -> None:
    site = read_only_copy(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    mine = home / "mine"
    got = _run(site, home, {"NUMBA_CACHE_DIR": str(mine)}, _ONE_KERNEL)
    assert got["cache_dir"] == str(mine)
    assert list(mine.rglob("*.nbi"))
    assert not (home / "xdg" / "cleanpipe").exists()
