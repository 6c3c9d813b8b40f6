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

Choosing a twin needs no numba: the build records each twin's argument types, and a call's
are read from its numpy arrays and Python numbers (:func:`arg_type`). The kernel modules mark
their functions with this module's :func:`njit`, which imports numba (~0.25 s, before any
kernel runs) only when a JIT is needed, so a run that the twins serve never imports it.

    >>> import numpy as np
    >>> from cleanpipe.dedup import kernels
    >>> kernels.union_find(3, np.array([0]), np.array([2])).tolist()
    [0, 1, 0]
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import inspect
import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

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

#: an argument's type as the JIT would infer it, in numpy's words: ``("array", dtype, ndim,
#: layout)`` or ``("scalar", dtype)``
ArgType = tuple[Any, ...]

_KERNELS: dict[str, Kernel] = {}
_JITS: list[Jit] = []
# the loaded extension modules (generic, host), False if unusable, None before looking
_twins: dict[bool, Any] = {False: None, True: None}
# each loaded module's argument types per exported name (:func:`arg_type`), from its build
_twin_args: dict[bool, dict[str, list[ArgType]]] = {False: {}, True: {}}
# held while the marked functions become dispatchers (a kernel may be first called in threads)
_JIT_LOCK = threading.Lock()


class Jit:
    """A function for numba's ``njit`` with ``options``, compiled only when called: numba
    (~0.25 s to import) is imported then, not when a kernel module is.

    A kernel module marks its functions with :func:`njit` instead of numba's. Its exported
    kernels (:func:`ahead_of_time`) mostly run their twins, so a run with usable twins never
    imports numba. The first time any of these functions is called (or a kernel's JIT is
    needed) they all become numba dispatchers at once, and the kernel modules' globals that
    held them now hold the dispatchers: numba resolves a called function through the caller's
    globals when it compiles. A ``Jit`` still held elsewhere (``from ... import xxh32`` in
    your own ``@numba.njit`` function) types as its dispatcher (``_numba_type_``).
    """

    def __init__(self, func: Callable[..., Any], options: dict[str, Any]) -> None:
        functools.update_wrapper(self, func)
        self.func = func
        self.options = options
        self._dispatcher: Any = None

    @property
    def dispatcher(self) -> Any:
        """The numba dispatcher (every marked function's made the first time one is asked)."""
        if self._dispatcher is None:
            _jit_all()
        return self._dispatcher

    @property
    def _numba_type_(self) -> Any:
        # numba's typeof reads this attribute from an object it does not know: a Jit called
        # from a jitted function is its dispatcher there
        from numba.core import types

        return types.Dispatcher(self.dispatcher)

    def loaded(self) -> Any:
        """The dispatcher if it was made already, else ``None`` (imports nothing)."""
        return self._dispatcher

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.dispatcher(*args, **kwargs)


def njit(**options: Any) -> Callable[[Callable[..., Any]], Jit]:
    """numba's ``njit(**options)``, deferred (:class:`Jit`).

        >>> double = njit(cache=False)(lambda x: 2 * x)
        >>> isinstance(double, Jit), double.loaded() is None
        (True, True)
    """
    def wrap(func: Callable[..., Any]) -> Jit:
        jit = Jit(func, options)
        _JITS.append(jit)
        return jit
    return wrap


def _jit_all() -> None:
    """Make every marked function a numba dispatcher, and put the dispatchers in place of
    the :class:`Jit` objects in their modules' globals (see :class:`Jit`). The dispatchers
    are handed out only once the globals hold them all: a thread that finds one compiles
    against dispatchers only."""
    with _JIT_LOCK:
        todo = [j for j in _JITS if j._dispatcher is None]
        if not todo:
            return
        import numba

        from cleanpipe import numba_cache  # noqa: F401  (before any njit: the cache folder)

        made = {id(j): numba.njit(**j.options)(j.func) for j in todo}
        for scope in {id(j.func.__globals__): j.func.__globals__ for j in _JITS}.values():
            for name, value in list(scope.items()):
                if isinstance(value, Jit):
                    scope[name] = made[id(value)] if id(value) in made else value._dispatcher
        for j in todo:
            j._dispatcher = made[id(j)]


