"""A fresh, read-only copy of the cleanpipe package, as a system package or image has it.

Shared by the cache tests and ``benchmarks/bench_cold_start.py``.

    >>> import tempfile
    >>> site = read_only_copy(Path(tempfile.mkdtemp()))
    >>> (site / "cleanpipe" / "__init__.py").is_file()
    True
"""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def read_only_copy(root: Path) -> Path:
    """Copy the package to ``root/site/cleanpipe`` (no compiled caches), read-only; returns
    the folder to put on ``PYTHONPATH``."""
    site = root / "site"
    shutil.copytree(REPO / "cleanpipe", site / "cleanpipe",
                    ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
    for p in sorted(site.rglob("*"), reverse=True):
        p.chmod(0o555 if p.is_dir() else 0o444)
    site.chmod(0o555)
    return site
