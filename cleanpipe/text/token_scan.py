"""Finding and stripping literal token strings: one scan for all tokens, or one per token.

``special_tokens`` looks for a few dozen literal strings (``<|endoftext|>``, ``[CLS]``...).
The exact way counts each token with its own Arrow pass and strips them one after another:
a pass per token over every candidate string. The fast way makes one scan for all tokens
at once (a compiled alternation over the candidates' bytes) and strips them all with one
regex pass per round. Both give the same result whenever no two tokens can overlap in a
text (no suffix of one is a prefix of another or of itself, none holds another):

* counts: an occurrence of a token can then never be hidden by a match of another, so the
  leftmost non-overlapping matches of the alternation are exactly each token's own
  non-overlapping occurrences;
* stripping: occurrences never overlap, so removing them in any order and repeating until
  none is left reaches the same text (each removal leaves every other one intact).

:func:`can_scan_once` says when that holds; otherwise the caller keeps the exact way.

    >>> import pyarrow as pa
    >>> toks = ["<|endoftext|>", "[CLS]"]
    >>> can_scan_once(toks), can_scan_once(["ab", "ba"])
    (True, False)
    >>> texts = pa.array(["a<|endoftext|>", "[CLS] b [CLS]"], pa.large_string())
    >>> scan_once(texts, toks) == scan_each(texts, toks)
    True
    >>> scan_once(texts, toks)
    ([['<|endoftext|>'], ['[CLS]']], {'<|endoftext|>': 1, '[CLS]': 2})
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: Put between strings for the one scan; no token may hold it, so no match spans two rows.
_SEP = b"\x00"


def alternation(tokens: Sequence[str]) -> str:
    """An RE2 / Python pattern matching any of ``tokens`` (tried in the order given)."""
    return "|".join(re.escape(t) for t in tokens)


def _overlaps(a: str, b: str) -> bool:
    """Whether an occurrence of ``a`` and one of ``b`` can share characters (other than
    being the same occurrence of the same token)."""
    if a != b and (a in b or b in a):
        return True
    return any(a.endswith(b[:k]) for k in range(1, min(len(a), len(b)) + (a != b)))


def can_scan_once(tokens: Sequence[str]) -> bool:
    """True when :func:`scan_once` and :func:`strip_once` give the exact results."""
    toks = [t for t in tokens if t]
    if any(_SEP.decode() in t for t in toks):
        return False
    return not any(_overlaps(a, b) for a in toks for b in toks)


def scan_each(texts: pa.Array, tokens: Sequence[str]) -> tuple[list[list[str]], dict[str, int]]:
    """Per string, the tokens it holds (in ``tokens`` order); and each token's total count.

    One ``count_substring`` pass per token: exact for any token list."""
    names: list[list[str]] = [[] for _ in range(len(texts))]
    totals: dict[str, int] = {}
    for t in tokens:
        c = pc.count_substring(texts, t).to_numpy(zero_copy_only=False)
        if c.sum():
            totals[t] = int(c.sum())
            for i in np.flatnonzero(c):
                names[i].append(t)
    return names, totals


def scan_once(texts: pa.Array, tokens: Sequence[str]) -> tuple[list[list[str]], dict[str, int]]:
    """What :func:`scan_each` returns, from one scan of all ``texts`` (non-null, large
    strings) for all tokens; exact when :func:`can_scan_once` holds."""
    n = len(texts)
    names: list[list[str]] = [[] for _ in range(n)]
    if n == 0:
        return names, {}
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64)[texts.offset:texts.offset + n + 1]
    data = np.frombuffer(texts.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
    rel = offsets - offsets[0]
    blob = np.insert(data, rel[1:-1], _SEP[0])
    starts = rel[:-1] + np.arange(n)
    order = {t: k for k, t in enumerate(tokens)}
    by_bytes = {t.encode("utf-8"): order[t] for t in tokens}
    pattern = re.compile(b"|".join(re.escape(t) for t in sorted(by_bytes, key=len, reverse=True)))
    pos, which = [], []
    for m in pattern.finditer(memoryview(blob)):
        pos.append(m.start())
        which.append(by_bytes[m.group()])
    if not pos:
        return names, {}
    rows = np.searchsorted(starts, np.asarray(pos, dtype=np.int64), side="right") - 1
    tok = np.asarray(which, dtype=np.int64)
    k = len(tokens)
    pairs = np.unique(rows * k + tok)  # sorted by row, then by token order
    for r, t in zip((pairs // k).tolist(), (pairs % k).tolist(), strict=True):
        names[r].append(tokens[t])
    counts = np.bincount(tok, minlength=k)
    return names, {tokens[t]: int(counts[t]) for t in np.flatnonzero(counts)}


def strip_each(texts: pa.Array, tokens: Sequence[str]) -> pa.Array:
    """``texts`` with every token removed, a token at a time, until none is left (removal
    can join the halves of another token: ``<|im_<|endoftext|>start|>``)."""
    pattern = alternation(tokens)
    out = texts
    while True:
        for t in tokens:
            out = pc.replace_substring(out, t, "")
        if not pc.any(pc.match_substring_regex(out, pattern)).as_py():
            return out


def strip_once(texts: pa.Array, tokens: Sequence[str]) -> pa.Array:
    """What :func:`strip_each` returns, with one regex pass per round for all tokens;
    exact when :func:`can_scan_once` holds."""
    pattern = alternation(tokens)
    out = texts
    while True:
        out = pc.replace_substring_regex(out, pattern, "")
        if not pc.any(pc.match_substring_regex(out, pattern)).as_py():
            return out
