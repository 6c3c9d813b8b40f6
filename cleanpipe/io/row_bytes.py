"""How many bytes each row of a table takes, computed from the row's own values.

The writers close a Parquet row group once it holds a set number of bytes, so a corpus of
long documents does not hold 65,536 of them in memory before its first group is written.
The size of a row must depend on the row alone (not on which batch or slice it arrived
in), or the output's bytes would change with the batch size: string and binary values
count their length, nested values the sum of their elements, fixed-width values their
width, and each value its offset or validity overhead as Arrow lays it out.

    >>> t = pa.table({"text": ["ab", None, "héllo"], "n": [1, 2, 3],
    ...               "msgs": [[{"role": "user", "content": "hi"}], [], None]})
    >>> row_bytes(t).tolist()
    [32, 16, 22]
    >>> row_bytes(t.slice(1)).tolist() == row_bytes(t).tolist()[1:]
    True
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: what a value costs besides its payload: the offset of a variable-size value
_OFFSET = {pa.types.is_string: 4, pa.types.is_binary: 4, pa.types.is_large_string: 8,
           pa.types.is_large_binary: 8, pa.types.is_list: 4, pa.types.is_large_list: 8,
           pa.types.is_map: 4}


def row_bytes(data: pa.Table | pa.RecordBatch) -> np.ndarray:
    """Bytes of each row of ``data`` (int64, one per row)."""
    out = np.zeros(data.num_rows, dtype=np.int64)
    for col in data.columns:
        chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
        if chunks:
            out += np.concatenate([array_bytes(c) for c in chunks])
    return out


def array_bytes(arr: pa.Array) -> np.ndarray:
    """Bytes of each value of ``arr`` (a null costs its offset only)."""
    t = arr.type
    n = len(arr)
    overhead = next((v for test, v in _OFFSET.items() if test(t)), 0)
    if pa.types.is_dictionary(t):
        return array_bytes(arr.dictionary_decode())
    if (pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t)
            or pa.types.is_large_binary(t)):
        lengths = pc.binary_length(arr).fill_null(0)
        return lengths.to_numpy(zero_copy_only=False).astype(np.int64) + overhead
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
            or pa.types.is_map(t)):
        if pa.types.is_map(t):  # the same layout as a list of key/item structs
            arr = pa.ListArray.from_arrays(arr.offsets, arr.values)
        values = pc.list_flatten(arr)
        parents = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False)
        # integer weights below 2**53 sum exactly in float64
        sums = np.bincount(parents, weights=array_bytes(values), minlength=n)
        return sums.astype(np.int64) + overhead
    if pa.types.is_struct(t):
        out = np.zeros(n, dtype=np.int64)
        for child in arr.flatten():
            out += array_bytes(child)
        return out
    if pa.types.is_null(t):
        return np.zeros(n, dtype=np.int64)
    try:
        width = max(1, t.bit_width // 8)
    except ValueError:  # a type without a fixed width that is not handled above
        width = 8
    return np.full(n, width, dtype=np.int64)
