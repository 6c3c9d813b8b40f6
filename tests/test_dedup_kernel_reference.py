"""The dedup kernels tuned for speed give what a plain statement of their rule gives.

``sentence_sets`` (the per-part records of ``minhash_dedup``), ``sort_unique`` (the sets of
every stage) and ``prompts_near`` (the prompt test of candidate pairs) were rewritten for
speed on t0. These tests hold the first two to a byte-by-byte Python reference of the rule
they keep (the per-byte sentence-end test of the original kernel, ``xxhash`` for the
hashes, ``sorted(set())`` for the sets), on real t0 prompts and on adversarial text in both
shingle modes, and the prompt test to ``prompts_near_by_rule`` (the rule walked once per
direction and rule) on t0's candidate pairs.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import njit

from cleanpipe.contract.stage import BatchContext
from cleanpipe.dedup import cluster, kernels, part_kernels
from cleanpipe.dedup.text import buffers, normalize
from cleanpipe.stages.minhash_dedup import MinHashDedup
from tests.conftest import realdata
from tests.guard_data import read_t0

SENTENCE_ENDS = b".?!;:"


def _ends(b: bytes, i: int, word_mode: bool) -> bool:
    """The sentence-end rule of :mod:`cleanpipe.dedup.part_kernels`, byte by byte."""
    c, last = b[i], i + 1 == len(b)
    if c in SENTENCE_ENDS:
        return not word_mode or last or b[i + 1] == 32
    if c == 34:
        return last or b[i + 1] == 32
    return c == 0x82 and i >= 2 and b[i - 2] == 0xE3 and b[i - 1] == 0x80


def reference_sentences(b: bytes, word_mode: bool, seed: int) -> tuple[list[list[int]],
                                                                      list[int], list[int]]:
    """``(sentence word sets, question flags, words in order)`` of one document: a unit is
    a word (ending at a space, or just after a sentence end) or a code point."""
    sets: list[list[int]] = []
    asks: list[int] = []
    words: list[int] = []
    current: list[int] = []
    i = 0
    while i < len(b):
        if b[i] == 32:
            i += 1
            continue
        j = i + 1
        closes = _ends(b, i, word_mode)
        if word_mode:
            while j < len(b) and b[j] != 32 and not closes:
                closes = _ends(b, j, word_mode)
                j += 1
        else:
            while j < len(b) and (b[j] & 0xC0) == 0x80:
                j += 1
            closes = _ends(b, j - 1, word_mode)
        h = xxhash.xxh32_intdigest(b[i:j], seed)
        current.append(h)
        words.append(h)
        question = closes and (b[j - 1] == 63 or (j - i >= 2 and b[j - 2:j] == b'?"'))
        i = j
        if closes or i >= len(b):
            if current:
                sets.append(sorted(set(current)))
                asks.append(int(question))
            current = []
    return sets, asks, words


def _check_sentence_sets(texts: list[str], seed: int = 5) -> None:
    norm = normalize(pa.array(texts, pa.large_string()))
    data, off = buffers(norm)
    modes = np.zeros(len(texts), dtype=np.int8)
    modes[1::2] = 1  # character units for every other document
    values, sizes, doc_off, questions, words, word_off = part_kernels.sentence_sets(
        data, off, modes, np.uint64(seed))
    at = 0
    for d, text in enumerate(norm.to_pylist()):
        sets, asks, want_words = reference_sentences(text.encode("utf-8"), modes[d] == 0,
                                                     seed)
        got_sets = []
        for k in range(doc_off[d], doc_off[d + 1]):
            got_sets.append(values[at:at + sizes[k]].tolist())
            at += sizes[k]
        assert got_sets == sets, text
        assert questions[doc_off[d]:doc_off[d + 1]].tolist() == asks, text
        assert words[word_off[d]:word_off[d + 1]].tolist() == want_words, text
    assert at == values.size


PIECES = st.sampled_from([
    " ", "  ", "\t", "\n", ". ", ".", "? ", "?", "!", "!x", ";", ": ", ":x", '"', '" ', '?" ',
    '?"', "。", "。x", "中文", "a", "the", "quick", "Where do you run Windows 8?", "\u3000",
    "\u00e9", "\U0001f3f4", "x" * 17, "e.g.", "3.14",
])


@given(st.lists(st.lists(st.one_of(PIECES, st.text(max_size=4)), max_size=25).map("".join),
                min_size=1, max_size=8))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_sentence_sets_equal_reference_on_adversarial_text(texts: list[str]) -> None:
    _check_sentence_sets(texts)


@pytest.mark.realdata
def test_sentence_sets_equal_reference_on_t0_prompts() -> None:
    t0 = read_t0(realdata("sft_self_instruct_t0_50k"))
    # every 20th row: ~2,800 prompts from all templates
    _check_sentence_sets(t0["prompt"].to_pylist()[::20])


@pytest.mark.parametrize("size", [0, 1, 2, 3, kernels.SMALL_SORT - 1, kernels.SMALL_SORT,
                                  kernels.SMALL_SORT + 1, 200])
def test_sorted_unique_segments_equal_numpy_unique(size: int) -> None:
    rng = np.random.default_rng(size)
    sizes = rng.integers(0, size + 1, 300)
    sizes[:3] = (0, size, size)
    off = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=off[1:])
    # a small range of values: segments hold repeats, as shingle lists do
    hashes = rng.integers(0, max(size // 2, 2), off[-1]).astype(np.uint32)
    hashes[: sizes[1]] = np.uint32(0xFFFFFFFF)  # the largest value, all repeats
    values, new_off = kernels.sorted_unique_segments(hashes, off)
    for d in range(sizes.size):
        assert values[new_off[d]:new_off[d + 1]].tolist() == \
            np.unique(hashes[off[d]:off[d + 1]]).tolist()


@njit(cache=True)
def _both_rules(v: np.ndarray, off: np.ndarray, left: np.ndarray, right: np.ndarray,
                at_least: float) -> np.ndarray:
    """``(prompts_near, prompts_near_by_rule)`` of each record pair, as 0/1 columns."""
    out = np.zeros((left.size, 2), dtype=np.int8)
    for t in range(left.size):
        a, b = off[left[t]], off[right[t]]
        out[t, 0] = part_kernels.prompts_near(v, a, b, at_least)
        out[t, 1] = part_kernels.prompts_near_by_rule(v, a, b, at_least)
    return out


def _edits(prompt: str, rng: np.random.Generator) -> list[str]:
    """Copies of ``prompt`` with one word replaced, left out or added, a full stop left
    out, and its question's last word replaced: each rule of the prompt test in play."""
    words = prompt.split(" ")
    k = int(rng.integers(0, len(words)))
    out = [" ".join([*words[:k], "zyzzyva", *words[k + 1:]]),
           " ".join(words[:k] + words[k + 1:]),
           " ".join([*words[:k], "zyzzyva", *words[k:]]),
           prompt.replace(". ", " ", 1)]
    q = prompt.rfind("?")
    if q > 0:
        w = prompt.rfind(" ", 0, q)
        out.append(prompt[:w + 1] + "zyzzyva" + prompt[q:])
    return out


