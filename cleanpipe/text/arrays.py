"""Small helpers over Arrow string arrays shared by the text stages: RE2 masks, writes at
positions, before/after example snippets and code-point labels."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SNIPPET = 60


def cp_label(cp: int) -> str:
    """``0x200B`` → ``"U+200B"``."""
    return f"U+{cp:04X}"


def snippet_pair(before: str, after: str, width: int = SNIPPET) -> tuple[str, str]:
    """Windows of ``before``/``after`` around their first difference, so a report shows it."""
    n = min(len(before), len(after))
    i = 0
    while i < n and before[i] == after[i]:
        i += 1
    start = max(0, i - width // 3)
    return before[start:start + width], after[start:start + width]


def examples(positions: np.ndarray, before: pa.Array, after: pa.Array,
             limit: int) -> tuple[list[str | None], list[str | None]]:
    """Before/after snippets for the first ``limit`` positions (None for the rest)."""
    b: list[str | None] = [None] * len(positions)
    a: list[str | None] = [None] * len(positions)
    for k, p in enumerate(positions[:limit]):
        old, new = before[int(p)].as_py() or "", after[int(p)].as_py() or ""
        b[k], a[k] = snippet_pair(old, new)
    return b, a


def regex_mask(texts: pa.Array, pattern: str) -> np.ndarray:
    """Boolean numpy mask of the strings matching an RE2 ``pattern`` (nulls: False)."""
    if len(texts) == 0:
        return np.zeros(0, dtype=bool)
    m = pc.fill_null(pc.match_substring_regex(texts, pattern), False)
    return m.to_numpy(zero_copy_only=False)


def put(texts: pa.Array, positions: np.ndarray, values: pa.Array) -> pa.Array:
    """``texts`` with ``values`` at ``positions`` (sorted), keeping its type."""
    if len(positions) == 0:
        return texts
    mask = np.zeros(len(texts), dtype=bool)
    mask[positions] = True
    return pc.replace_with_mask(texts, pa.array(mask), values.cast(texts.type))
