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

import numpy as np
import pyarrow as pa

CodePoints = Sequence[int | tuple[int, int]]

NO_BIT = -1


def _is_ws(b: np.ndarray) -> np.ndarray:
    return (b == 32) | ((b >= 9) & (b <= 13))


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
        self.lead = lead
        ascii_leads = np.flatnonzero(lead[:0x80])
        self.controls = bool(ascii_leads.size) and bool(
            np.all((ascii_leads < 0x20) | (ascii_leads == 0x7F)))
        self.ascii_leads = [] if self.controls else ascii_leads.tolist()
        self.del_lead = bool(lead[0x7F])
        wide = np.flatnonzero(lead[0x80:])
        self.min_wide = int(wide[0]) + 0x80 if wide.size else None
        self.lo = np.array(lo, dtype=np.int64)
        self.hi = np.array(hi, dtype=np.int64)
        self.gbit = np.array(gbit, dtype=np.int64)
        self.run, self.trail, self.blank = space_run, trailing_space, blank_lines
        self.edge = edge_whitespace

    def __call__(self, texts: pa.Array) -> np.ndarray:
        """Candidate bits per string (0 for nulls)."""
        from cleanpipe.text.byte_kernels import scan  # numba loads on the first scan

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
        base = int(offsets[0])
        bits = np.zeros(len(texts), dtype=np.int64)
        if data.size and offsets[-1] > base:
            aligned = data.ctypes.data % 8 == 0
            words = (data[:data.size // 8 * 8].view(np.uint64) if aligned
                     else np.zeros(0, dtype=np.uint64))
            scan(data, words, offsets, self.lead, self.lo, self.hi, self.gbit, self.run,
                  self.trail, self.blank, self.min_wide is not None, self.controls,
                  self.del_lead, np.array(self.ascii_leads, dtype=np.int64), bits)
            if self.edge != NO_BIT or self.trail != NO_BIT:
                full = np.flatnonzero(offsets[1:] > offsets[:-1])
                first = data[offsets[:-1][full]]
                last = data[offsets[1:][full] - 1]
                if self.edge != NO_BIT:
                    bits[full[_is_ws(first) | _is_ws(last)]] |= 1 << self.edge
                if self.trail != NO_BIT:
                    bits[full[(last == 32) | (last == 9)]] |= 1 << self.trail
        bits = bits.astype(np.uint32)
        if texts.null_count:
            bits[~texts.is_valid().to_numpy(zero_copy_only=False)] = 0
        return bits
