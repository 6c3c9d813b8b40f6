"""The compiled kernel of :class:`~cleanpipe.text.byte_scan.ByteScan`, in a module of its
own so that it loads only when a stage first scans, not when the stage is imported (and numba
only where no ahead-of-time twin fits: :mod:`cleanpipe.precompiled`).
"""

from __future__ import annotations

import numpy as np

from cleanpipe.precompiled import ahead_of_time, njit


@njit(cache=True, nogil=True, inline="always")
def _byte_bits(data, p, end, lead, lo, hi, gbit, run_b, trail_b, blank_b):  # pragma: no cover
    # The bits byte ``p`` (in a string ending at ``end``) proves.
    one = np.int64(1)
    bits = np.int64(0)
    b = data[p]
    if b == 32 or b == 9:
        if p + 1 < end:
            nx = data[p + 1]
            if run_b >= 0 and (nx == 32 or nx == 9):
                bits |= one << run_b
            if trail_b >= 0 and nx == 10:
                bits |= one << trail_b
    elif b == 10:
        if blank_b >= 0 and p + 2 < end and data[p + 1] == 10 and data[p + 2] == 10:
            bits |= one << blank_b
    if not lead[b]:
        return bits
    # Decode the code point starting here. ``lead`` holds only ASCII and lead bytes, never
    # continuation bytes, so any byte may be tested.
    if b < 0x80:
        cp = np.int64(b)
    elif b < 0xE0:
        if p + 1 >= end:
            return bits
        cp = (np.int64(b & 0x1F) << 6) | np.int64(data[p + 1] & 0x3F)
    elif b < 0xF0:
        if p + 2 >= end:
            return bits
        cp = ((np.int64(b & 0x0F) << 12) | (np.int64(data[p + 1] & 0x3F) << 6)
              | np.int64(data[p + 2] & 0x3F))
    else:
        if p + 3 >= end:
            return bits
        cp = ((np.int64(b & 0x07) << 18) | (np.int64(data[p + 1] & 0x3F) << 12)
              | (np.int64(data[p + 2] & 0x3F) << 6) | np.int64(data[p + 3] & 0x3F))
    for r in range(lo.size):
        if lo[r] <= cp <= hi[r]:
            bits |= one << gbit[r]
    return bits


@njit(cache=True, nogil=True, inline="always")
def _zero_bytes(x):  # pragma: no cover - compiled
    # High bit set in exactly the bytes of ``x`` that are zero.
    lo7 = np.uint64(0x7F7F7F7F7F7F7F7F)
    return ~(((x & lo7) + lo7) | x | lo7)


@ahead_of_time("void(u1[:], u8[:], i8[:], b1[:], i8[:], i8[:], i8[:], i8, i8, i8, b1,"
               " b1, b1, i8[:], i8[:])")
@njit(cache=True, nogil=True)
def scan(data, words, offsets, lead, lo, hi, gbit, run_b, trail_b, blank_b, wide, controls,
          del_lead, ascii_leads, out):  # pragma: no cover - compiled
    # Eight bytes at a time (SWAR): a few integer operations tell whether a word can hold
    # anything; only such words are looked at byte by byte. ``words`` views ``data`` from
    # byte 0 (its address is 8-aligned) or is empty, which means every byte is examined.
    ones = np.uint64(0x0101010101010101)
    high = np.uint64(0x8080808080808080)
    eight = np.uint64(8)
    n = offsets.size - 1
    start = offsets[0]
    stop = offsets[n]
    ctx = run_b >= 0 or trail_b >= 0 or blank_b >= 0
    i = 0
    p = start
    top = np.uint64(1) << np.uint64(63)
    while p < stop:
        w = p >> 3
        if words.size and (p & 7) == 0 and w < words.size and p + 8 <= stop:
            x = words[w]
            # ``m``: high bit set in each byte that needs a look (never misses one).
            m = np.uint64(0)
            if wide:
                m |= x & high
            if controls:
                # Bytes < 0x20 (borrows may add bytes above a hit, never drop one).
                m |= (x - ones * np.uint64(0x20)) & ~x & high
                if del_lead:
                    m |= _zero_bytes(x ^ (ones * np.uint64(0x7F)))
            for v in ascii_leads:
                m |= _zero_bytes(x ^ (ones * np.uint64(v)))
            if ctx:
                zs = _zero_bytes(x ^ (ones * np.uint64(32)))
                zs |= _zero_bytes(x ^ (ones * np.uint64(9)))
                zn = _zero_bytes(x ^ (ones * np.uint64(10)))
                # The byte after the word's last one, for pairs across the boundary.
                nxt_s = np.uint64(0)
                nxt_n = np.uint64(0)
                if p + 8 < stop:
                    nb = data[p + 8]
                    if nb == 32 or nb == 9:
                        nxt_s = top
                    elif nb == 10:
                        nxt_n = top
                either_next = ((zs | zn) >> eight) | nxt_s | nxt_n
                m |= zs & either_next
                m |= zn & ((zn >> eight) | nxt_n)
            if m == 0:
                p += 8
                continue
            for j in range(8):
                if (m >> np.uint64(8 * j + 7)) & np.uint64(1):
                    q = p + j
                    while offsets[i + 1] <= q:
                        i += 1
                    bits = _byte_bits(data, q, offsets[i + 1], lead, lo, hi, gbit, run_b,
                                      trail_b, blank_b)
                    if bits:
                        out[i] |= bits
            p += 8
            continue
        while offsets[i + 1] <= p:
            i += 1
        bits = _byte_bits(data, p, offsets[i + 1], lead, lo, hi, gbit, run_b, trail_b,
                          blank_b)
        if bits:
            out[i] |= bits
        p += 1
