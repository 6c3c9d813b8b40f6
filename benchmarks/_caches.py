"""The cache state a measured run starts from: cold (empty) or warm (as its last run left it).

cleanpipe compiles its kernels with numba and numba caches them on disk (by default in the
``__pycache__`` folder next to ``cleanpipe/dedup/kernels.py``; ``NUMBA_CACHE_DIR`` moves them).
A benchmark that leaves that cache alone compares a warm cleanpipe against peers that start
from nothing. So every measured tool gets a cache folder of its own under
``benchmarks/.work/caches/`` and is pointed at it through the environment variables that
decide where caches go (numba's, the XDG user cache that per-user caches follow, Hugging
Face's); a cold run empties that folder first, a warm run keeps what the previous run of the
same tool wrote. Nothing outside ``benchmarks/.work`` is read or removed: the user's own
caches and the package's ``__pycache__`` stay as they are.

    >>> import tempfile
    >>> work = Path(tempfile.mkdtemp())
    >>> root = work / "caches" / "cleanpipe"
    >>> sorted(cache_env(root))
    ['HF_HOME', 'NUMBA_CACHE_DIR', 'XDG_CACHE_HOME']
    >>> (root / "numba" / "k.nbi").parent.mkdir(parents=True)
    >>> _ = (root / "numba" / "k.nbi").write_bytes(b"x")
    >>> jit_index_files(root) == [root / "numba" / "k.nbi"]
    True
    >>> empty_cache(root, within=work)
    1
    >>> jit_index_files(root)
    []
"""

from __future__ import annotations

import shutil
from pathlib import Path

#: Environment variable -> sub-folder of a tool's cache root.
CACHE_VARS = {"NUMBA_CACHE_DIR": "numba", "XDG_CACHE_HOME": "xdg", "HF_HOME": "hf"}


def cache_env(root: Path) -> dict[str, str]:
    """Environment that sends numba's, the XDG and Hugging Face caches under ``root``."""
    return {var: str(root / sub) for var, sub in CACHE_VARS.items()}


def empty_cache(root: Path, *, within: Path) -> int:
    """Remove every file under ``root`` (a cold start); return how many were removed.

    ``root`` must lie inside ``within`` (the benchmark's own work folder): this never
    deletes a cache the benchmark did not create.
    """
    root, within = root.resolve(), within.resolve()
    if root == within or within not in root.parents:
        raise ValueError(f"refusing to empty {root}: not inside {within}")
    removed = sum(1 for p in root.rglob("*") if p.is_file() or p.is_symlink())
    shutil.rmtree(root, ignore_errors=True)
    for sub in CACHE_VARS.values():
        (root / sub).mkdir(parents=True, exist_ok=True)
    return removed


#: Folders pip and uv create in the XDG cache when they download something.
INSTALLER_CACHES = ("pip", "uv")


def installer_traces(root: Path) -> list[str]:
    """Installers that used the tool's cache during its run (a run that installed packages).

    Some tools install missing dependencies while they run (data-juicer's LazyLoader calls
    ``uv pip install``); such a run measures an install, not the tool. A cold run starts from
    an empty cache, so any pip or uv folder in it was made by that run.
    """
    xdg = root / CACHE_VARS["XDG_CACHE_HOME"]
    return [name for name in INSTALLER_CACHES if (xdg / name).exists()]


def jit_index_files(root: Path) -> list[Path]:
    """numba's cache index files (one per cached function) under ``root``, sorted."""
    return sorted(root.rglob("*.nbi"))
