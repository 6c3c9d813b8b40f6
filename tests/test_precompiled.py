"""The ahead-of-time kernels (the no-JIT path of small runs, and of every run on the CPU
they were built on) give exactly what the JIT kernels give: every kernel output compared
array by array, on real data and on adversarial text, and whole pipeline runs compared byte
by byte; the twins built for this CPU's x86-64 level are used, with no size limit, only on a
CPU that has every feature of that level."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from read_only_install import read_only_copy, small_run

from cleanpipe import precompiled
from cleanpipe.dedup import kernels, part_kernels
from cleanpipe.dedup.minhash import permutations
from cleanpipe.dedup.text import buffers, normalize, shingle_modes
from cleanpipe.text import byte_kernels
from cleanpipe.text.byte_scan import ByteScan
from tests._robust_helpers import cli, output_files, stable_report
from tests.conftest import realdata
from tests.guard_data import read_t0

REPO = Path(__file__).resolve().parent.parent

PIPELINE = Path(precompiled.PACKAGE / "pipelines" / "sft_prompt_completion.yaml")

# Sentence ends, quotes, whitespace of every kind, CJK (character shingles), emoji, C0/C1
# controls, and words long enough for XXH32's 16-byte stripes.
PIECES = st.sampled_from([
    " ", "  ", "\t", "\n", "\n\n\n", "\r\n", "\x00", "\x07", "\x7f", "\x85", "\x9f", "\u00a0",
    "\u1680", "\u2003", "\u2028", "\u202f", "\u3000", "\u200b", "\ufeff", "\U0001f3f4", ". ",
    "? ", "!", ";", ": ", '"', '?" ', "。", "中文字符", "👩‍💻", "ب", "a", "the", "quick",
    "extraordinarily-long-hyphenated-word", "Where do you run Windows 8?",
])
TEXT = st.lists(st.one_of(PIECES, st.text(max_size=5)), max_size=30).map("".join)
SCANS = (
    # controls (C0, DEL, C1), wide code points, surrogates (CESU-8), an emoji
    ByteScan([[(0, 8), 0x7F, (0x80, 0x9F)], [0x200B, (0x2028, 0x2029), 0xFEFF],
              [(0xD800, 0xDFFF)], [0x1F3F4]]),
    ByteScan([[0xA0, 0x3000, (0x2000, 0x200A)]], space_run=1, trailing_space=2,
             blank_lines=3, edge_whitespace=4),
    ByteScan([[ord("<"), ord("|")]]),  # printable ASCII leads
)


@pytest.fixture(scope="module", autouse=True)
def twins() -> object:
    """The extension modules (generic, for this CPU), each built first when missing or
    stale (``make setup`` builds them)."""
    for host in (False, True):
        if not precompiled.load_twins(host=host):
            precompiled.build(host=host)
            assert precompiled.load_twins(host=host, again=True), "the build is not usable"
    return precompiled.load_twins()


def _jit(kernel: precompiled.Kernel, *args: object) -> object:
    return kernel.dispatcher(*args)


def _twin(kernel: precompiled.Kernel, *args: object) -> object:
    return kernel.twin(*args)


def _host(kernel: precompiled.Kernel, *args: object) -> object:
    """The host twin; it takes only C-contiguous arrays, so a strided one (the legacy
    permutations) must be refused, and is then handed over as a contiguous copy."""
    if all(a.flags.c_contiguous for a in args if isinstance(a, np.ndarray)):
        return kernel.twin(*args, host=True)
    with pytest.raises(LookupError, match="no precompiled signature"):
        kernel.twin(*args, host=True)
    return kernel.twin(*(np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a
                         for a in args), host=True)


def _kernel_outputs(texts: list[str | None], call, seed: int = 3) -> dict[str, object]:
    """Every marked kernel run the way the dedup stages chain them, through ``call``."""
    out: dict[str, object] = {}
    raw = pa.array(texts, pa.large_string())
    data, off = buffers(raw)
    out["collapse"] = call(kernels.collapse_whitespace, data, off, 31)
    norm = normalize(raw)
    data, off = buffers(norm)
    modes = shingle_modes(norm, "auto", 0.3).astype(np.int8)
    modes[::3] = 1  # character shingles for every third row as well
    out["hashes"] = call(kernels.xxh32_shingles, data, off, modes, 3, 4, np.uint64(seed))
    s, e, doc_off = call(kernels.shingle_spans, data, off, modes, 3, 4)
    out["spans"] = (s, e, doc_off)
    out["span_hashes"] = call(kernels.xxh32_spans, data, s, e, np.uint64(seed))
    sets, set_off = call(kernels.sorted_unique_segments, *out["hashes"])
    out["sets"] = (sets, set_off)
    for scheme, code in (("affine32", kernels.SCHEME_AFFINE32),
                         ("legacy", kernels.SCHEME_LEGACY)):
        a, b = permutations(16, seed, scheme)  # legacy: strided views of one array
        out[f"sig_{scheme}"] = call(kernels.minhash_signatures, sets, set_off, a, b, code)
    keys = call(kernels.band_keys, out["sig_affine32"], 4, 4)
    out["keys"] = keys
    valid = np.diff(set_off) > 0
    for j in range(keys.shape[1]):
        col = np.ascontiguousarray(keys[:, j])
        order = np.argsort(col, kind="stable")
        out[f"bucket_{j}"] = call(kernels.bucket_pairs, order, col[order], valid, 2)
    n = len(texts)
    left, right = (x.astype(np.int64).ravel() for x in np.triu_indices(n, 1))
    out["shared"] = call(kernels.shared_bands, keys, left, right)
    for t in (0.0, 0.5):
        out[f"jaccard_{t}"] = call(kernels.pair_jaccard, sets, set_off, left, right, t)
    out["components"] = call(kernels.union_find, n, left[::7].copy(), right[::7].copy())
    sentences = call(part_kernels.sentence_sets, data, off, modes, np.uint64(seed))
    out["sentences"] = sentences
    packed, p_off = call(part_kernels.pack, sets, set_off, *sentences)
    out["packed"] = (packed, p_off)
    for t in (0.0, 0.7):
        out[f"similarity_{t}"] = call(part_kernels.pair_similarity, packed, p_off, left,
                                      right, t)
    return out


def _assert_same(got: object, want: object, where: str = "") -> None:
    if isinstance(want, dict):
        assert got.keys() == want.keys()
        for k in want:
            _assert_same(got[k], want[k], f"{where}/{k}")
    elif isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _assert_same(g, w, f"{where}[{i}]")
    else:
        assert got.dtype == want.dtype and got.shape == want.shape, where
        np.testing.assert_array_equal(got, want, err_msg=where)


def _scans(texts: list[str | None], monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    got: dict[str, object] = {}
    for how in ("0", "only", "host"):
        monkeypatch.setenv("CLEANPIPE_PRECOMPILED", how)
        arr = pa.array(texts, pa.large_string())
        got[how] = tuple(scan(x) for scan in SCANS for x in (arr, arr.slice(1)))
    return got


def test_every_marked_kernel_is_exported(twins: object) -> None:
    host = precompiled.load_twins(host=True)
    for k in (kernels.xxh32_shingles, kernels.minhash_signatures, part_kernels.pair_similarity,
              byte_kernels.scan):
        assert all(hasattr(twins, name) and hasattr(host, name) for name in k.twin_names())
    assert {"kernels__union_find", "byte_kernels__scan"} <= set(precompiled._KERNELS)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.one_of(TEXT, st.none()), min_size=1, max_size=12))
def test_twins_equal_jit_on_adversarial_text(texts: list[str | None]) -> None:
    texts = texts + [t + " edited" for t in texts if t]  # near copies give pairs to verify
    jit = _kernel_outputs(texts, _jit)
    _assert_same(_kernel_outputs(texts, _twin), jit)
    _assert_same(_kernel_outputs(texts, _host), jit)


def test_byte_scan_twin_equals_jit(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = ["plain", "", None, "tab\tthen  two\n\n\nend ", " \u00a0lead", "a\u200bb\x85c",
             "x" * 7 + "\x00" + "y" * 9, "\ud800".encode("utf-8", "surrogatepass")
             .decode("utf-8", "replace"), "<|endoftext|>", "中文\u3000全角", "🏴 flag"]
    got = _scans(texts * 3, monkeypatch)
    _assert_same(got["only"], got["0"])
    _assert_same(got["host"], got["0"])
    assert any(b.any() for b in got["only"])  # the scans do fire on these


@pytest.mark.parametrize("value", [
    np.zeros(3, np.uint8), np.zeros((2, 3), np.uint32), np.zeros((3, 2), np.int64).T,
    np.zeros((4, 4), np.uint64)[:, ::2], np.arange(6, dtype=np.int64)[::2],
    np.zeros(0, np.bool_), np.zeros(3, np.float64)[1:], np.array(5, np.int8),
    0, -7, (1 << 63) - 1, -(1 << 63), 1 << 63, (1 << 64) - 1, True,
    np.bool_(False), 0.5, np.int32(3), np.uint64(9), np.float32(1.5), np.int64(-2),
])
def test_arg_type_is_what_numba_infers(value: object) -> None:
    """A twin is chosen without numba: the argument's type must be numba's own inference,
    or an int32 array would go to an int64 twin (which reads past it)."""
    import numba

    assert precompiled.arg_type(value) == precompiled.numba_arg_type(numba.typeof(value))


def test_arg_type_refuses_what_no_twin_takes() -> None:
    assert precompiled.arg_type([1, 2]) is None and precompiled.arg_type("x") is None
    assert not precompiled._fits(None, ("scalar", "int64"))
    # numba takes no byte-swapped array at all; no twin may take one for uint32
    assert not precompiled._fits(precompiled.arg_type(np.zeros(3, ">u4")),
                                 ("array", "uint32", 1, "A"))
    # nor an int past uint64 or below int64, nor a masked array (a twin ignores the mask)
    for value in (1 << 64, -(1 << 63) - 1, np.ma.masked_array([1, 2], [0, 1])):
        assert precompiled.arg_type(value) is None


#: in a fresh interpreter, before anything compiled: your own numba function calling a
#: kernel module's function, from threads that all need the JIT at once
_JIT_FROM_OUTSIDE = """
import threading, numpy as np, numba
from cleanpipe.dedup import kernels
assert kernels.xxh32.loaded() is None
@numba.njit
def mine(data, seed):
    return kernels.xxh32(data, 0, data.size, seed)
