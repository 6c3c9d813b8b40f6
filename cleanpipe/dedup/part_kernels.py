"""Compiled kernels of the per-part near-duplicate test (``minhash_dedup`` with ``parts``).

Each row's verification record is one flat uint32 slice (so every store, Arrow column and
shuffle that carries a joined shingle set carries it unchanged)::

    [n_response, n_sentences, n_words, size of each sentence..., 1 for each sentence
     ending at "?" (else 0)..., response shingle set, each prompt sentence's word set,
     the prompt's words in order]

The shingle set is sorted and unique, as in joined mode. A *sentence* is a span of the
normalised prompt ending at ``. ? ! ; :`` before a space (anywhere in character-shingled
rows), at ``。``, or at a closing double quote (before a space); its word set is the
sorted unique XXH32 of its words (code points in character-shingled rows); the ordered
words are the same hashes in text order.

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

Prompts failing the sentence test are still near copies when their edits are few and
scattered (:func:`prompts_near`): the ordered words are at most max(:data:`SCATTERED_MIN`,
shorter length // :data:`SCATTERED_PER`) edits apart, every sentence ending at ``?``
passes the sentence test, and every other sentence passes it or differs from one of the
other prompt's by one word. This catches one-word edits in short sentences (a label, a
code line) without merging a replaced question, whether asked with ``?`` or not.
"""

from __future__ import annotations

import numpy as np

from cleanpipe.dedup.kernels import MODE_WORD, sort_unique, sorted_common, xxh32
from cleanpipe.precompiled import ahead_of_time, njit

HEADER = 3
#: words of a sentence, and of what a longer one adds to it, from which the longer one
#: counts as the sentence merged with another (its full stop edited away)
MERGED = 6
#: words from which a sentence with two words replaced counts as copied (one word: half)
EDITED_SENTENCE = 8
#: prompts this many words apart (insertions, deletions, replacements) are near copies
#: when their questions are: one word in SCATTERED_PER, and at least SCATTERED_MIN
SCATTERED_PER = 50
SCATTERED_MIN = 2


@njit(cache=True, inline="always")
def _ends_sentence(data: np.ndarray, i: int, end: int, mode: int) -> bool:
    c = data[i]
    if c == 46 or c == 63 or c == 33 or c == 59 or c == 58:  # . ? ! ; :
        return mode != MODE_WORD or i + 1 == end or data[i + 1] == 32
    if c == 34:  # a closing quote
        return i + 1 == end or data[i + 1] == 32
    # U+3002 IDEOGRAPHIC FULL STOP (NFKC keeps it; full-width ! ? fold to ASCII)
    return c == 0x82 and i >= 2 and data[i - 2] == 0xE3 and data[i - 1] == 0x80


@njit(cache=True, inline="always")
def _word_end(data: np.ndarray, i: int, end: int) -> tuple[int, bool]:
    """``(j, closes)``: the word starting at ``i`` is ``data[i:j]``; ``closes`` when it ends
    a sentence. A word ends at a space, or just after a sentence end inside it.

    Within a word only U+3002 (last byte 0x82) can end a sentence: ``. ? ! ; :`` and the
    closing quote need a space (or the end) after them, which ends the word anyway. So the
    scan tests two byte values, and :func:`_ends_sentence` runs once a word (and at 0x82
    bytes) rather than at every byte.
    """
    j = i
    while j < end:
        c = data[j]
        if c == 32:
            break
        j += 1
        if c == 0x82 and _ends_sentence(data, j - 1, end, MODE_WORD):
            return j, True
    return j, _ends_sentence(data, j - 1, end, MODE_WORD)


