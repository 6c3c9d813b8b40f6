"""cleanpipe as a user gets it from ``pip install``: its wheel, built the way pip builds it,
installed into a new virtual environment.

Shared by ``tests/test_wheel.py`` and ``benchmarks/bench_cold_start.py --from-wheel``. The
new environment installs the wheel alone and finds cleanpipe's dependencies in this
project's environment through a ``.pth`` file (as ``make .venv-llamafactory`` does), so no
registry is needed; what it imports as ``cleanpipe`` is the installed wheel's copy.

    >>> sorted(p.name for p in SOURCES)
    ['README.md', 'cleanpipe', 'pyproject.toml', 'setup.py']
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCES = [REPO / n for n in ("pyproject.toml", "setup.py", "README.md", "cleanpipe")]
"""What the build reads (an sdist holds the same)."""


def build_wheel(root: Path, *, env: dict[str, str] | None = None) -> tuple[Path, str]:
    """Build the wheel from a clean copy of the sources (no build outputs, no caches) with
    ``pip wheel``, offline, against this environment's setuptools and numba; returns the
    wheel and the build log."""
    src = root / "src"
    for p in SOURCES:
        if p.is_dir():
            shutil.copytree(p, src / p.name, ignore=shutil.ignore_patterns(
                "__pycache__", "_precompiled.*", "_precompiled_host.*", "*.nbi", "*.nbc"))
        else:
            src.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, src / p.name)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "--no-index", "-v", "-w", str(root / "dist"),
                           str(src)], env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    if proc.returncode:
        raise RuntimeError(f"pip wheel failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    (wheel,) = (root / "dist").glob("cleanpipe-*.whl")
    return wheel, proc.stdout + proc.stderr


def venv_with_wheel(folder: Path, wheel: Path) -> Path:
    """A new virtual environment in ``folder`` with ``wheel`` installed; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig."
                              "get_paths()['purelib'])"], capture_output=True, text=True,
                             check=True).stdout.strip()
    (Path(purelib) / "project-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n",
                                                   encoding="utf-8")
    # --ignore-installed: the project's own cleanpipe (seen through the .pth file) is
    # another environment's, never to be uninstalled from here
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-index", "--ignore-installed", str(wheel)], env=env,
                   check=True, timeout=300)
    return python
