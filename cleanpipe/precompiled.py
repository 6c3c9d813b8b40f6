"""Kernels compiled ahead of time, so a small run waits for no JIT compiler.

Every numba kernel costs ~0.5-3 s to compile on first use, and a run of ``cleanpipe check``
on a fresh CI runner (empty caches) used to spend ~15 s of its ~19 s compiling. The entry
points Python calls are marked with :func:`ahead_of_time` and a numba signature; building
the wheel (``setup.py``, so ``pip install`` ships them) or ``make setup`` in a checkout
(``python -m cleanpipe.precompiled``) compiles them all with ``numba.pycc`` into one
extension module, ``cleanpipe/_precompiled.*.so``, from the very same Python source, so
results are identical by construction (and ``tests/test_precompiled.py`` checks it on real
data and adversarial inputs).

A call goes to that compiled twin when the module exists, was built from the current source
files and numba version (a fingerprint written next to it; a stale build is ignored, never
used), the arguments fit its signature, and the process has fed that kernel less than
:data:`SMALL_BYTES` so far. Past that, or with no twin, calls take the JIT path as before:
compiled on first use for this CPU and cached per user (:mod:`cleanpipe.numba_cache`), which
pays for itself on inputs that size.
``CLEANPIPE_PRECOMPILED=0`` switches the twins off (:func:`mode`).

    >>> import numpy as np
    >>> from cleanpipe.dedup import kernels
    >>> kernels.union_find(3, np.array([0]), np.array([2])).tolist()
    [0, 1, 0]
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numba
import numpy as np
from numba.core import sigutils, types

PACKAGE = Path(__file__).resolve().parent
MODULE = "_precompiled"
"""Name of the extension module (inside the ``cleanpipe`` package)."""
FINGERPRINT = PACKAGE / f"{MODULE}.json"
KERNEL_MODULES = ("cleanpipe.dedup.kernels", "cleanpipe.dedup.part_kernels",
                  "cleanpipe.text.byte_kernels")
"""Modules whose :func:`ahead_of_time` kernels the build compiles."""
SMALL_BYTES = 16 << 20
"""Array bytes a process hands one kernel's twin before it compiles the kernel instead."""

_KERNELS: dict[str, Kernel] = {}
_twins: Any = None  # the loaded extension module, False if unusable, None before looking


class Kernel:
    """A numba dispatcher that hands small calls to its ahead-of-time twin."""

    def __init__(self, dispatcher: Any, signatures: tuple[str, ...]) -> None:
        self.dispatcher = dispatcher
        self.signatures = signatures
        func = dispatcher.py_func
        self.name = f"{func.__module__.rsplit('.', 1)[-1].lstrip('_')}__{func.__name__}"
        self._params = inspect.signature(func)
        self.__doc__ = func.__doc__
        self.__name__ = func.__name__
        self.__wrapped__ = func
        self._twin_bytes = 0
        self._types: list[tuple[Any, ...]] | None = None

    def twin_names(self) -> list[str]:
        """Exported names of the twins, one per signature."""
        return [f"{self.name}_{i}" for i in range(len(self.signatures))]

    def twin(self, *args: Any) -> Any:
        """Call the ahead-of-time twin (``LookupError`` when there is none that fits)."""
        mod = load_twins()
        if not mod:
            raise LookupError("no usable precompiled kernels: run python -m "
                              "cleanpipe.precompiled")
        bound = self._params.bind(*args)
        bound.apply_defaults()
        # A compiled twin does not check what it is given (an int32 array read as int64
        # crashes): call it only with the types the JIT would infer for the same signature.
        got = [numba.typeof(a) for a in bound.args]
        for name, want in zip(self.twin_names(), self._arg_types(), strict=True):
            if len(got) == len(want) and all(map(_fits, got, want)):
                return getattr(mod, name)(*bound.args)
        raise LookupError(f"{self.name}: no precompiled signature fits these arguments")

    def _arg_types(self) -> list[tuple[Any, ...]]:
        if self._types is None:
            self._types = [sigutils.normalize_signature(s)[0] for s in self.signatures]
        return self._types

    def __call__(self, *args: Any) -> Any:
        how = mode()
        if how == "only":
            return self.twin(*args)
        # The twin is built for any x86-64, so it lacks the JIT's vector instructions (the
        # MinHash loop runs ~7x slower): once this process has fed it SMALL_BYTES, or the
        # JIT version is compiled anyway, compiling pays for itself.
        size = sum(a.nbytes for a in args if isinstance(a, np.ndarray))
        if (how == "auto" and self._twin_bytes + size <= SMALL_BYTES
                and not self.dispatcher.overloads):
            try:
                out = self.twin(*args)
            except LookupError:
                pass
            else:
                self._twin_bytes += size
                return out
        return self.dispatcher(*args)


