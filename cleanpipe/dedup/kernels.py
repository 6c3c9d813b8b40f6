"""Compiled (numba) kernels for shingling, hashing, MinHash and clustering.

Everything here works on flat numpy buffers: the UTF-8 bytes of a whole string array and its
offsets, so no Python object is created per document or per shingle. A shingle is always a
contiguous byte span of the normalised text (see :mod:`cleanpipe.dedup.text`): word n-grams
span ``n`` space-separated words, character n-grams span ``n`` code points.

Arithmetic is done in uint64 and masked to 32 bits where the reference algorithm is 32-bit:
numba widens uint32 operands, and the explicit mask makes the wraparound intended.
"""

from __future__ import annotations

import numpy as np

from cleanpipe.precompiled import ahead_of_time, njit

MASK32 = np.uint64(0xFFFFFFFF)
_P1 = np.uint64(2654435761)
_P2 = np.uint64(2246822519)
_P3 = np.uint64(3266489917)
_P4 = np.uint64(668265263)
_P5 = np.uint64(374761393)
MERSENNE61 = np.uint64((1 << 61) - 1)

#: permutation schemes of ``datasketch.MinHash`` (2.x); "legacy" is its pre-2.0 scheme.
SCHEME_AFFINE32 = 0
SCHEME_LEGACY = 1

#: a document's shingle mode (:func:`cleanpipe.dedup.text.shingle_modes`): words, else (1)
#: characters
MODE_WORD = 0


@njit(cache=True, inline="always")
def _rotl32(x: np.uint64, r: int) -> np.uint64:
    x = x & MASK32
    return ((x << np.uint64(r)) | (x >> np.uint64(32 - r))) & MASK32


@njit(cache=True, inline="always")
def _read32(data: np.ndarray, i: int) -> np.uint64:
    return (np.uint64(data[i]) | (np.uint64(data[i + 1]) << np.uint64(8))
            | (np.uint64(data[i + 2]) << np.uint64(16)) | (np.uint64(data[i + 3]) << np.uint64(24)))


@njit(cache=True)
def xxh32(data: np.ndarray, start: int, end: int, seed: np.uint64) -> np.uint64:
    """XXH32 of ``data[start:end]``; equals ``xxhash.xxh32_intdigest(bytes, seed)``."""
    n = end - start
    i = start
    if n >= 16:
        v1 = (seed + _P1 + _P2) & MASK32
        v2 = (seed + _P2) & MASK32
        v3 = seed & MASK32
        v4 = (seed - _P1) & MASK32
        limit = end - 16
        while i <= limit:
            v1 = (_rotl32((v1 + _read32(data, i) * _P2) & MASK32, 13) * _P1) & MASK32
            v2 = (_rotl32((v2 + _read32(data, i + 4) * _P2) & MASK32, 13) * _P1) & MASK32
            v3 = (_rotl32((v3 + _read32(data, i + 8) * _P2) & MASK32, 13) * _P1) & MASK32
            v4 = (_rotl32((v4 + _read32(data, i + 12) * _P2) & MASK32, 13) * _P1) & MASK32
            i += 16
        h = (_rotl32(v1, 1) + _rotl32(v2, 7) + _rotl32(v3, 12) + _rotl32(v4, 18)) & MASK32
    else:
        h = (seed + _P5) & MASK32
    h = (h + np.uint64(n)) & MASK32
    while i + 4 <= end:
        h = (h + _read32(data, i) * _P3) & MASK32
        h = (_rotl32(h, 17) * _P4) & MASK32
        i += 4
    while i < end:
        h = (h + np.uint64(data[i]) * _P5) & MASK32
        h = (_rotl32(h, 11) * _P1) & MASK32
        i += 1
    h ^= h >> np.uint64(15)
    h = (h * _P2) & MASK32
    h ^= h >> np.uint64(13)
    h = (h * _P3) & MASK32
    h ^= h >> np.uint64(16)
    return h


@njit(cache=True)
def _doc_units(data: np.ndarray, start: int, end: int, mode: int, starts: np.ndarray) -> int:
    """Fill ``starts`` with the byte offset of each word (mode 0) or code point (mode 1)."""
    k = 0
    if mode == MODE_WORD:
        at_word_start = True
        for i in range(start, end):
            if data[i] == 32:
                at_word_start = True
            elif at_word_start:
                starts[k] = i
                k += 1
                at_word_start = False
    else:
        for i in range(start, end):
            if (data[i] & 0xC0) != 0x80:
                starts[k] = i
                k += 1
    return k


