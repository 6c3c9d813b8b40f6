"""Build hook: a wheel (and a non-editable ``pip install .``) ships cleanpipe's numba kernels
compiled ahead of time, so a fresh install's first small run compiles nothing.

Everything else about the package is declared in ``pyproject.toml``. After setuptools has
copied the package into its build folder, :class:`BuildPyWithKernels` runs ``python -m
cleanpipe.precompiled <that folder>/cleanpipe`` (the same build ``make setup`` runs in the
source tree) on the copied files, so the fingerprint it writes matches the installed
sources. Where that build fails (no C compiler, a platform numba.pycc does not support) the
package is built without it and says so in the build log; installed, it JIT-compiles its
kernels on first use as a source checkout without ``make setup`` does. An editable install
builds nothing here: ``make setup`` builds the kernels in the source tree.

Example: ``pip wheel --no-deps .`` gives ``cleanpipe-<version>-cp311-cp311-linux_x86_64.whl``
holding ``cleanpipe/_precompiled.cpython-311-x86_64-linux-gnu.so`` and
``cleanpipe/_precompiled.json`` (for any x86-64), and ``cleanpipe/_precompiled_host.*`` (for
the x86-64 level of the CPU the wheel was built on: used only on CPUs that have every
feature of that level).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

# the names cleanpipe.precompiled gives what it builds (the modules, generic and for the
# build's CPU, and their fingerprints)
BUILT = "_precompiled*.*"


class BuildPyWithKernels(build_py):
    """``build_py``, then the ahead-of-time kernels into the build folder."""

    def run(self) -> None:
        super().run()
        if self.editable_mode or self.dry_run:
            return
        target = Path(self.build_lib) / "cleanpipe"
        for stale in target.glob(BUILT):  # from an earlier build in the same folder
            stale.unlink()
        with tempfile.TemporaryDirectory(prefix="cleanpipe-build-") as scratch:
            # the copied package comes first on the path (a build environment's own entries
            # stay: they hold numba); no bytecode written into what ships, no numba cache
            # into the builder's home, no temporary files left
            path = [str(Path(self.build_lib).resolve()), os.environ.get("PYTHONPATH", "")]
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path)),
                   "PYTHONDONTWRITEBYTECODE": "1", "NUMBA_CACHE_DIR": scratch,
                   "TMPDIR": scratch}
            env.pop("CLEANPIPE_PRECOMPILED", None)
            proc = subprocess.run([sys.executable, "-m", "cleanpipe.precompiled",
                                   str(target.resolve())], cwd=scratch, env=env,
                                  capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            self.announce(proc.stdout.strip(), level=logging.INFO)
            return
        for partial in target.glob(BUILT):
            partial.unlink()
        self.announce(
            "NOTE: cleanpipe's ahead-of-time numba kernels could not be built, so this build "
            "ships without them: the package works the same, but its first run compiles "
            "each kernel it uses (seconds each) and caches it per user. Cause (python -m "
            f"cleanpipe.precompiled, exit {proc.returncode}):\n{proc.stderr[-3000:]}",
            level=logging.WARNING)


class WithCompiledCode(Distribution):
    """The wheel holds a compiled module, so it is tagged for this Python and platform."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildPyWithKernels}, distclass=WithCompiledCode)