data = np.frombuffer(b"hello world", np.uint8)
got = []
threads = [threading.Thread(target=lambda: got.append(int(mine(data, np.uint64(7)))))
           for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(sorted(set(got)), len(got), int(kernels.xxh32(data, 0, data.size, np.uint64(7))))
"""


def test_your_numba_code_may_call_kernel_functions_before_any_jit() -> None:
    """A marked function is a :class:`~cleanpipe.precompiled.Jit` until the first JIT;
    numba code of yours that calls one (``kernels.xxh32`` here) compiles all the same,
    from several threads at once."""
    out = subprocess.run([sys.executable, "-c", _JIT_FROM_OUTSIDE], capture_output=True,
                         text=True, check=True, cwd=str(REPO),
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout.split()
    assert out[-2] == "4" and out[0].strip("[],") == out[-1]


def test_build_records_the_signatures_numba_parses(twins: object) -> None:
    """The argument types a run checks calls against are those of the signatures the
    twins were compiled for."""
    for host, stamp in ((False, precompiled.FINGERPRINT), (True, precompiled.HOST_FINGERPRINT)):
        recorded = json.loads(stamp.read_text(encoding="utf-8"))["args"]
        want: dict[str, list[list[object]]] = {}
        for k in precompiled._KERNELS.values():
            want.update({name: [list(t) for t in types]
                         for name, types in k.arg_types(host=host).items()})
        assert recorded == want
        assert any(t[0] == "array" and t[3] == ("C" if host else "A")
                   for types in recorded.values() for t in types)


def test_only_mode_fails_loudly_on_unfit_arguments() -> None:
    # int32 offsets fit no exported signature: "only" must say so, never guess
    with pytest.raises(LookupError, match="no precompiled signature"):
        kernels.union_find.twin(3, np.array([0], np.int32), np.array([2], np.int32))


@pytest.mark.realdata
def test_twins_equal_jit_on_t0(monkeypatch: pytest.MonkeyPatch) -> None:
    t0 = read_t0(realdata("sft_self_instruct_t0_50k")).slice(0, 600)
    texts = [f"{p}\n{c}" for p, c in zip(t0["prompt"].to_pylist(),
                                           t0["completion"].to_pylist(), strict=True)]
    twin, jit = _kernel_outputs(texts, _twin), _kernel_outputs(texts, _jit)
    _assert_same(twin, jit)
    _assert_same(_kernel_outputs(texts, _host), jit)
    assert (twin["similarity_0.7"] >= 0.7).any()  # t0 holds near copies: verified pairs
    got = _scans(texts, monkeypatch)
    _assert_same(got["only"], got["0"])
    _assert_same(got["host"], got["0"])


@pytest.mark.realdata
def test_check_pipeline_is_byte_identical_on_both_paths(tmp_path: Path, capsys,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped prompt/completion pipeline on 1,000 t0 rows: twins only vs JIT only."""
    rows = read_t0(realdata("sft_self_instruct_t0_50k")).slice(0, 1000).to_pylist()
    src = tmp_path / "t0.jsonl"
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                   encoding="utf-8")
    outs = {}
    for how in ("only", "host", "0"):
        monkeypatch.setenv("CLEANPIPE_PRECOMPILED", how)
        outs[how] = tmp_path / f"out_{how}"
        code, _, err = cli(capsys, "run", str(PIPELINE), "--input", str(src), "-o",
                           str(outs[how]), "-q", "--no-progress", "--workers", "1")
        assert code in (0, 1), err
    assert output_files(outs["only"]) == output_files(outs["0"])
    assert output_files(outs["host"]) == output_files(outs["0"])
    rep = stable_report(outs["only"])
    assert rep == stable_report(outs["0"]) == stable_report(outs["host"])
    assert any(r["code"] == "near_duplicate" for r in rep["reasons"]), rep["reasons"]