@njit(cache=True)
def _span_end(data: np.ndarray, starts: np.ndarray, k: int, j: int, end: int, mode: int) -> int:
    """End byte of the unit ``j`` (exclusive), without the separating space for words."""
    if j + 1 < k:
        e = starts[j + 1]
        if mode == MODE_WORD:
            while e > starts[j] and data[e - 1] == 32:
                e -= 1
        return e
    e = end
    if mode == MODE_WORD:
        while e > starts[j] and data[e - 1] == 32:
            e -= 1
    return e


@njit(cache=True, inline="always")
def _unit_count(data: np.ndarray, start: int, end: int, mode: int) -> int:
    """How many words (mode 0) or code points (mode 1) ``data[start:end]`` holds."""
    k = 0
    if mode == MODE_WORD:
        prev_space = True
        for i in range(start, end):
            space = data[i] == 32
            if prev_space and not space:
                k += 1
            prev_space = space
    else:
        for i in range(start, end):
            if (data[i] & 0xC0) != 0x80:
                k += 1
    return k


@njit(cache=True, inline="always")
def _shingle_offsets(data: np.ndarray, offsets: np.ndarray, modes: np.ndarray, n_word: int,
                     n_char: int) -> np.ndarray:
    """Where each document's shingles start in the output (and, last, how many there are):
    a document shorter than ``n`` units is one shingle; an empty document has none."""
    n_docs = offsets.size - 1
    doc_off = np.zeros(n_docs + 1, dtype=np.int64)
    for d in range(n_docs):
        k = _unit_count(data, offsets[d], offsets[d + 1], modes[d])
        n = n_word if modes[d] == MODE_WORD else n_char
        doc_off[d + 1] = doc_off[d] + (0 if k == 0 else max(1, k - n + 1))
    return doc_off


@njit(cache=True, inline="always")
def _doc_spans(data: np.ndarray, begin: int, end: int, mode: int, n: int, units: np.ndarray,
               starts: np.ndarray, ends: np.ndarray) -> int:
    """Byte spans of the shingles of ``data[begin:end]`` into ``starts`` and ``ends``
    (``units`` is scratch room for its units); returns how many."""
    k = _doc_units(data, begin, end, mode, units)
    count = 0 if k == 0 else max(1, k - n + 1)
    for j in range(count):
        starts[j] = units[j]
        ends[j] = _span_end(data, units, k, min(j + n, k) - 1, end, mode)
    return count


@njit(cache=True, inline="always")
def _scratch(offsets: np.ndarray) -> np.ndarray:
    """Room for the units (or shingles) of the longest document."""
    longest = 0
    for d in range(offsets.size - 1):
        longest = max(longest, offsets[d + 1] - offsets[d])
    return np.empty(longest + 1, dtype=np.int64)


