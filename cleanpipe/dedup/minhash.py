"""Bulk MinHash signatures identical to ``datasketch.MinHash`` and LSH banding parameters.

The permutation parameters are datasketch's own draws (same seed → same ``a``/``b``),
and the bands×rows split from datasketch's own ``_optimal_param``, so nothing about the
sketch is re-derived here: only the loop is compiled.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from typing import Literal

import numpy as np
import pyarrow as pa

from cleanpipe.dedup import kernels
from cleanpipe.dedup.text import buffers

HashName = Literal["xxh32", "sha1"]
Scheme = Literal["affine32", "legacy"]


_MERSENNE_61 = (1 << 61) - 1


@cache
def permutations(num_perm: int, seed: int, scheme: Scheme) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's permutation parameters ``(a, b)`` as uint64 arrays.

    The same draws as ``datasketch.MinHash(num_perm, seed, scheme=scheme).permutations``
    (``np.random.RandomState(seed)``, in the same order; tests compare them), made here
    because importing datasketch imports its LSH module and with it scipy.integrate:
    half a second and ~30 MB in every worker, for two arrays.
    """
    gen = np.random.RandomState(seed)
    if scheme == "legacy":
        pairs = [(gen.randint(1, _MERSENNE_61, dtype=np.uint64),
                  gen.randint(0, _MERSENNE_61, dtype=np.uint64)) for _ in range(num_perm)]
        a, b = np.array(pairs, dtype=np.uint64).reshape(num_perm, 2).T
    else:  # affine32: odd multipliers, so each permutation is a bijection on 32 bits
        a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
        b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return np.asarray(a, dtype=np.uint64), np.asarray(b, dtype=np.uint64)


@cache
def lsh_params(threshold: float, num_perm: int, weights: tuple[float, float]) -> tuple[int, int]:
    """Bands and rows the way ``datasketch.MinHashLSH`` picks them for ``threshold``.

    Cached: datasketch integrates numerically for every split (~60 ms a call).
    """
    from datasketch import MinHashLSH

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm, weights=weights)
    return lsh.b, lsh.r


@dataclass
class Shingled:
    """Shingle hashes of a batch of documents: document ``i`` owns
    ``hashes[doc_off[i]:doc_off[i+1]]`` (not deduplicated)."""

    hashes: np.ndarray
    doc_off: np.ndarray

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.doc_off)


def shingle_hashes(texts: pa.Array, modes: np.ndarray, n_word: int, n_char: int,
                   hash_name: HashName = "xxh32", hash_seed: int = 0) -> Shingled:
    """32-bit hash of every shingle of every (normalised) document.

    ``xxh32`` equals ``xxhash.xxh32_intdigest(shingle, seed)`` and runs compiled; ``sha1`` is
    datasketch's default ``sha1_hash32`` (hashlib, one call per shingle: exact but slow).
    """
    data, offsets = buffers(texts)
    if hash_name == "xxh32":
        hashes, doc_off = kernels.xxh32_shingles(data, offsets, modes.astype(np.int8), n_word,
                                                 n_char, np.uint64(hash_seed))
        return Shingled(hashes, doc_off)
    starts, ends, doc_off = kernels.shingle_spans(data, offsets, modes.astype(np.int8),
                                                  n_word, n_char)
    if hash_name == "sha1":
        raw = data.tobytes()
        hashes = np.fromiter(
            (int.from_bytes(hashlib.sha1(raw[s:e]).digest()[:4], "little")
             for s, e in zip(starts.tolist(), ends.tolist(), strict=True)),
            dtype=np.uint32, count=starts.size,
        )
    else:
        raise ValueError(f"unknown hash {hash_name!r}: use xxh32 or sha1")
    return Shingled(hashes, doc_off)


def signatures(sh: Shingled, num_perm: int, seed: int, scheme: Scheme = "affine32") -> np.ndarray:
    """(documents × num_perm) uint32 MinHash signatures; row ``i`` equals
    ``datasketch.MinHash(num_perm, seed, scheme=scheme, hashfunc=H).hashvalues`` after
    ``update_batch`` with document ``i``'s shingles, ``H`` being the hash used."""
    a, b = permutations(num_perm, seed, scheme)
    code = kernels.SCHEME_AFFINE32 if scheme == "affine32" else kernels.SCHEME_LEGACY
    return kernels.minhash_signatures(sh.hashes, sh.doc_off, a, b, code)
