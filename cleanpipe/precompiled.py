"""Kernels compiled ahead of time, so a small run waits for no JIT compiler.

Every numba kernel costs ~0.5-3 s to compile on first use, and a run of ``cleanpipe check``
on a fresh CI runner (empty caches) used to spend ~15 s of its ~19 s compiling. The entry
points Python calls are marked with :func:`ahead_of_time` and a numba signature; building
the wheel (``setup.py``, so ``pip install`` ships them) or ``make setup`` in a checkout
(``python -m cleanpipe.precompiled``) compiles them all with ``numba.pycc`` into one
extension module, ``cleanpipe/_precompiled.*.so``, from the very same Python source, so
results are identical by construction (and ``tests/test_precompiled.py`` checks it on real
data and adversarial inputs).

The same build compiles two modules. ``_precompiled`` is for any x86-64 CPU (what a wheel
needs), so it lacks the JIT's vector instructions: its MinHash loop runs ~5x slower than the
JIT's. ``_precompiled_host`` is compiled for the highest x86-64 level (:data:`LEVELS`:
v4 is AVX-512) the build machine's CPU has, and for C-contiguous arrays (as the JIT
specialises on them; both are needed: a level twin for any layout, or a C-layout twin for any
x86-64, is still ~5x slower): on a CPU of that level it runs about as fast as the JIT (within
measuring noise on t0), so there a call of any size goes to it and a run compiles nothing.

A call goes to the host twin when that module was built from the current source files and
numba version (a fingerprint written next to it; a stale build is ignored, never used), this
machine's CPU has every feature of the level it was built for (recorded in the same
fingerprint: a wheel built on a newer CPU ships one that is not used here), and the arguments fit
(C-contiguous arrays of the declared types). Otherwise it goes to the generic twin under the
same fingerprint and fit rules while the process has fed that kernel less than
:data:`SMALL_BYTES`. Past that, or with no twin, calls take the JIT path as before: compiled
on first use for this CPU and cached per user (:mod:`cleanpipe.numba_cache`), which pays for
itself on inputs that size.
``CLEANPIPE_PRECOMPILED=0`` switches the twins off, ``generic`` the host twins (:func:`mode`).

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

import llvmlite.binding as llvm
import numba
import numpy as np
from numba.core import sigutils, types, typing

PACKAGE = Path(__file__).resolve().parent
MODULE = "_precompiled"
"""Name of the extension module for any x86-64 CPU (inside the ``cleanpipe`` package)."""
FINGERPRINT = PACKAGE / f"{MODULE}.json"
HOST_MODULE = "_precompiled_host"
"""Name of the extension module for the CPU the build ran on."""
HOST_FINGERPRINT = PACKAGE / f"{HOST_MODULE}.json"
KERNEL_MODULES = ("cleanpipe.dedup.kernels", "cleanpipe.dedup.part_kernels",
                  "cleanpipe.text.byte_kernels")
"""Modules whose :func:`ahead_of_time` kernels the build compiles."""
SMALL_BYTES = 16 << 20
"""Array bytes a process hands one kernel's twin before it compiles the kernel instead."""