def _fits(got: Any, want: Any) -> bool:
    """An argument typed ``got`` (as the JIT types it) fits the declared type ``want``."""
    if isinstance(want, types.Array):
        # any layout: the twins are compiled for layout "A"; read-only inputs are only read
        return (isinstance(got, types.Array) and got.dtype == want.dtype
                and got.ndim == want.ndim)
    return got == want


def ahead_of_time(*signatures: str) -> Callable[[Any], Kernel]:
    """Mark a ``@njit`` kernel for the ahead-of-time build, with its numba signature(s)."""
    def wrap(dispatcher: Any) -> Kernel:
        k = Kernel(dispatcher, signatures)
        _KERNELS[k.name] = k
        return k
    return wrap


def mode() -> str:
    """``CLEANPIPE_PRECOMPILED``: ``auto`` (default), ``0`` (JIT only) or ``only`` (twins
    only, an error where none fits: for tests that compare the two paths)."""
    got = os.environ.get("CLEANPIPE_PRECOMPILED", "auto")
    return {"0": "off", "off": "off", "only": "only"}.get(got, "auto")


def fingerprint(files: list[str]) -> dict[str, Any]:
    """What a build depends on: numba's version and the kernel source files' hashes."""
    return {"numba": numba.__version__, "numpy": np.__version__.split(".")[0],
            "files": {f: hashlib.sha256((PACKAGE / f).read_bytes()).hexdigest()
                      if (PACKAGE / f).is_file() else None for f in sorted(files)}}


def load_twins(*, again: bool = False) -> Any:
    """The extension module if it was built from the current sources, else ``False``
    (looked up once; ``again`` looks again, after a build)."""
    global _twins
    if _twins is None or again:
        _twins = False
        try:
            built = json.loads(FINGERPRINT.read_text(encoding="utf-8"))
            if fingerprint(list(built["files"])) == built:
                _twins = importlib.import_module(f"cleanpipe.{MODULE}")
        except (OSError, ValueError, KeyError, ImportError):
            pass
    return _twins


def build(output_dir: Path = PACKAGE) -> Path:
    """Compile every marked kernel into ``output_dir``; returns the extension's path."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pycc's pending deprecation: no replacement yet
        from numba.pycc import CC
    files = []
    for m in KERNEL_MODULES:
        files.append(str(Path(importlib.import_module(m).__file__).resolve()
                         .relative_to(PACKAGE)))
    cc = CC(MODULE)
    cc.output_dir = str(output_dir)
    for k in _KERNELS.values():
        for name, sig in zip(k.twin_names(), k.signatures, strict=True):
            cc.export(name, sig)(k.dispatcher.py_func)
    cc.compile()
    (output_dir / FINGERPRINT.name).write_text(json.dumps(fingerprint(files), indent=1),
                                               encoding="utf-8")
    return output_dir / cc.output_file


def main(argv: list[str]) -> None:
    """``python -m cleanpipe.precompiled [output_dir]``: build the twins."""
    out = build(Path(argv[0]) if argv else PACKAGE)
    print(f"precompiled {len(_KERNELS)} kernels into {out}")


if __name__ == "__main__":
    # Run as a script this file is ``__main__``; the kernels register with the package's
    # copy of it, so build through that one.
    from cleanpipe import precompiled

    precompiled.main(sys.argv[1:])