class _NoJit:
    """Stands in for a kernel's numba dispatcher: records the calls it gets."""

    def __init__(self, jit: object) -> None:
        self.jit, self.calls, self.overloads = jit, 0, {}

    def __call__(self, *args: object) -> object:
        self.calls += 1
        return self.jit(*args)


def _big_minhash_call() -> tuple[tuple[object, ...], int]:
    """MinHash arguments over more than SMALL_BYTES (past the generic twin's share)."""
    rng = np.random.default_rng(7)
    n = precompiled.SMALL_BYTES // 4 + 1000
    hashes = np.sort(rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32))
    off = np.arange(0, n + 1, 50, dtype=np.int64)
    off[-1] = n
    a, b = permutations(16, 3, "affine32")
    return (hashes, off, a, b, kernels.SCHEME_AFFINE32), off.size - 1


def test_host_twins_serve_a_big_call_on_their_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the CPU they were built on (this one), a call past SMALL_BYTES goes to the host
    twin, not the JIT, and gives what the JIT gives."""
    built = json.loads(precompiled.HOST_FINGERPRINT.read_text(encoding="utf-8"))
    assert built["level"] == precompiled.host_level() is not None
    args, n_docs = _big_minhash_call()
    spy = _NoJit(kernels.minhash_signatures.dispatcher)
    monkeypatch.setattr(kernels.minhash_signatures, "dispatcher", spy)
    monkeypatch.setenv("CLEANPIPE_PRECOMPILED", "auto")
    got = kernels.minhash_signatures(*args)
    assert spy.calls == 0 and got.shape == (n_docs, 16)
    _assert_same(got, spy.jit(*args))
    # a strided array fits no host twin: the call takes today's path, here the JIT
    strided = (args[0], args[1], np.repeat(args[2], 2)[::2], args[3], args[4])
    _assert_same(kernels.minhash_signatures(*strided), got)
    assert spy.calls == 1


def test_host_twins_are_not_used_on_a_cpu_without_their_level(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host build for a level this CPU does not have is never loaded: a big call goes to
    the JIT, a small one to the generic twin, as without a host build."""
    try:
        # the same build, its fingerprint naming a level no CPU has
        built = json.loads(precompiled.HOST_FINGERPRINT.read_text(encoding="utf-8"))
        stamp = tmp_path / precompiled.HOST_FINGERPRINT.name
        stamp.write_text(json.dumps({**built, "level": "x86-64-v9"}), encoding="utf-8")
        monkeypatch.setattr(precompiled, "HOST_FINGERPRINT", stamp)
        assert not precompiled.load_twins(host=True, again=True)
        # and this machine lacking one feature of the real fingerprint's level
        monkeypatch.undo()
        level = dict(precompiled.LEVELS)[built["level"]]
        have = precompiled.cpu_features() - {level[0]}
        monkeypatch.setattr(precompiled, "cpu_features", lambda: have)
        assert not precompiled.load_twins(host=True, again=True)
        monkeypatch.setenv("CLEANPIPE_PRECOMPILED", "auto")
        args, _ = _big_minhash_call()
        spy = _NoJit(kernels.minhash_signatures.dispatcher)
        monkeypatch.setattr(kernels.minhash_signatures, "dispatcher", spy)
        got = kernels.minhash_signatures(*args)
        assert spy.calls == 1
        small = (args[0][:1000], np.array([0, 500, 1000]), *args[2:])
        _assert_same(kernels.minhash_signatures(*small), spy.jit(*small))
        assert spy.calls == 1  # the small one went to the generic twin
        with pytest.raises(LookupError, match="for this CPU"):
            kernels.minhash_signatures.twin(*args, host=True)
        _assert_same(got, spy.jit(*args))
    finally:
        monkeypatch.undo()
        assert precompiled.load_twins(host=True, again=True)


def test_generic_mode_leaves_the_host_twins_out(monkeypatch: pytest.MonkeyPatch) -> None:
    args, _ = _big_minhash_call()
    spy = _NoJit(kernels.minhash_signatures.dispatcher)
    monkeypatch.setattr(kernels.minhash_signatures, "dispatcher", spy)
    monkeypatch.setenv("CLEANPIPE_PRECOMPILED", "generic")
    kernels.minhash_signatures(*args)
    assert spy.calls == 1


def test_fresh_read_only_install_compiles_nothing(tmp_path: Path) -> None:
    """With the twins built, a small run in a fresh install with an empty per-user cache
    compiles no kernel (the cold-start fix), and writes no cache anywhere."""
    site = read_only_copy(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    got = small_run(sys.executable, home, pythonpath=site)
    assert got["package"].startswith(str(site)) and got["twins"] and got["host_twins"]
    assert got["compiled"] == []
    assert len(got["kept"]) == 2 and len(got["fixed"]) == 3
    assert not list(home.rglob("*.nbi")) and not list(site.rglob("*.nbi"))