class Kernel:
    """A kernel (a :class:`Jit`) that hands its calls to an ahead-of-time twin where one
    fits, else to numba's JIT."""

    def __init__(self, jit: Jit, signatures: tuple[str, ...]) -> None:
        self.jit = jit
        self.signatures = signatures
        func = jit.func
        self.name = f"{func.__module__.rsplit('.', 1)[-1].lstrip('_')}__{func.__name__}"
        self._params = inspect.signature(func)
        self.__doc__ = func.__doc__
        self.__name__ = func.__name__
        self.__wrapped__ = func
        self._twin_bytes = 0
        self._dispatcher: Any = None

    @property
    def dispatcher(self) -> Any:
        """The JIT's numba dispatcher (imports numba); tests may set another in its place."""
        return self._dispatcher if self._dispatcher is not None else self.jit.dispatcher

    @dispatcher.setter
    def dispatcher(self, value: Any) -> None:
        self._dispatcher = value

    def _jit_compiled(self) -> bool:
        """Whether the JIT compiled this kernel already in this process (imports nothing)."""
        d = self._dispatcher if self._dispatcher is not None else self.jit.loaded()
        return d is not None and bool(d.overloads)

    def twin_names(self) -> list[str]:
        """Exported names of the twins, one per signature."""
        return [f"{self.name}_{i}" for i in range(len(self.signatures))]

    def host_signatures(self) -> list[Any]:
        """The signatures of the host twins: the declared ones with C-contiguous arrays."""
        from numba.core import sigutils, typing

        return [typing.signature(ret, *map(_contiguous, params))
                for params, ret in map(sigutils.normalize_signature, self.signatures)]

    def arg_types(self, *, host: bool) -> dict[str, list[ArgType]]:
        """Each twin's argument types (:data:`ArgType`), by exported name, for the build to
        record (numba parses the signatures; a run then needs no numba to check a call)."""
        from numba.core import sigutils

        sigs = ([s.args for s in self.host_signatures()] if host
                else [sigutils.normalize_signature(s)[0] for s in self.signatures])
        return {name: [numba_arg_type(t) for t in params]
                for name, params in zip(self.twin_names(), sigs, strict=True)}

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
        got = [arg_type(a) for a in bound.args]
        built = _twin_args[host]
        for name in self.twin_names():
            want = built.get(name)
            if want is not None and len(got) == len(want) and all(map(_fits, got, want)):
                return getattr(mod, name)(*bound.args)
        raise LookupError(f"{self.name}: no precompiled signature fits these arguments")

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
                and not self._jit_compiled()):
            try:
                out = self.twin(*args)
            except LookupError:
                pass
            else:
                self._twin_bytes += size
                return out
        return self.dispatcher(*args)


def arg_type(value: Any) -> ArgType | None:
    """The type numba's ``typeof`` gives ``value``, as an :data:`ArgType`; ``None`` for
    what no twin takes.

        >>> arg_type(np.zeros((2, 3), np.uint32)[:, ::2]), arg_type(7), arg_type(np.bool_(1))
        (('array', 'uint32', 2, 'A'), ('scalar', 'int64'), ('scalar', 'bool'))
    """
    if isinstance(value, np.ma.MaskedArray):
        return None  # numba refuses one; a twin would read its data and ignore the mask
    if isinstance(value, np.ndarray):
        flags = value.flags
        layout = "C" if flags.c_contiguous else "F" if flags.f_contiguous else "A"
        return ("array", str(value.dtype), value.ndim, layout)
    if isinstance(value, bool | np.bool_):
        return ("scalar", "bool")
    if isinstance(value, int):
        if -(1 << 63) <= value < (1 << 63):
            return ("scalar", "int64")
        return ("scalar", "uint64") if 0 <= value < (1 << 64) else None
    if isinstance(value, float):
        return ("scalar", "float64")
    if isinstance(value, np.generic):
        return ("scalar", str(value.dtype))
    return None


def numba_arg_type(t: Any) -> ArgType:
    """numba's type ``t`` as an :data:`ArgType` (what the build records)."""
    from numba.core import types
    from numba.np.numpy_support import as_dtype

    if isinstance(t, types.Array):
        return ("array", str(as_dtype(t.dtype)), t.ndim, t.layout)
    return ("scalar", str(as_dtype(t)))


def _fits(got: ArgType | None, want: ArgType) -> bool:
    """An argument typed ``got`` (as the JIT types it) fits the declared type ``want``."""
    if got is None:
        return False
    if want[0] == "array":
        # layout "A" takes any layout, "C" (host twins) only C-contiguous arrays; read-only
        # inputs are only read
        return got[:3] == want[:3] and want[3] in ("A", got[3])
    return got == want


