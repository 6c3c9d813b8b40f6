"""One compiled pass over an Arrow string array's UTF-8 bytes: which rules *may* fire where.

The character stages used to find their candidate strings with one or more RE2 passes over
the whole array. Most strings hold nothing any rule looks at, so a single byte scan that
answers "could rule *k* match string *i*?" for every rule at once, and then RE2 on only the
strings it names, does the same work at a fraction of the cost.

A scan returns one ``uint32`` per string; bit *k* set means rule *k* may match it. It must
never miss (a clear bit is a promise); a set bit is only a candidate that RE2 confirms.
Two kinds of bits:

* code-point groups: the string holds a code point of the group (exact for valid UTF-8);
* ASCII context checks for ``whitespace``: two spaces/tabs in a row (``space_run``), a
  space/tab before ``\\n`` or the end (``trailing_space``), ``\\n\\n\\n`` (``blank_lines``)
  and whitespace as the first or last byte (``edge_whitespace``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np
import pyarrow as pa

CodePoints = Sequence[int | tuple[int, int]]

NO_BIT = -1


_SP, _NL, _LEAD = 1, 2, 3


@numba.njit(cache=True, nogil=True)
def _scan(data, offsets, cls, flag, lo, hi, gbit, edge_b, trail_b):  # pragma: no cover
    # cls: byte → class (0 nothing, 1 space/tab, 2 newline, 3 lead byte of a wanted code
    # point). The classes of the last three bytes, two bits each, index ``flag``, which holds
    # the context bits they imply; this keeps the per-byte work free of data-dependent
    # branches (spaces are frequent and unpredictable).
    n = offsets.size - 1
    out = np.zeros(n, dtype=np.int64)
    nr = lo.size
    one = np.int64(1)
    for i in range(n):
        start = offsets[i]
        end = offsets[i + 1]
        if start == end:
            continue
        bits = np.int64(0)
        f = data[start]
        la = data[end - 1]
        if edge_b >= 0 and (f == 32 or (9 <= f <= 13) or la == 32 or (9 <= la <= 13)):
            bits |= one << edge_b
        if trail_b >= 0 and (la == 32 or la == 9):
            bits |= one << trail_b
        h = 0
        for j in range(start, end):
            b = data[j]
            c = cls[b]
            h = ((h << 2) | c) & 63
            bits |= flag[h]
            if c == 3:
                # Decode the code point starting here. Only ASCII and lead bytes have class
                # 3, never continuation bytes, so every byte may be tested.
                if b < 0x80:
                    cp = np.int64(b)
                elif b < 0xE0:
                    if j + 1 >= end:
                        continue
                    cp = (np.int64(b & 0x1F) << 6) | np.int64(data[j + 1] & 0x3F)
                elif b < 0xF0:
                    if j + 2 >= end:
                        continue
                    cp = ((np.int64(b & 0x0F) << 12) | (np.int64(data[j + 1] & 0x3F) << 6)
                          | np.int64(data[j + 2] & 0x3F))
                else:
                    if j + 3 >= end:
                        continue
                    cp = ((np.int64(b & 0x07) << 18) | (np.int64(data[j + 1] & 0x3F) << 12)
                          | (np.int64(data[j + 2] & 0x3F) << 6)
                          | np.int64(data[j + 3] & 0x3F))
                for r in range(nr):
                    if lo[r] <= cp <= hi[r]:
                        bits |= one << gbit[r]
        out[i] = bits
    return out


def _lead_byte(cp: int) -> int:
    return chr(cp).encode("utf-8", "surrogatepass")[0]


class ByteScan:
    """A compiled candidate scan: code-point groups plus optional whitespace context bits.

        >>> scan = ByteScan([[0x200B], [(0x2028, 0x2029)]])
        >>> import pyarrow as pa
        >>> scan(pa.array(["plain", "zero\\u200bwidth", None, "a\\u2029b\\u200b"])).tolist()
        [0, 1, 0, 3]
    """

    def __init__(self, groups: Sequence[CodePoints], *, space_run: int = NO_BIT,
                 trailing_space: int = NO_BIT, blank_lines: int = NO_BIT,
                 edge_whitespace: int = NO_BIT) -> None:
        lo: list[int] = []
        hi: list[int] = []
        gbit: list[int] = []
        lead = np.zeros(256, dtype=np.bool_)
        for k, group in enumerate(groups):
            for it in group:
                a, b = it if isinstance(it, tuple) else (it, it)
                lo.append(a)
                hi.append(b)
                gbit.append(k)
                for cp in range(a, b + 1):
                    lead[_lead_byte(cp)] = True
        if lead[[9, 10, 32]].any() and (space_run, trailing_space, blank_lines) != (NO_BIT,) * 3:
            raise ValueError("code-point groups cannot hold tab, newline or space "
                             "together with the whitespace context bits")
        cls = np.where(lead, _LEAD, 0).astype(np.uint8)
        if space_run != NO_BIT or trailing_space != NO_BIT:
            cls[[9, 32]] = _SP
        if trailing_space != NO_BIT or blank_lines != NO_BIT:
            cls[10] = _NL
        flag = np.zeros(64, dtype=np.int64)
        for h in range(64):
            prev2, prev1, cur = h >> 4, (h >> 2) & 3, h & 3
            if space_run != NO_BIT and prev1 == _SP and cur == _SP:
                flag[h] |= 1 << space_run
            if trailing_space != NO_BIT and prev1 == _SP and cur == _NL:
                flag[h] |= 1 << trailing_space
            if blank_lines != NO_BIT and prev2 == prev1 == cur == _NL:
                flag[h] |= 1 << blank_lines
        self.cls = cls
        self.flag = flag
        self.lo = np.array(lo, dtype=np.int64)
        self.hi = np.array(hi, dtype=np.int64)
        self.gbit = np.array(gbit, dtype=np.int64)
        self.edge = edge_whitespace
        self.trail = trailing_space

    def __call__(self, texts: pa.Array) -> np.ndarray:
        """Candidate bits per string (0 for nulls)."""
        if isinstance(texts, pa.ChunkedArray):
            texts = texts.combine_chunks()
        if len(texts) == 0:
            return np.zeros(0, dtype=np.uint32)
        if not pa.types.is_large_string(texts.type) and not pa.types.is_large_binary(
                texts.type):
            texts = texts.cast(pa.large_binary() if pa.types.is_binary(texts.type)
                               else pa.large_string())
        bufs = texts.buffers()
        offsets = np.frombuffer(bufs[1], dtype=np.int64, count=len(texts) + 1,
                                offset=texts.offset * 8)
        data = (np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None
                else np.zeros(0, dtype=np.uint8))
        bits = _scan(data, offsets, self.cls, self.flag, self.lo, self.hi, self.gbit,
                     self.edge, self.trail).astype(np.uint32)
        if texts.null_count:
            bits[~texts.is_valid().to_numpy(zero_copy_only=False)] = 0
        return bits