@pytest.mark.realdata
def test_one_pass_prompt_test_equals_the_rule_on_t0() -> None:
    """:func:`part_kernels.prompts_near` (one walk per direction) decides as the rule does
    on t0's candidate pairs (same passage, other question...), on edited copies of t0
    prompts (each rule of the test in play) and on unrelated rows."""
    t0 = read_t0(realdata("sft_self_instruct_t0_50k")).slice(0, 12000)
    rng = np.random.default_rng(0)
    prompts, completions = t0["prompt"].to_pylist(), t0["completion"].to_pylist()
    n = len(prompts)
    planted = []
    for i in rng.choice(n, 1500, replace=False).tolist():
        for copy in _edits(prompts[i], rng):
            planted.append(i)
            prompts.append(copy)
            completions.append(completions[i])
    batch = pa.record_batch({"prompt": prompts, "completion": completions})
    stage = MinHashDedup(num_perm=112, bands=14, rows=8, threshold=0.7)
    sk = stage.sketch(batch, BatchContext(batch, ["prompt", "completion"]))
    left, right = cluster.candidate_pairs(sk.keys, sk.valid)
    other = rng.integers(0, n, (2, 20000))
    left = np.r_[left, planted, other[0]]
    right = np.r_[right, np.arange(n, n + len(planted)), other[1]]
    assert sk.sets is not None and sk.set_off is not None
    for at_least in (0.5, 0.7, 0.9):
        got = _both_rules(sk.sets, sk.set_off, left, right, at_least)
        np.testing.assert_array_equal(got[:, 0], got[:, 1])
        if at_least == 0.7:  # both answers occur
            assert 100 < got[:, 0].sum() < left.size - 100