def _contiguous(t: Any) -> Any:
    """``t`` with layout "C" where it is an array type."""
    from numba.core import types

    return t.copy(layout="C") if isinstance(t, types.Array) else t


def ahead_of_time(*signatures: str) -> Callable[[Jit], Kernel]:
    """Mark an :func:`njit` kernel for the ahead-of-time build, with its numba signature(s)."""
    def wrap(jit: Jit) -> Kernel:
        k = Kernel(jit, signatures)
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


def _numba_version() -> str:
    """numba's version, from its metadata: importing numba only to read it costs ~0.25 s
    (a numba without metadata, say a source tree on the path, is imported)."""
    try:
        return importlib.metadata.version("numba")
    except importlib.metadata.PackageNotFoundError:
        import numba

        return str(numba.__version__)


def fingerprint(files: list[str]) -> dict[str, Any]:
    """What a build depends on: numba's version and the kernel source files' hashes."""
    return {"numba": _numba_version(), "numpy": np.__version__.split(".")[0],
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


#: every feature some level of :data:`LEVELS` needs: all a level check asks about
LEVEL_FEATURES = frozenset(f for _, adds in LEVELS for f in adds)

#: the kernel's names (``/proc/cpuinfo``) of the :data:`LEVELS` features it names otherwise
#: than LLVM (``abm``: the LZCNT bit, on AMD and Intel alike)
CPUINFO_NAMES = {"sahf": "lahf_lm", "sse3": "pni", "sse4.1": "sse4_1", "sse4.2": "sse4_2",
                 "bmi": "bmi1", "lzcnt": "abm"}


def cpuinfo_features(cpuinfo: str) -> frozenset[str] | None:
    """The :data:`LEVELS` features (LLVM's names) that every processor listed in
    ``cpuinfo`` (``/proc/cpuinfo``'s text) has; ``None`` when it lists no flags.

        >>> sorted(cpuinfo_features("processor: 0\\nflags : fpu pni ssse3 abm\\n"))
        ['lzcnt', 'sse3', 'ssse3']
    """
    cpus = [set(line.partition(":")[2].split()) for line in cpuinfo.splitlines()
            if line.split(":", 1)[0].strip() == "flags"]
    if not cpus:
        return None
    common = set.intersection(*cpus)
    return frozenset(f for f in LEVEL_FEATURES if CPUINFO_NAMES.get(f, f) in common)


def cpu_features() -> frozenset[str]:
    """The :data:`LEVELS` features of this CPU, in LLVM's names; none where it cannot tell.

    Read from the kernel (``/proc/cpuinfo``) where there is one: asking LLVM instead maps
    its ~100 MB library into the process (~20 ms, and pages every forked worker inherits),
    which a run served by the precompiled kernels never needs otherwise. The kernel lists a
    feature only where the OS supports it too (AVX's registers saved by XSAVE), as LLVM's
    own check does."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            found = cpuinfo_features(fh.read())
    except OSError:
        found = None
    if found is not None:
        return found
    import llvmlite.binding as llvm  # ~35 ms, a tenth of numba's import

    try:
        return frozenset(k for k, on in llvm.get_host_cpu_features().items()
                         if on and k in LEVEL_FEATURES)
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
            args = built.pop("args")
            if fingerprint(list(built["files"])) == built and (not host or (
                    level is not None and runs_here(level))):
                _twins[host] = importlib.import_module(
                    f"cleanpipe.{HOST_MODULE if host else MODULE}")
                _twin_args[host] = {name: [tuple(a) for a in types]
                                    for name, types in args.items()}
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
    _jit_all()  # pycc compiles the kernels' functions: what they call must be dispatchers
    built: dict[str, Any] = fingerprint(files)
    cc = CC(HOST_MODULE if host else MODULE)
    cc.output_dir = str(output_dir)
    if host:
        level = host_level()
        if level is None:
            raise LookupError("this CPU is below x86-64-v2: no host twins")
        built["level"] = level
        cc.target_cpu = level
    built["args"] = {}
    for k in _KERNELS.values():
        sigs = k.host_signatures() if host else k.signatures
        for name, sig in zip(k.twin_names(), sigs, strict=True):
            cc.export(name, sig)(k.jit.func)
        built["args"].update(k.arg_types(host=host))
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
