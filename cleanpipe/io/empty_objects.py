"""Store empty JSON objects (``{}``) as null, and say which rows held one.

When every object at a path has no keys (``{"meta": {}}``, ``{"turns": [{}]}``), Arrow
gives that path an empty struct type, ``struct<>``. Parquet cannot store it (a group needs
at least one field), so without this step such a file could be read but never written.

Two other ways were weighed and left: a made-up child field would show ``datasets`` users a
key that is in none of their records, and JSON text (``"{}"``) would turn the column into a
string column that clashes with the same column in a shard where the objects have keys.
A null column joins any other type, so shards still unify; what is lost is only that the
value was ``{}`` and not ``null``, and that is recorded: every row that held an empty object
gets a ``read/empty_object`` event naming the path, and the report counts them.

    >>> import pyarrow as pa
    >>> t = pa.Table.from_pylist([{"meta": {}, "turns": [{}, {}]}, {"meta": None, "turns": []}])
    >>> t.schema.types
    [StructType(struct<>), ListType(list<item: struct<>>)]
    >>> t2, hits = without_empty_objects(t)
    >>> t2.schema.types
    [DataType(null), ListType(list<item: null>)]
    >>> t2.to_pylist()
    [{'meta': None, 'turns': [None, None]}, {'meta': None, 'turns': []}]
    >>> [(h.path, h.rows.tolist()) for h in hits]
    [('meta', [0]), ('turns[*]', [0])]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from cleanpipe.io.schemas import any_type
from cleanpipe.io.type_clashes import child_path


@dataclass
class EmptyObjects:
    """The rows (positions) that held a ``{}`` at ``path``."""

    path: str
    rows: np.ndarray


def has_empty_struct(t: pa.DataType | pa.Schema) -> bool:
    """Whether a type (or any column of a schema) holds ``struct<>`` at some depth.

    >>> has_empty_struct(pa.list_(pa.struct([("a", pa.struct([]))]))), has_empty_struct(pa.int8())
    (True, False)
    """
    return any_type(t, lambda x: pa.types.is_struct(x) and x.num_fields == 0)


def without_empty_objects(table: pa.Table) -> tuple[pa.Table, list[EmptyObjects]]:
    """``table`` with every ``struct<>`` replaced by ``null``, and the rows that held a
    non-null ``{}`` at each such path (positions in ``table``). Tables without one come
    back as they are, at the cost of a look at the schema."""
    if not has_empty_struct(table.schema):
        return table, []
    hits: list[EmptyObjects] = []
    cols, fields = [], []
    for f, col in zip(table.schema, table.columns, strict=True):
        if has_empty_struct(f.type):
            arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
            new, masks = _rebuild(arr, child_path("", f.name))
            hits.extend(EmptyObjects(p, np.flatnonzero(m)) for p, m in masks if m.any())
            col = pa.chunked_array([new], new.type)
            f = pa.field(f.name, new.type, f.nullable, f.metadata)
        cols.append(col)
        fields.append(f)
    return pa.Table.from_arrays(cols, schema=pa.schema(fields, table.schema.metadata)), hits


def _valid(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _rebuild(arr: pa.Array, path: str) -> tuple[pa.Array, list[tuple[str, np.ndarray]]]:
    """``arr`` without ``struct<>``, and per path a mask of the rows of ``arr`` with a
    ``{}`` there (under a valid parent: a null list or object holds no ``{}``)."""
    t = arr.type
    if pa.types.is_struct(t) and t.num_fields == 0:
        return pa.nulls(len(arr)), [(path, _valid(arr))]
    valid = _valid(arr)
    mask = None if arr.null_count == 0 else pa.array(~valid)
    if pa.types.is_struct(t):
        children, fields, masks = [], [], []
        for i in range(t.num_fields):
            f = t.field(i)
            child = arr.field(i)  # adjusted for the array's offset, not for its nulls
            if has_empty_struct(f.type):
                child, sub = _rebuild(child, child_path(path, f.name))
                masks.extend((p, m & valid) for p, m in sub)
            children.append(child)
            fields.append(pa.field(f.name, child.type, f.nullable, f.metadata))
        return pa.StructArray.from_arrays(children, fields=fields, mask=mask), masks
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        # rebased to start at 0: pyarrow builds no list from sliced offsets and a mask
        off = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        values, sub = _rebuild(arr.values.slice(off[0], off[-1] - off[0]), f"{path}[*]")
        off = off - off[0]
        masks = [(p, _parents(m, off, valid)) for p, m in sub]
        item = pa.field(t.value_field.name, values.type, t.value_field.nullable)
        large = pa.types.is_large_list(t)
        new_t = pa.large_list(item) if large else pa.list_(item)
        cls = pa.LargeListArray if large else pa.ListArray
        offsets = pa.array(off, pa.int64() if large else pa.int32())
        return cls.from_arrays(offsets, values, type=new_t, mask=mask), masks
    # fixed-size lists and maps of empty objects cannot come from JSON; other inputs that
    # hold one go through as they are (and the writer says which column it cannot store)
    return arr, []


def _parents(child_mask: np.ndarray, offsets: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Rows of a list array (``offsets``, ``valid``) with a marked value in their list."""
    out = np.zeros(len(valid), dtype=bool)
    pos = np.flatnonzero(child_mask)
    if pos.size:
        rows = np.searchsorted(offsets, pos, side="right") - 1
        out[rows] = True
    return out & valid