_KERNELS: dict[str, Kernel] = {}
# the loaded extension modules (generic, host), False if unusable, None before looking
_twins: dict[bool, Any] = {False: None, True: None}


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
        self._types: dict[bool, list[tuple[Any, ...]]] | None = None

    def twin_names(self) -> list[str]:
        """Exported names of the twins, one per signature."""
        return [f"{self.name}_{i}" for i in range(len(self.signatures))]

    def host_signatures(self) -> list[Any]:
        """The signatures of the host twins: the declared ones with C-contiguous arrays."""
        return [typing.signature(ret, *map(_contiguous, params))
                for params, ret in map(sigutils.normalize_signature, self.signatures)]

    def twin(self, *args: Any, host: bool = False) -> Any:
        """Call the ahead-of-time twin, the host one with ``host`` (``LookupError`` when
        there is none that fits)."""
        mod = load_twins(host=host)
        if not mod:
            raise LookupError(f"no usable precompiled kernels{' for this CPU' * host}: run "
                              "python -m cleanpipe.precompiled")
        bound = self._params.bind(*args)
        bound.apply_defaults()
        # A compiled twin does not check what it is given (an int32 array read as int64
        # crashes, a strided one read as contiguous reads wrong bytes): call it only with
        # the types the JIT would infer for the same signature.
        got = [numba.typeof(a) for a in bound.args]
        for name, want in zip(self.twin_names(), self._arg_types(host), strict=True):
            if len(got) == len(want) and all(map(_fits, got, want)):
                return getattr(mod, name)(*bound.args)
        raise LookupError(f"{self.name}: no precompiled signature fits these arguments")

    def _arg_types(self, host: bool) -> list[tuple[Any, ...]]:
        if self._types is None:  # parsed once: a kernel may be called per row group
            self._types = {False: [sigutils.normalize_signature(s)[0]
                                   for s in self.signatures],
                           True: [s.args for s in self.host_signatures()]}
        return self._types[host]

    def __call__(self, *args: Any) -> Any:
        how = mode()
        if how in ("only", "host"):
            return self.twin(*args, host=how == "host")
        if how == "auto" and load_twins(host=True):
            try:
                return self.twin(*args, host=True)
            except LookupError:  # a strided array or an unexported type: as below
                pass
        # The generic twin is built for any x86-64, so it lacks the JIT's vector
        # instructions (the MinHash loop runs ~5x slower): once this process has fed it
        # SMALL_BYTES, or the JIT version is compiled anyway, compiling pays for itself.
        size = sum(a.nbytes for a in args if isinstance(a, np.ndarray))
        if (how in ("auto", "generic") and self._twin_bytes + size <= SMALL_BYTES
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
        # layout "A" takes any layout, "C" (host twins) only C-contiguous arrays; read-only
        # inputs are only read
        return (isinstance(got, types.Array) and got.dtype == want.dtype
                and got.ndim == want.ndim and want.layout in ("A", got.layout))
    return got == want


def _contiguous(t: Any) -> Any:
    """``t`` with layout "C" where it is an array type."""
    return t.copy(layout="C") if isinstance(t, types.Array) else t


def ahead_of_time(*signatures: str) -> Callable[[Any], Kernel]:
    """Mark a ``@njit`` kernel for the ahead-of-time build, with its numba signature(s)."""
    def wrap(dispatcher: Any) -> Kernel:
        k = Kernel(dispatcher, signatures)
        _KERNELS[k.name] = k
        return k
    return wrap


def mode() -> str:
    """``CLEANPIPE_PRECOMPILED``: ``auto`` (default), ``0`` (JIT only), ``generic`` (no host
    twins: ``auto`` as it is on another CPU), or ``only`` / ``host`` (generic / host twins
    only, an error where none fits: for tests that compare the paths)."""
    got = os.environ.get("CLEANPIPE_PRECOMPILED", "auto")
    return {"0": "off", "off": "off", "only": "only", "host": "host",
            "generic": "generic"}.get(got, "auto")


def fingerprint(files: list[str]) -> dict[str, Any]:
    """What a build depends on: numba's version and the kernel source files' hashes."""
    return {"numba": numba.__version__, "numpy": np.__version__.split(".")[0],
            "files": {f: hashlib.sha256((PACKAGE / f).read_bytes()).hexdigest()
                      if (PACKAGE / f).is_file() else None for f in sorted(files)}}


#: x86-64 micro-architecture levels (the psABI's), lowest first, with the CPU features each
#: adds to the one before (LLVM's names). The host twins are built for a level, not for a CPU
#: model: a level names its instructions exactly, so a twin uses none this CPU lacks (a CPU
#: model would also bring what a VM may hide, AVX-512 say), and any CPU of that level runs it.
LEVELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("x86-64-v2", ("cx16", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2", "ssse3")),
    ("x86-64-v3", ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave")),
    ("x86-64-v4", ("avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl")),
)


def cpu_features() -> frozenset[str]:
    """The features LLVM (so numba's JIT) finds on this CPU; none where it cannot tell."""
    try:
        return frozenset(k for k, on in llvm.get_host_cpu_features().items() if on)
    except RuntimeError:
        return frozenset()


def host_level(features: frozenset[str] | None = None) -> str | None:
    """The highest of :data:`LEVELS` whose features (and the lower levels') this CPU has.

        >>> host_level(frozenset({"cx16", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2",
        ...                       "ssse3", "avx"}))
        'x86-64-v2'
        >>> host_level(frozenset()) is None
        True
    """
    have = cpu_features() if features is None else features
    best, need = None, set()
    for name, adds in LEVELS:
        need.update(adds)
        if not need <= have:
            break
        best = name
    return best


def runs_here(level: str) -> bool:
    """Whether this CPU has every feature of ``level`` (a name not in :data:`LEVELS`: no)."""
    names = [name for name, _ in LEVELS]
    here = host_level()
    return level in names and here is not None and names.index(here) >= names.index(level)


def load_twins(*, host: bool = False, again: bool = False) -> Any:
    """The generic extension module, or with ``host`` the one for this CPU, if it was built
    from the current sources (and for a level this CPU has), else ``False``
    (looked up once; ``again`` looks again, after a build)."""
    if _twins[host] is None or again:
        _twins[host] = False
        try:
            built = json.loads((HOST_FINGERPRINT if host else FINGERPRINT)
                               .read_text(encoding="utf-8"))
            level = built.pop("level", None) if host else None
            if fingerprint(list(built["files"])) == built and (not host or (
                    level is not None and runs_here(level))):
                _twins[host] = importlib.import_module(
                    f"cleanpipe.{HOST_MODULE if host else MODULE}")
        except (OSError, ValueError, KeyError, ImportError):
            pass
    return _twins[host]


def build(output_dir: Path = PACKAGE, *, host: bool = False) -> Path:
    """Compile every marked kernel into ``output_dir``, for any x86-64 or with ``host`` for
    this CPU; returns the extension's path."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pycc's pending deprecation: no replacement yet
        from numba.pycc import CC
    files = []
    for m in KERNEL_MODULES:
        files.append(str(Path(importlib.import_module(m).__file__).resolve()
                         .relative_to(PACKAGE)))
    built: dict[str, Any] = fingerprint(files)
    cc = CC(HOST_MODULE if host else MODULE)
    cc.output_dir = str(output_dir)
    if host:
        level = host_level()
        if level is None:
            raise LookupError("this CPU is below x86-64-v2: no host twins")
        built["level"] = level
        cc.target_cpu = level
    for k in _KERNELS.values():
        sigs = k.host_signatures() if host else k.signatures
        for name, sig in zip(k.twin_names(), sigs, strict=True):
            cc.export(name, sig)(k.dispatcher.py_func)
    cc.compile()
    (output_dir / (HOST_FINGERPRINT if host else FINGERPRINT).name).write_text(
        json.dumps(built, indent=1), encoding="utf-8")
    return output_dir / cc.output_file


def main(argv: list[str]) -> None:
    """``python -m cleanpipe.precompiled [output_dir]``: build the twins, generic and for
    this CPU."""
    out = Path(argv[0]) if argv else PACKAGE
    for host in (False, True):
        try:
            path = build(out, host=host)
        except LookupError as e:
            print(f"no host twins: {e}")
            continue
        print(f"precompiled {len(_KERNELS)} kernels into {path}"
              + f" (for {host_level()} CPUs)" * host)


if __name__ == "__main__":
    # Run as a script this file is ``__main__``; the kernels register with the package's
    # copy of it, so build through that one.
    from cleanpipe import precompiled

    precompiled.main(sys.argv[1:])
