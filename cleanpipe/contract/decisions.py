"""A global stage's decisions as a table, so they can be computed in one place and applied
in another.

``decide`` of the dedup stages reports, for the rows of a batch, which are duplicates (of
which row) or copies of a reference set. Written as rows ``(seq, code, detail)`` those
decisions can come from the stage's own in-memory state (local engine) or from a
distributed computation joined to each chunk (Ray engine); :func:`decisions_at` turns
either into the same findings.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

#: ``decide``'s findings as a table: one row per (row, code), the detail shown in events
DECISIONS = pa.schema([("seq", pa.int64()), ("code", pa.string()), ("detail", pa.string())])


def decisions_table(seq: np.ndarray, codes: list[str], details: list[str]) -> pa.Table:
    return pa.table([pa.array(np.asarray(seq, np.int64)), pa.array(codes, pa.string()),
                     pa.array(details, pa.string())], schema=DECISIONS)


def decisions_at(table: pa.Table, seq: np.ndarray,
                 codes: tuple[str, ...]) -> dict[str, tuple[np.ndarray, list[str]]]:
    """Per code of ``codes``, in that order, the batch positions of ``table``'s rows among
    ``seq`` in row order, with their details. Rows of other batches are ignored.

        >>> t = decisions_table(np.array([7, 5, 9]), ["near_duplicate"] * 2 +
        ...                     ["contaminated_near"], ["b", "a", "c"])
        >>> decisions_at(t, np.array([5, 6, 7]), ("near_duplicate", "contaminated_near"))
        {'near_duplicate': (array([0, 2]), ['a', 'b'])}
    """
    seq = np.asarray(seq, dtype=np.int64)
    order = np.argsort(seq, kind="stable")
    sorted_seq = seq[order]
    t_seq = table.column("seq").to_numpy()
    at = np.searchsorted(sorted_seq, t_seq)
    ok = at < seq.size
    ok[ok] = sorted_seq[at[ok]] == t_seq[ok]
    t_codes = np.asarray(table.column("code").to_pylist(), dtype=object)
    details = table.column("detail").to_pylist()
    out: dict[str, tuple[np.ndarray, list[str]]] = {}
    for code in codes:
        rows = (np.flatnonzero(ok & (t_codes == code)) if t_codes.size
                else np.zeros(0, np.int64))
        if rows.size == 0:
            continue
        pos = order[at[rows]]
        by_pos = np.argsort(pos, kind="stable")
        out[code] = (pos[by_pos], [details[k] for k in rows[by_pos]])
    return out


def reference_name(offsets: list[tuple[int, str]], idx: int) -> str:
    """``"<reference> row k"`` of combined index ``idx``, given each reference's start."""
    name, base = "reference", 0
    for start, ref_name in offsets:
        if idx >= start:
            name, base = ref_name, start
    return f"{name} row {idx - base}"