@ahead_of_time("Tuple((i8[:], i8[:], i8[:]))(u1[:], i8[:], i1[:], i8, i8)")
@njit(cache=True)
def shingle_spans(data: np.ndarray, offsets: np.ndarray, modes: np.ndarray, n_word: int,
                  n_char: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Byte spans of every shingle: ``(starts, ends, doc_offsets)`` (doc i owns
    ``doc_offsets[i]:doc_offsets[i+1]``). A document shorter than ``n`` units is one shingle;
    an empty document has none."""
    doc_off = _shingle_offsets(data, offsets, modes, n_word, n_char)
    s_out = np.empty(doc_off[-1], dtype=np.int64)
    e_out = np.empty(doc_off[-1], dtype=np.int64)
    units = _scratch(offsets)
    for d in range(offsets.size - 1):
        n = n_word if modes[d] == MODE_WORD else n_char
        o = doc_off[d]
        _doc_spans(data, offsets[d], offsets[d + 1], modes[d], n, units, s_out[o:], e_out[o:])
    return s_out, e_out, doc_off


@ahead_of_time("u4[:](u1[:], i8[:], i8[:], u8)")
@njit(cache=True)
def xxh32_spans(data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                seed: np.uint64) -> np.ndarray:
    out = np.empty(starts.size, dtype=np.uint32)
    for i in range(starts.size):
        out[i] = np.uint32(xxh32(data, starts[i], ends[i], seed))
    return out


@ahead_of_time("Tuple((u4[:], i8[:]))(u1[:], i8[:], i1[:], i8, i8, u8)")
@njit(cache=True)
def xxh32_shingles(data: np.ndarray, offsets: np.ndarray, modes: np.ndarray, n_word: int,
                   n_char: int, seed: np.uint64) -> tuple[np.ndarray, np.ndarray]:
    """XXH32 of every shingle: the hashes of :func:`xxh32_spans` over :func:`shingle_spans`,
    without materialising the spans (two int64 per shingle). Counting first lets each
    document hash straight into its own slice. Returns ``(hashes, doc_offsets)``.

    Not ``parallel=True``: on 2 shared cores, and inside the engine's worker processes
    (already one per core), threads measured no faster.
    """
    doc_off = _shingle_offsets(data, offsets, modes, n_word, n_char)
    out = np.empty(doc_off[-1], dtype=np.uint32)
    units = _scratch(offsets)
    for d in range(offsets.size - 1):
        mode, end = modes[d], offsets[d + 1]
        k = _doc_units(data, offsets[d], end, mode, units)
        n = n_word if mode == MODE_WORD else n_char
        o = doc_off[d]
        for j in range(doc_off[d + 1] - o):
            stop = _span_end(data, units, k, min(j + n, k) - 1, end, mode)
            out[o + j] = np.uint32(xxh32(data, units[j], stop, seed))
    return out, doc_off


@njit(cache=True, inline="always")
def _fmix32(h: np.uint64) -> np.uint64:
    h = h & MASK32
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x85EBCA6B)) & MASK32
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(0xC2B2AE35)) & MASK32
    h ^= h >> np.uint64(16)
    return h


@ahead_of_time("u4[:, :](u4[:], i8[:], u8[:], u8[:], i8)")
@njit(cache=True)
def minhash_signatures(hashes: np.ndarray, doc_off: np.ndarray, a: np.ndarray, b: np.ndarray,
                       scheme: int) -> np.ndarray:
    """Signature of each document's hash set, the way ``datasketch.MinHash.update`` folds them.

    One fused pass: each shingle hash is permuted ``len(a)`` times and min-reduced in place,
    so no (shingles × num_perm) matrix is ever materialised. Empty documents keep the
    all-``2**32-1`` signature, as an empty ``datasketch.MinHash`` does.
    """
    n_docs = doc_off.size - 1
    k = a.size
    sig = np.full((n_docs, k), np.uint32(0xFFFFFFFF), dtype=np.uint32)
    # affine32 is arithmetic modulo 2**32: in uint32 lanes the permute-and-min loop
    # vectorises twice as wide as in uint64 ones (t0's 9.8 M shingles: 0.16 s -> 0.10 s)
    a32 = (a & MASK32).astype(np.uint32)
    b32 = (b & MASK32).astype(np.uint32)
    cur = np.empty(k, dtype=np.uint32)
    for d in range(n_docs):
        for p in range(k):
            cur[p] = np.uint32(0xFFFFFFFF)
        for i in range(doc_off[d], doc_off[d + 1]):
            hv = np.uint64(hashes[i])
            if scheme == SCHEME_AFFINE32:
                h32 = np.uint32(_fmix32(hv))
                for p in range(k):
                    v = np.uint32(a32[p] * h32 + b32[p])
                    if v < cur[p]:
                        cur[p] = v
            else:
                for p in range(k):
                    v = np.uint32(((a[p] * hv + b[p]) % MERSENNE61) & MASK32)
                    if v < cur[p]:
                        cur[p] = v
        for p in range(k):
            sig[d, p] = cur[p]
    return sig


@ahead_of_time("u8[:, :](u4[:, :], i8, i8)")
@njit(cache=True)
def band_keys(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """64-bit key of each band of each signature (FNV-style mix of the band's values)."""
    n = sig.shape[0]
    out = np.empty((n, bands), dtype=np.uint64)
    for d in range(n):
        for j in range(bands):
            h = np.uint64(0xCBF29CE484222325) ^ np.uint64(j)
            for r in range(j * rows, (j + 1) * rows):
                h ^= np.uint64(sig[d, r])
                h *= np.uint64(0x100000001B3)
                h ^= h >> np.uint64(29)
            h ^= h >> np.uint64(32)
            h *= np.uint64(0xD6E8FEB86659FD93)
            h ^= h >> np.uint64(32)
            out[d, j] = h
    return out


#: segments up to this long are sorted by insertion (see :func:`sort_unique`)
SMALL_SORT = 24


@njit(cache=True, inline="always")
def sort_unique(seg: np.ndarray) -> int:
    """Sort ``seg`` in place with its distinct values first; returns how many there are."""
    if seg.size <= SMALL_SORT:
        # numba's ndarray.sort builds its partition stack (a list) on every call: for a
        # sentence's dozen words that cost more than the sort (0.2 s of t0's 640k sentences)
        for i in range(1, seg.size):
            v = seg[i]
            j = i
            while j > 0 and seg[j - 1] > v:
                seg[j] = seg[j - 1]
                j -= 1
            seg[j] = v
    else:
        seg.sort()
    w = 0
    for i in range(seg.size):
        if i == 0 or seg[i] != seg[i - 1]:
            seg[w] = seg[i]
            w += 1
    return w


@ahead_of_time("Tuple((u4[:], i8[:]))(u4[:], i8[:])")
@njit(cache=True)
def sorted_unique_segments(hashes: np.ndarray, doc_off: np.ndarray) -> tuple[np.ndarray,
                                                                             np.ndarray]:
    """Each document's hashes sorted and deduplicated (its shingle set), flat.

    Each document is sorted and compacted inside its own slice of a copy (no allocation
    per document), then the slices are packed together.
    """
    n_docs = doc_off.size - 1
    work = hashes.copy()
    sizes = np.zeros(n_docs, dtype=np.int64)
    for d in range(n_docs):
        a, b = doc_off[d], doc_off[d + 1]
        sizes[d] = sort_unique(work[a:b])
    new_off = np.zeros(n_docs + 1, dtype=np.int64)
    for d in range(n_docs):
        new_off[d + 1] = new_off[d] + sizes[d]
    out = np.empty(new_off[n_docs], dtype=np.uint32)
    for d in range(n_docs):
        a, o = doc_off[d], new_off[d]
        for i in range(sizes[d]):
            out[o + i] = work[a + i]
    return out, new_off


@ahead_of_time("i8[:](u8[:, :], i8[:], i8[:])")
@njit(cache=True)
def shared_bands(keys: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """How many bands each (left[i], right[i]) pair has the same key in."""
    out = np.zeros(left.size, dtype=np.int64)
    bands = keys.shape[1]
    for t in range(left.size):
        c = 0
        for j in range(bands):
            if keys[left[t], j] == keys[right[t], j]:
                c += 1
        out[t] = c
    return out


@njit(cache=True, inline="always")
def sorted_common(v: np.ndarray, p: int, pe: int, q: int, qe: int, need: float) -> int:
    """How many values the sorted sets ``v[p:pe]`` and ``v[q:qe]`` share; the merge stops
    (returning less than ``need``) once the rest cannot lift the count to ``need``."""
    inter = 0
    while p < pe and q < qe:
        if inter + min(pe - p, qe - q) < need:
            break
        if v[p] == v[q]:
            inter += 1
            p += 1
            q += 1
        elif v[p] < v[q]:
            p += 1
        else:
            q += 1
    return inter


@ahead_of_time("f8[:](u4[:], i8[:], i8[:], i8[:], f8)")
@njit(cache=True)
def pair_jaccard(sets: np.ndarray, off: np.ndarray, left: np.ndarray,
                 right: np.ndarray, at_least: float = 0.0) -> np.ndarray:
    """Exact Jaccard of the sorted sets of each (left[i], right[i]) document pair.

    With ``at_least`` > 0, a pair that provably stays below it gets -1 instead of its
    value: sets whose sizes alone bound the Jaccard below it are never merged, and a merge
    stops once the rest cannot lift the intersection to the needed size.
    """
    out = np.empty(left.size, dtype=np.float64)
    for t in range(left.size):
        i, j = left[t], right[t]
        p, pe = off[i], off[i + 1]
        q, qe = off[j], off[j + 1]
        na, nb = pe - p, qe - q
        if at_least > 0.0:
            # J <= min/max; J >= t  <=>  inter >= t/(1+t) * (na+nb). The slack leaves
            # pairs at the threshold itself to the caller's exact comparison.
            if min(na, nb) < at_least * max(na, nb) - 1e-9:
                out[t] = -1.0
                continue
            need = at_least / (1.0 + at_least) * (na + nb) - 1e-9
        else:
            need = 0.0
        inter = sorted_common(sets, p, pe, q, qe, need)
        if inter < need:
            out[t] = -1.0
            continue
        union = na + nb - inter
        out[t] = inter / union if union > 0 else 0.0
    return out


@njit(cache=True, inline="always")
def _bucket(order: np.ndarray, sorted_keys: np.ndarray, valid: np.ndarray, i: int,
            members: np.ndarray) -> tuple[int, int]:
    """``(end, m)`` of the bucket of equal keys starting at ``i``: where the next one starts,
    and how many valid documents it holds (written to ``members[:m]``)."""
    n = order.size
    j = i + 1
    while j < n and sorted_keys[j] == sorted_keys[i]:
        j += 1
    m = 0
    for t in range(i, j):
        if valid[order[t]]:
            members[m] = order[t]
            m += 1
    return j, m


@ahead_of_time("Tuple((i8[:], i8[:]))(i8[:], u8[:], b1[:], i8)")
@njit(cache=True)
def bucket_pairs(order: np.ndarray, sorted_keys: np.ndarray, valid: np.ndarray,
                 max_all_pairs: int) -> tuple[np.ndarray, np.ndarray]:
    """Candidate pairs from one band: documents whose key is equal.

    ``order`` sorts the band's keys; ``valid`` masks out documents without shingles. A bucket
    of up to ``max_all_pairs`` members yields all its pairs (so verification can join any two
    of them); a larger one is linked as a star to its first member, which keeps connectivity
    at linear cost.
    """
    n = order.size
    members = np.empty(n, dtype=np.int64)
    left = np.empty(0, dtype=np.int64)
    right = np.empty(0, dtype=np.int64)
    for fill in range(2):  # count the pairs, then write them
        w = 0
        i = 0
        while i < n:
            i, m = _bucket(order, sorted_keys, valid, i, members)
            if m < 2:
                continue
            if not fill:
                w += m * (m - 1) // 2 if m <= max_all_pairs else m - 1
                continue
            seg = np.sort(members[:m])
            if m <= max_all_pairs:
                for x in range(m):
                    for y in range(x + 1, m):
                        left[w] = seg[x]
                        right[w] = seg[y]
                        w += 1
            else:
                for y in range(1, m):
                    left[w] = seg[0]
                    right[w] = seg[y]
                    w += 1
        if not fill:
            left = np.empty(w, dtype=np.int64)
            right = np.empty(w, dtype=np.int64)
    return left, right


@njit(cache=True)
def _find(parent: np.ndarray, x: int) -> int:
    root = x
    while parent[root] != root:
        root = parent[root]
    while parent[x] != root:
        nxt = parent[x]
        parent[x] = root
        x = nxt
    return root


@ahead_of_time("i8[:](i8, i8[:], i8[:])")
@njit(cache=True)
def union_find(n: int, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Connected components; each document's label is the smallest index in its component."""
    parent = np.arange(n, dtype=np.int64)
    for t in range(left.size):
        ra = _find(parent, left[t])
        rb = _find(parent, right[t])
        if ra != rb:
            if ra < rb:
                parent[rb] = ra
            else:
                parent[ra] = rb
    for x in range(n):
        parent[x] = _find(parent, x)
    return parent


@njit(cache=True, inline="always")
def _space_len(data: np.ndarray, i: int, end: int) -> int:
    """Byte length of the whitespace character at ``i`` (0 if it is not one).

    ASCII whitespace, NEL, NBSP, U+1680, U+2000–U+200A, U+2028/9, U+202F, U+205F, U+3000:
    the characters of Unicode's White_Space property.
    """
    c = data[i]
    if c == 32 or (9 <= c <= 13):
        return 1
    if c == 0xC2 and i + 1 < end and (data[i + 1] == 0x85 or data[i + 1] == 0xA0):
        return 2
    if i + 2 < end:
        c1, c2 = data[i + 1], data[i + 2]
        if c == 0xE1 and c1 == 0x9A and c2 == 0x80:
            return 3
        if c == 0xE2 and c1 == 0x80 and (c2 <= 0x8A or c2 == 0xA8 or c2 == 0xA9 or c2 == 0xAF):
            return 3
        if c == 0xE2 and c1 == 0x81 and c2 == 0x9F:
            return 3
        if c == 0xE3 and c1 == 0x80 and c2 == 0x80:
            return 3
    return 0


@ahead_of_time("Tuple((u1[:], i8[:]))(u1[:], i8[:], i8)")
@njit(cache=True)
def collapse_whitespace(data: np.ndarray, offsets: np.ndarray,
                        sep: int) -> tuple[np.ndarray, np.ndarray]:
    """Each string with whitespace runs made one space and trimmed; the byte ``sep`` (a field
    separator) is kept and trims the spaces around it too. Returns new bytes and offsets."""
    n = offsets.size - 1
    out = np.empty(data.size, dtype=np.uint8)
    new_off = np.zeros(n + 1, dtype=np.int64)
    w = 0
    for d in range(n):
        i, end = offsets[d], offsets[d + 1]
        pending = False
        at_start = True
        while i < end:
            c = data[i]
            # printable ASCII, the common case, needs no whitespace test
            if not 32 < c < 0x80:
                k = _space_len(data, i, end)
                if k > 0:
                    pending = True
                    i += k
                    continue
            if c == sep:
                out[w] = c
                w += 1
                pending = False
                at_start = True
                i += 1
                continue
            if pending and not at_start:
                out[w] = 32
                w += 1
            pending = False
            at_start = False
            out[w] = c
            w += 1
            i += 1
        new_off[d + 1] = w
    return out[:w].copy(), new_off
