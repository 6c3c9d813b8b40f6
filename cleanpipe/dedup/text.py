"""Per-row document text for dedup: join the configured fields, normalise, pick a shingling.

All of it is pyarrow.compute kernels over whole arrays; the only per-row work is in numba
(:mod:`cleanpipe.dedup.kernels`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from functools import cache
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cleanpipe.contract.stage import BatchContext

#: Scripts written without spaces between words: word shingles would make one "word" of a
#: whole sentence, so these documents get character n-grams.
NO_SPACE_SCRIPTS = (r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}"
                    r"\p{Tibetan}]")
#: Field separator inside a joined document: a control character that never survives
#: normalisation of real text, so "ab"+"c" and "a"+"bc" stay different documents.
FIELD_SEP = "\x1f"

UnicodeForm = Literal["NFC", "NFKC", "NFD", "NFKD", "none"]


def _as_large(arr: pa.Array) -> pa.Array:
    return arr if arr.type == pa.large_string() else arr.cast(pa.large_string())


def row_texts(ctx: BatchContext, fields: Sequence[str] | None, sep: str = FIELD_SEP) -> pa.Array:
    """One string per row: every configured field (nested values joined by ``sep``) joined.

    Missing values count as empty, so a row is never null here.
    """
    n = ctx.batch.num_rows
    names = list(fields) if fields else list(ctx.text_fields)
    if not names:
        raise ValueError("no text fields: give `fields:` or declare the pipeline's text fields")
    parts = [join_by_row(ctx.texts(name).values, ctx.texts(name).rows, n, sep)
             for name in names]
    if len(parts) == 1:
        return parts[0]
    return pc.binary_join_element_wise(*parts, pa.scalar(sep, pa.large_string()))


def join_by_row(values: pa.Array, rows: np.ndarray, n: int, sep: str) -> pa.Array:
    """One string per row of ``n``: the ``values`` of each row (``rows`` non-decreasing,
    as a nested field flattens) joined by ``sep``; a row without values is ``""``.

        >>> join_by_row(pa.array(["a", "b", "c"]), np.array([0, 0, 2]), 3, "|").to_pylist()
        ['a|b', '', 'c']
    """
    values = pc.fill_null(_as_large(values), "")
    if rows.size == n and (n == 0 or bool(np.all(rows == np.arange(n)))):
        return values
    # rows are non-decreasing, so the values already sit in row order and offsets from a
    # bincount rebuild one list per row to join
    counts = np.bincount(rows, minlength=n) if rows.size else np.zeros(n, dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    lists = pa.LargeListArray.from_arrays(pa.array(offsets), values)
    return pc.binary_join(lists, pa.scalar(sep, pa.large_string()))


def normalize(texts: pa.Array, *, lowercase: bool = True, unicode_form: UnicodeForm = "NFKC",
              strip_punctuation: bool = False, collapse_whitespace: bool = True) -> pa.Array:
    """The comparison form of each document (never written back to the data)."""
    out = _as_large(pc.fill_null(texts, ""))
    if isinstance(out, pa.ChunkedArray):
        out = out.combine_chunks()
    if unicode_form != "none":
        # utf8_normalize runs at ~20 MB/s, so it gets only the rows that can change: a quick
        # check over the whole array (a compiled regex) passes every row whose characters
        # are all stable under the form (ASCII, most CJK, curly quotes...).
        # ASCII rows are skipped first: is_ascii is far cheaper than the regex.
        other = np.flatnonzero(~pc.string_is_ascii(out).to_numpy(zero_copy_only=False))
        if other.size:
            hit = pc.match_substring_regex(out.take(pa.array(other)),
                                           unstable_class(unicode_form))
            rows = other[hit.to_numpy(zero_copy_only=False)]
            if rows.size:
                mask = np.zeros(len(out), dtype=bool)
                mask[rows] = True
                fixed = pc.utf8_normalize(out.take(pa.array(rows)), unicode_form)
                out = pc.replace_with_mask(out, pa.array(mask), fixed)
    if lowercase:
        out = pc.utf8_lower(out)
    if strip_punctuation:
        out = pc.replace_substring_regex(out, r"[\p{P}\p{S}]+", " ")
    if collapse_whitespace:
        # Compiled: RE2's [\s\p{Z}]+ replace is ~20x slower on the t0 corpus. FIELD_SEP is
        # kept, so field boundaries survive for exact hashing.
        from cleanpipe.dedup.kernels import collapse_whitespace as collapse

        data, offsets = buffers(out)
        new_data, new_off = collapse(data, offsets, ord(FIELD_SEP))
        out = pa.LargeStringArray.from_buffers(len(out), pa.py_buffer(new_off),
                                               pa.py_buffer(new_data))
    return out


@cache
def unstable_class(form: str) -> str:
    """An RE2 character class of every character that normalisation ``form`` may change.

    A string made only of the other characters is already normalised (Unicode's quick
    check answers YES): each of them is its own normal form, has canonical combining class
    0 (so no reordering) and is never the second half of a canonical composition (so it
    cannot merge with what precedes it; Hangul vowel and trailing jamo compose
    algorithmically and count as unstable). Everything outside the BMP counts as unstable,
    which only costs speed. Built once per process from :mod:`unicodedata` (~60 ms).
    """
    second: set[int] = set()
    for cp in range(0x80, 0x10000):
        dec = unicodedata.decomposition(chr(cp))
        if dec and not dec.startswith("<"):
            parts = dec.split()
            if len(parts) == 2:
                second.add(int(parts[1], 16))
    unstable = []
    for cp in range(0x80, 0x10000):
        ch = chr(cp)
        if (0xD800 <= cp <= 0xDFFF or cp in second or 0x1161 <= cp <= 0x1175
                or 0x11A8 <= cp <= 0x11C2 or unicodedata.combining(ch)
                or unicodedata.normalize(form, ch) != ch):  # type: ignore[arg-type]
            unstable.append(cp)
    ranges: list[list[int]] = []
    for cp in unstable:
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    body = "".join(f"\\x{{{lo:X}}}" if lo == hi else f"\\x{{{lo:X}}}-\\x{{{hi:X}}}"
                   for lo, hi in ranges)
    return f"[{body}\\x{{10000}}-\\x{{10FFFF}}]"


def shingle_modes(texts: pa.Array, shingle: Literal["auto", "word", "char"],
                  cjk_ratio: float) -> np.ndarray:
    """0 (word n-grams) or 1 (character n-grams) per document."""
    n = len(texts)
    if shingle == "word":
        return np.zeros(n, dtype=np.int8)
    if shingle == "char":
        return np.ones(n, dtype=np.int8)
    # ASCII rows have no such characters: count only in the others (the regex is the cost).
    no_space = np.zeros(n, dtype=np.int64)
    other = np.flatnonzero(~pc.string_is_ascii(texts).to_numpy(zero_copy_only=False))
    if other.size:
        no_space[other] = pc.count_substring_regex(texts.take(pa.array(other)),
                                                   NO_SPACE_SCRIPTS).to_numpy(
                                                       zero_copy_only=False)
    length = pc.utf8_length(texts).to_numpy(zero_copy_only=False)
    return (no_space >= cjk_ratio * np.maximum(length, 1)).astype(np.int8) & (length > 0)


def buffers(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The UTF-8 bytes and int64 offsets of a large_string array (zero-copy)."""
    arr = _as_large(texts)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    _validity, off_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int64, count=len(arr) + 1, offset=arr.offset * 8)
    if data_buf is None:
        return np.zeros(0, dtype=np.uint8), offsets
    return np.frombuffer(data_buf, dtype=np.uint8), offsets


def python_shingles(text: str, mode: int, n_word: int, n_char: int) -> list[bytes]:
    """Reference shingling of one normalised document, in plain Python.

    The shingle set the bulk kernels hash; feed it to ``datasketch.MinHash.update_batch`` to
    get the same signature (slow: for tests and for users who want to reuse signatures).
    """
    if not text:
        return []
    if mode == 0:
        words = text.split(" ")
        if len(words) <= n_word:
            return [text.encode("utf-8")]
        return [" ".join(words[i:i + n_word]).encode("utf-8")
                for i in range(len(words) - n_word + 1)]
    if len(text) <= n_char:
        return [text.encode("utf-8")]
    return [text[i:i + n_char].encode("utf-8") for i in range(len(text) - n_char + 1)]