@ahead_of_time("Tuple((u4[:], i8[:], i8[:], u4[:], u4[:], i8[:]))(u1[:], i8[:], i1[:], u8)")
@njit(cache=True)
def sentence_sets(data: np.ndarray, offsets: np.ndarray, modes: np.ndarray,
                  seed: np.uint64) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                            np.ndarray, np.ndarray]:
    """Word sets of every sentence of every document, and each document's words in order:
    ``(values, sizes, doc_off, questions, words, word_off)``; document ``d`` owns
    sentences ``doc_off[d]:doc_off[d+1]``, sentence ``k`` holds ``sizes[k]`` values
    (sentences without words are left out) and ``questions[k]`` is 1 when it ends at
    ``?``; document ``d``'s words are ``words[word_off[d]:word_off[d+1]]``."""
    n_docs = offsets.size - 1
    values = np.empty(max(data.size, 1), dtype=np.uint32)
    sizes = np.empty(max(data.size, 1), dtype=np.int64)
    questions = np.zeros(max(data.size, 1), dtype=np.uint32)
    doc_off = np.zeros(n_docs + 1, dtype=np.int64)
    words = np.empty(max(data.size, 1), dtype=np.uint32)
    word_off = np.zeros(n_docs + 1, dtype=np.int64)
    nv = 0
    ns = 0
    nw = 0
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
            if mode == MODE_WORD:
                j, closes = _word_end(data, i, end)
            else:
                while j < end and (data[j] & 0xC0) == 0x80:
                    j += 1
                closes = _ends_sentence(data, j - 1, end, mode)
            values[nv] = np.uint32(xxh32(data, i, j, seed))
            words[nw] = values[nv]
            nv += 1
            nw += 1
            # "?" ends the unit, or comes just before its closing quote
            asks = closes and (data[j - 1] == 63 or (j - i >= 2 and data[j - 1] == 34
                                                      and data[j - 2] == 63))
            i = j
            if closes or i >= end:
                w = sort_unique(values[sent_start:nv])
                nv = sent_start + w
                if w > 0:
                    sizes[ns] = w
                    questions[ns] = asks
                    ns += 1
                sent_start = nv
        doc_off[d + 1] = ns
        word_off[d + 1] = nw
    return (values[:nv].copy(), sizes[:ns].copy(), doc_off, questions[:ns].copy(),
            words[:nw].copy(), word_off)


