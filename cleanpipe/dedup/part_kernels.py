"""Compiled kernels of the per-part near-duplicate test (``minhash_dedup`` with ``parts``).

Each row's verification record is one flat uint32 slice (so every store, Arrow column and
shuffle that carries a joined shingle set carries it unchanged)::

    [n_response, n_sentences, size of each sentence...,
     response shingle set, each prompt sentence's word set]

The shingle set is sorted and unique, as in joined mode. A *sentence* is a span of the
normalised prompt ending at ``. ? ! ; :`` before a space (anywhere in character-shingled
rows), at ``。``, or at a closing double quote (before a space); its word set is the
sorted unique XXH32 of its words (code points in character-shingled rows).

Two records are near duplicates when the response shingle sets reach the threshold (two
empty responses count as equal, an empty and a non-empty one as different) and every
prompt sentence of each has a near copy in the other (no prompt sentences on both sides
counts as equal). Prompts are compared by sentence rather than by 5-word shingles because
prompts are often one short instruction, where one edited word leaves no shingle in
common. A sentence's near copy is one whose word Jaccard reaches the threshold; one as
long with one word replaced (from 4 words) or two (from :data:`EDITED_SENTENCE` words); or
one that holds at least the threshold's share of its words and adds a
sentence's worth (:data:`MERGED` words) to them: an edit that deletes a full stop merges
two sentences. The sentence test is what tells a different question about the same long
passage (one sentence with no counterpart) from a copy with a few words edited (every
sentence still has one). A question that adds a word or two to another ("Where do you run
Windows 8?", "... Windows 8 Enterprise?") is a different question.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from cleanpipe.dedup.kernels import MODE_WORD, xxh32

HEADER = 2
#: words of a sentence, and of what a longer one adds to it, from which the longer one
#: counts as the sentence merged with another (its full stop edited away)
MERGED = 6
#: words from which a sentence with two words replaced counts as copied (one word: half)
EDITED_SENTENCE = 8


@njit(cache=True, inline="always")
def _ends_sentence(data: np.ndarray, i: int, end: int, mode: int) -> bool:
    c = data[i]
    if c == 46 or c == 63 or c == 33 or c == 59 or c == 58:  # . ? ! ; :
        return mode != MODE_WORD or i + 1 == end or data[i + 1] == 32
    if c == 34:  # a closing quote
        return i + 1 == end or data[i + 1] == 32
    # U+3002 IDEOGRAPHIC FULL STOP (NFKC keeps it; full-width ! ? fold to ASCII)
    return c == 0x82 and i >= 2 and data[i - 2] == 0xE3 and data[i - 1] == 0x80


@njit(cache=True)
def sentence_sets(data: np.ndarray, offsets: np.ndarray, modes: np.ndarray,
                  seed: np.uint64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Word sets of every sentence of every document: ``(values, sizes, doc_off)``;
    document ``d`` owns sentences ``doc_off[d]:doc_off[d+1]``, sentence ``k`` holds
    ``sizes[k]`` values (sentences without words are left out)."""
    n_docs = offsets.size - 1
    values = np.empty(max(data.size, 1), dtype=np.uint32)
    sizes = np.empty(max(data.size, 1), dtype=np.int64)
    doc_off = np.zeros(n_docs + 1, dtype=np.int64)
    nv = 0
    ns = 0
    for d in range(n_docs):
        begin, end = offsets[d], offsets[d + 1]
        mode = modes[d]
        sent_start = nv
        i = begin
        while i < end:
            # a unit: a word (up to a space or sentence end) or one code point
            if data[i] == 32:
                i += 1
                continue
            j = i + 1
            closes = _ends_sentence(data, i, end, mode)
            if mode == MODE_WORD:
                while j < end and data[j] != 32 and not closes:
                    closes = _ends_sentence(data, j, end, mode)
                    j += 1
            else:
                while j < end and (data[j] & 0xC0) == 0x80:
                    j += 1
                closes = _ends_sentence(data, j - 1, end, mode)
            values[nv] = np.uint32(xxh32(data, i, j, seed))
            nv += 1
            i = j
            if closes or i >= end:
                seg = values[sent_start:nv]
                seg.sort()
                w = 0
                for t in range(seg.size):
                    if t == 0 or seg[t] != seg[t - 1]:
                        seg[w] = seg[t]
                        w += 1
                nv = sent_start + w
                if w > 0:
                    sizes[ns] = w
                    ns += 1
                sent_start = nv
        doc_off[d + 1] = ns
    return values[:nv].copy(), sizes[:ns].copy(), doc_off


