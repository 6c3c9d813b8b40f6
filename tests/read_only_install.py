"""A fresh, read-only copy of the cleanpipe package, as a system package or image has it,
and a small run in a fresh install that reports what numba compiled.

Shared by the cache tests, the wheel test and ``benchmarks/bench_cold_start.py``.

    >>> import tempfile
    >>> site = read_only_copy(Path(tempfile.mkdtemp()))
    >>> (site / "cleanpipe" / "__init__.py").is_file()
    True
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
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


# MinHash dedup and whitespace repair of three rows: the kernels of a small run. Every numba
# compilation in the process (any kernel, cached or not) is recorded through numba's events.
SMALL_RUN = """\
import json
from numba.core import event
import cleanpipe
from cleanpipe import precompiled
from cleanpipe.stages.minhash_dedup import MinHashDedup
from cleanpipe.stages.whitespace import Whitespace
rows = {'text': ['the quick brown fox jumps over the lazy dog by the bank',
                 'the quick brown fox jumps over the lazy dog by the bank!',
                 'something  else entirely ']}
with event.install_recorder('numba:compile') as rec:
    kept = MinHashDedup(fields=['text'], threshold=0.7)(rows)['text']
    fixed = Whitespace(action='fix')(rows['text'])
compiled = sorted({e.data['dispatcher'].py_func.__qualname__ for _, e in rec.buffer})
print(json.dumps({'kept': kept, 'fixed': fixed, 'compiled': compiled,
                  'package': cleanpipe.__file__, 'twins': bool(precompiled.load_twins()),
                  'host_twins': bool(precompiled.load_twins(host=True))}))
"""


def small_run(python: str, home: Path, pythonpath: Path | None = None) -> dict:
    """Run :data:`SMALL_RUN` with ``python`` in ``home`` (its per-user caches empty, no
    ``NUMBA_*`` settings); returns what it printed."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NUMBA_", "CLEANPIPE_PRECOMPILED", "PYTHONPATH"))}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / "xdg"), PYTHONDONTWRITEBYTECODE="1")
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    proc = subprocess.run([python, "-c", SMALL_RUN], env=env, cwd=str(home),
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