@ahead_of_time("Tuple((u4[:], i8[:]))(u4[:], i8[:], u4[:], i8[:], i8[:], u4[:], u4[:], i8[:])")
@njit(cache=True)
def pack(r_sets: np.ndarray, r_off: np.ndarray, s_vals: np.ndarray, s_sizes: np.ndarray,
         s_doc_off: np.ndarray, questions: np.ndarray, words: np.ndarray,
         word_off: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's verification record (module docstring), flat, with its offsets."""
    n = r_off.size - 1
    off = np.zeros(n + 1, dtype=np.int64)
    for d in range(n):
        ns = s_doc_off[d + 1] - s_doc_off[d]
        in_sets = 0
        for k in range(s_doc_off[d], s_doc_off[d + 1]):
            in_sets += s_sizes[k]
        off[d + 1] = (off[d] + HEADER + 2 * ns + (r_off[d + 1] - r_off[d]) + in_sets
                      + (word_off[d + 1] - word_off[d]))
    out = np.empty(off[n], dtype=np.uint32)
    sv = 0
    for d in range(n):
        o = off[d]
        ns = s_doc_off[d + 1] - s_doc_off[d]
        out[o] = r_off[d + 1] - r_off[d]
        out[o + 1] = ns
        out[o + 2] = word_off[d + 1] - word_off[d]
        o += HEADER
        for k in range(s_doc_off[d], s_doc_off[d + 1]):
            out[o] = s_sizes[k]
            out[o + ns] = questions[k]
            o += 1
        o += ns
        for t in range(r_off[d], r_off[d + 1]):
            out[o] = r_sets[t]
            o += 1
        for k in range(s_doc_off[d], s_doc_off[d + 1]):
            for _ in range(s_sizes[k]):
                out[o] = s_vals[sv]
                o += 1
                sv += 1
        for t in range(word_off[d], word_off[d + 1]):
            out[o] = words[t]
            o += 1
    return out, off


@njit(cache=True, inline="always")
def _jaccard(v: np.ndarray, p: int, pe: int, q: int, qe: int) -> float:
    na, nb = pe - p, qe - q
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    inter = sorted_common(v, p, pe, q, qe, 0.0)
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
    inter = sorted_common(v, p, pe, q, qe, 0.0)
    if small >= MERGED and big - inter >= MERGED and inter >= at_least * small:
        return True
    if na == nb and na - inter <= (na >= EDITED_SENTENCE) + (na >= EDITED_SENTENCE // 2):
        return True
    return inter >= at_least * (na + nb - inter)


@njit(cache=True)
def _sentence_starts(v: np.ndarray, b: int) -> np.ndarray:
    """Where each of record ``b``'s prompt sentences starts in ``v``, and where the last
    one ends."""
    nb_s = v[b + 1]
    starts = np.empty(nb_s + 1, dtype=np.int64)
    starts[0] = b + HEADER + 2 * nb_s + v[b]
    for y in range(nb_s):
        starts[y + 1] = starts[y] + v[b + HEADER + y]
    return starts


@njit(cache=True)
def _sentences_covered(v: np.ndarray, a: int, b: int, at_least: float,
                       one_word: bool) -> bool:
    """Every prompt sentence of record ``a`` has a near copy among record ``b``'s; with
    ``one_word``, a sentence not ending at ``?`` may instead differ from one of them by a
    single word (replaced, added or left out)."""
    na_s, nb_s = v[a + 1], v[b + 1]
    starts = _sentence_starts(v, b)
    pa_ = a + HEADER + 2 * na_s + v[a]
    nxt = 0  # copies keep their order: look after the previous match first
    for x in range(na_s):
        xs = v[a + HEADER + x]
        loose = one_word and v[a + HEADER + na_s + x] == 0
        found = False
        for k in range(nb_s):
            y = (nxt + k) % nb_s
            ys = starts[y + 1] - starts[y]
            if ((loose and abs(xs - ys) <= 1
                    and sorted_common(v, pa_, pa_ + xs, starts[y], starts[y + 1], 0.0)
                    >= max(xs, ys) - 1)
                    or _copied(v, pa_, pa_ + xs, starts[y], starts[y + 1], at_least)):
                found = True
                nxt = y + 1
                break
        if not found:
            return False
        pa_ += xs
    return True


@njit(cache=True)
def _coverage(v: np.ndarray, a: int, b: int, at_least: float) -> int:
    """How record ``a``'s prompt sentences are covered by record ``b``'s, in one pass:
    2 when :func:`_sentences_covered` holds without ``one_word``, 1 when it holds only
    with it, 0 when it fails both ways.

    A copy found without ``one_word`` also counts with it, so a sentence needs the
    one-word test only when it has no copy, and a sentence that passes neither settles
    both answers: :func:`prompts_near` no longer walks a prompt twice, the second time
    for the one-word rule, to reject a pair (t0's candidates with the same passage and a
    different question: 100k pairs, 2.3 us each).
    """
    na_s, nb_s = v[a + 1], v[b + 1]
    starts = _sentence_starts(v, b)
    pa_ = a + HEADER + 2 * na_s + v[a]
    nxt = 0  # copies keep their order: look after the previous match first
    level = 2
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
            if v[a + HEADER + na_s + x] != 0:  # a question: no one-word rule
                return 0
            for k in range(nb_s):
                y = (nxt + k) % nb_s
                ys = starts[y + 1] - starts[y]
                if (abs(xs - ys) <= 1 and sorted_common(v, pa_, pa_ + xs, starts[y],
                                                         starts[y + 1], 0.0)
                        >= max(xs, ys) - 1):
                    found = True
                    nxt = y + 1
                    break
            if not found:
                return 0
            level = 1
        pa_ += xs
    return level


@njit(cache=True)
def _words_at(v: np.ndarray, a: int) -> int:
    """Where record ``a``'s prompt words (in order) start."""
    ns = v[a + 1]
    p = a + HEADER + 2 * ns + v[a]
    for k in range(ns):
        p += v[a + HEADER + k]
    return p


@njit(cache=True)
def _within_edits(v: np.ndarray, p: int, n: int, q: int, m: int, limit: int) -> bool:
    """The word sequences ``v[p:p+n]`` and ``v[q:q+m]`` are at most ``limit`` word
    insertions, deletions or replacements apart (Levenshtein in a band of ``limit``)."""
    if abs(n - m) > limit:
        return False
    big = limit + 1
    prev = np.empty(m + 1, dtype=np.int64)
    cur = np.empty(m + 1, dtype=np.int64)
    for j in range(m + 1):
        prev[j] = j if j <= limit else big
    for i in range(1, n + 1):
        lo, hi = max(1, i - limit), min(m, i + limit)
        cur[0] = i if i <= limit else big
        if lo > 1:
            cur[lo - 1] = big
        best = cur[0] if lo == 1 else big
        for j in range(lo, hi + 1):
            c = prev[j - 1] + (v[p + i - 1] != v[q + j - 1])
            c = min(c, prev[j] + 1) if j <= i - 1 + limit else c
            c = min(c, cur[j - 1] + 1)
            cur[j] = min(c, big)
            best = min(best, cur[j])
        if hi < m:
            cur[hi + 1] = big
        if best > limit:
            return False
        prev, cur = cur, prev
    return prev[m] <= limit


@njit(cache=True)
def prompts_near(v: np.ndarray, a: int, b: int, at_least: float) -> bool:
    """The prompts of records ``a`` and ``b`` are near copies (module docstring)."""
    if (v[a + 1] and not v[b + 1]) or (v[b + 1] and not v[a + 1]):
        return False
    ab = _coverage(v, a, b, at_least)
    if ab == 0:
        return False
    ba = _coverage(v, b, a, at_least)
    if ab == 2 and ba == 2:
        return True
    if ba == 0:
        return False
    n, m = v[a + 2], v[b + 2]
    limit = max(SCATTERED_MIN, min(n, m) // SCATTERED_PER)
    return _within_edits(v, _words_at(v, a), n, _words_at(v, b), m, limit)


@njit(cache=True)
def prompts_near_by_rule(v: np.ndarray, a: int, b: int, at_least: float) -> bool:
    """:func:`prompts_near` as the module docstring states it, one
    :func:`_sentences_covered` walk per direction and rule: what the tests hold the
    one-pass :func:`_coverage` to."""
    if (v[a + 1] and not v[b + 1]) or (v[b + 1] and not v[a + 1]):
        return False
    if (_sentences_covered(v, a, b, at_least, False)
            and _sentences_covered(v, b, a, at_least, False)):
        return True
    n, m = v[a + 2], v[b + 2]
    limit = max(SCATTERED_MIN, min(n, m) // SCATTERED_PER)
    return (_sentences_covered(v, a, b, at_least, True)
            and _sentences_covered(v, b, a, at_least, True)
            and _within_edits(v, _words_at(v, a), n, _words_at(v, b), m, limit))


@ahead_of_time("f8[:](u4[:], i8[:], i8[:], i8[:], f8)")
@njit(cache=True)
def pair_similarity(values: np.ndarray, off: np.ndarray, left: np.ndarray,
                    right: np.ndarray, at_least: float) -> np.ndarray:
    """The response Jaccard of each record pair.

    With ``at_least`` > 0, a pair whose responses stay below it, or whose prompts are no
    near copies at it (:func:`prompts_near`), gets -1 (not a near duplicate); sizes alone
    rule many pairs out.
    """
    out = np.empty(left.size, dtype=np.float64)
    for t in range(left.size):
        a, b = off[left[t]], off[right[t]]
        ra, rb = a + HEADER + 2 * values[a + 1], b + HEADER + 2 * values[b + 1]
        nr_a, nr_b = values[a], values[b]
        if at_least > 0.0 and _bound(nr_a, nr_b) < at_least - 1e-9:
            out[t] = -1.0
            continue
        jr = _jaccard(values, ra, ra + nr_a, rb, rb + nr_b)
        if at_least > 0.0 and (jr < at_least or not prompts_near(values, a, b, at_least)):
            jr = -1.0
        out[t] = jr
    return out