@njit(cache=True)
def pack(r_sets: np.ndarray, r_off: np.ndarray, s_vals: np.ndarray, s_sizes: np.ndarray,
         s_doc_off: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's verification record (module docstring), flat, with its offsets."""
    n = r_off.size - 1
    off = np.zeros(n + 1, dtype=np.int64)
    for d in range(n):
        ns = s_doc_off[d + 1] - s_doc_off[d]
        words = 0
        for k in range(s_doc_off[d], s_doc_off[d + 1]):
            words += s_sizes[k]
        off[d + 1] = off[d] + HEADER + ns + (r_off[d + 1] - r_off[d]) + words
    out = np.empty(off[n], dtype=np.uint32)
    sv = 0
    for d in range(n):
        o = off[d]
        out[o] = r_off[d + 1] - r_off[d]
        out[o + 1] = s_doc_off[d + 1] - s_doc_off[d]
        o += HEADER
        for k in range(s_doc_off[d], s_doc_off[d + 1]):
            out[o] = s_sizes[k]
            o += 1
        for t in range(r_off[d], r_off[d + 1]):
            out[o] = r_sets[t]
            o += 1
        for k in range(s_doc_off[d], s_doc_off[d + 1]):
            for _ in range(s_sizes[k]):
                out[o] = s_vals[sv]
                o += 1
                sv += 1
    return out, off


@njit(cache=True, inline="always")
def _common(v: np.ndarray, p: int, pe: int, q: int, qe: int) -> int:
    """How many values the sorted sets ``v[p:pe]`` and ``v[q:qe]`` share."""
    inter = 0
    while p < pe and q < qe:
        if v[p] == v[q]:
            inter += 1
            p += 1
            q += 1
        elif v[p] < v[q]:
            p += 1
        else:
            q += 1
    return inter


@njit(cache=True, inline="always")
def _jaccard(v: np.ndarray, p: int, pe: int, q: int, qe: int) -> float:
    na, nb = pe - p, qe - q
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    inter = _common(v, p, pe, q, qe)
    return inter / (na + nb - inter)


@njit(cache=True, inline="always")
def _bound(na: int, nb: int) -> float:
    """Highest Jaccard sets of these sizes can have."""
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    return min(na, nb) / max(na, nb)


@njit(cache=True, inline="always")
def _copied(v: np.ndarray, p: int, pe: int, q: int, qe: int, at_least: float) -> bool:
    """Two sentences' word sets are copies of each other (module docstring)."""
    na, nb = pe - p, qe - q
    small, big = min(na, nb), max(na, nb)
    if big - small < MERGED and _bound(na, nb) < at_least and not (
            na == nb and na >= EDITED_SENTENCE // 2):
        return False
    inter = _common(v, p, pe, q, qe)
    if small >= MERGED and big - inter >= MERGED and inter >= at_least * small:
        return True
    if na == nb and na - inter <= (na >= EDITED_SENTENCE) + (na >= EDITED_SENTENCE // 2):
        return True
    return inter >= at_least * (na + nb - inter)


@njit(cache=True)
def _sentences_covered(v: np.ndarray, a: int, b: int, at_least: float) -> bool:
    """Every prompt sentence of record ``a`` has a near copy among record ``b``'s."""
    na_s, nb_s = v[a + 1], v[b + 1]
    if na_s and not nb_s:
        return False
    starts = np.empty(nb_s + 1, dtype=np.int64)
    starts[0] = b + HEADER + nb_s + v[b]
    for y in range(nb_s):
        starts[y + 1] = starts[y] + v[b + HEADER + y]
    pa_ = a + HEADER + na_s + v[a]
    nxt = 0  # copies keep their order: look after the previous match first
    for x in range(na_s):
        xs = v[a + HEADER + x]
        found = False
        for k in range(nb_s):
            y = (nxt + k) % nb_s
            if _copied(v, pa_, pa_ + xs, starts[y], starts[y + 1], at_least):
                found = True
                nxt = y + 1
                break
        if not found:
            return False
        pa_ += xs
    return True


@njit(cache=True)
def pair_similarity(values: np.ndarray, off: np.ndarray, left: np.ndarray,
                    right: np.ndarray, at_least: float) -> np.ndarray:
    """The response Jaccard of each record pair.

    With ``at_least`` > 0, a pair whose responses stay below it, or whose prompts fail the
    sentence test at it, gets -1 (not a near duplicate); sizes alone rule many pairs out.
    """
    out = np.empty(left.size, dtype=np.float64)
    for t in range(left.size):
        a, b = off[left[t]], off[right[t]]
        ra, rb = a + HEADER + values[a + 1], b + HEADER + values[b + 1]
        nr_a, nr_b = values[a], values[b]
        if at_least > 0.0 and _bound(nr_a, nr_b) < at_least - 1e-9:
            out[t] = -1.0
            continue
        jr = _jaccard(values, ra, ra + nr_a, rb, rb + nr_b)
        if at_least > 0.0 and (jr < at_least
                               or not _sentences_covered(values, a, b, at_least)
                               or not _sentences_covered(values, b, a, at_least)):
            jr = -1.0
        out[t] = jr
    return out
