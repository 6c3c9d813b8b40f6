"""Columns as the checking stages expect them, whatever a batch happened to hold."""

from __future__ import annotations

import pyarrow as pa


def typed_nulls(col: pa.Array, value_type: pa.DataType, lists: bool = False) -> pa.Array:
    """``col`` with an all-null type given ``value_type`` (a list of it with ``lists``).

    A JSON batch where a column holds only nulls reads as Arrow type ``null`` (or a list of
    ``null``); its rows are null values all the same, and must be judged as they are in any
    other batch: the output may not depend on how the input was batched.

        >>> typed_nulls(pa.array([None, None]), pa.string()).type
        DataType(string)
        >>> typed_nulls(pa.array([None]), pa.int64(), lists=True).type
        ListType(list<item: int64>)
        >>> typed_nulls(pa.array([[None], None]), pa.int64()).type
        ListType(list<item: int64>)
        >>> typed_nulls(pa.array([1, None]), pa.string()).type
        DataType(int64)
    """
    if pa.types.is_null(col.type):
        return col.cast(pa.list_(value_type) if lists else value_type)
    if pa.types.is_list(col.type) and pa.types.is_null(col.type.value_type):
        return col.cast(pa.list_(value_type))
    if pa.types.is_large_list(col.type) and pa.types.is_null(col.type.value_type):
        return col.cast(pa.large_list(value_type))
    return col


def is_utf8(t: pa.DataType) -> bool:
    """Whether ``t`` is an Arrow string type with offsets (``string`` or ``large_string``).

        >>> is_utf8(pa.large_string()), is_utf8(pa.binary()), is_utf8(pa.string_view())
        (True, False, False)
    """
    return pa.types.is_string(t) or pa.types.is_large_string(t)
