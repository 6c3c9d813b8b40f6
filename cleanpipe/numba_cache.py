"""Where numba keeps cleanpipe's compiled kernels: a writable per-user cache.

numba's default cache sits next to the source (``__pycache__`` inside site-packages), which
a read-only install (a container image, a system package, a shared venv) cannot write, so
every run compiles again. Before the kernels become numba dispatchers
(:func:`cleanpipe.precompiled.njit`) this module is imported, which points
``numba.config.CACHE_DIR`` at
``$XDG_CACHE_HOME/cleanpipe/numba`` (or ``~/.cache/cleanpipe/numba``). A ``NUMBA_CACHE_DIR``
the user set is kept as it is. If the directory cannot be created, numba falls back to its
own locators, so caching degrades but nothing fails.

    >>> from pathlib import Path
    >>> user_cache_dir({"XDG_CACHE_HOME": "/tmp/xdg"}) == Path("/tmp/xdg/cleanpipe/numba")
    True
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from numba import config


def user_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The per-user kernel cache folder (XDG base-directory rules)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "cleanpipe" / "numba"


def configure() -> str:
    """Set numba's cache folder unless the user chose one; returns the folder in use."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return str(config.CACHE_DIR)
    if not config.CACHE_DIR:
        path = user_cache_dir()
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError:
            return ""  # numba's own locators take over (in-tree, then ~/.cache/numba)
        config.CACHE_DIR = str(path)
    return str(config.CACHE_DIR)


CACHE_DIR = configure()
