"""Text-field selectors: flatten a (possibly nested) string field to one array, and rebuild it.

A selector is a dotted path whose steps are struct fields, with ``[*]`` after a step that is
a list: ``output``, ``chosen.value``, ``conversations[*].value``, ``messages[*].content``,
``tags[*]``. Stages see one flat string array; the engine puts the rewritten strings back in
place, so the column keeps its exact type, nulls and list lengths.

    >>> import pyarrow as pa
    >>> b = pa.RecordBatch.from_pylist([{"m": [{"c": "a"}, {"c": "b"}]}, {"m": [{"c": "c"}]}])
    >>> values, rows = flatten_field(b, "m[*].c")
    >>> values.to_pylist(), rows.tolist()
    (['a', 'b', 'c'], [0, 0, 1])
    >>> rebuild_field(b, "m[*].c", pa.array(["A", "B", "C"])).column(0).to_pylist()
    [[{'c': 'A'}, {'c': 'B'}], [{'c': 'C'}]]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cleanpipe.columns import is_utf8
from cleanpipe.errors import CleanpipeError

_STEP = re.compile(r"^([^.\[\]]+)((?:\[\*\])*)$")


class FieldError(CleanpipeError, ValueError):
    """A selector does not match the data (message names the selector and what exists):
    exit code 2."""


@dataclass(frozen=True)
class Step:
    name: str
    lists: int  # how many list levels to unnest after taking the field (``a[*][*]`` → 2)

    @property
    def is_list(self) -> bool:
        return self.lists > 0


def parse_selector(selector: str) -> list[Step]:
    """``"messages[*].content"`` → ``[Step('messages', 1), Step('content', 0)]``."""
    steps = []
    for part in selector.split("."):
        m = _STEP.match(part.strip())
        if not m:
            raise FieldError(
                f"bad field selector {selector!r}: use names joined by '.', with [*] after a"
                " list, e.g. 'messages[*].content'"
            )
        steps.append(Step(m.group(1), m.group(2).count("[*]")))
    return steps


def selector_root(selector: str) -> str:
    """The top-level column a selector reads."""
    return parse_selector(selector)[0].name


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t)


def _is_string(t: pa.DataType) -> bool:
    return is_utf8(t) or pa.types.is_string_view(t)


def _describe_struct(t: pa.DataType) -> str:
    return ", ".join(f.name for f in t) if pa.types.is_struct(t) else str(t)


def _child(arr: pa.Array, name: str, selector: str) -> pa.Array:
    if not pa.types.is_struct(arr.type):
        raise FieldError(f"field {selector!r}: {name!r} is read from a {arr.type}, not a struct")
    if arr.type.get_field_index(name) < 0:
        raise FieldError(
            f"field {selector!r}: no key {name!r}; the record has: {_describe_struct(arr.type)}"
        )
    return pc.struct_field(arr, name)


def _list_step(arr: pa.Array, step: Step, selector: str) -> tuple[pa.Array, np.ndarray]:
    if not _is_list(arr.type):
        raise FieldError(
            f"field {selector!r}: {step.name!r} is {arr.type}, not a list; drop the [*]"
        )
    parents = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False)
    return pc.list_flatten(arr), parents.astype(np.int64)


def flatten_field(batch: pa.RecordBatch, selector: str) -> tuple[pa.Array, np.ndarray]:
    """The strings a selector points at, and for each the index of its row in ``batch``."""
    steps = parse_selector(selector)
    first = steps[0]
    idx = batch.schema.get_field_index(first.name)
    if idx < 0:
        cols = ", ".join(batch.schema.names)
        raise FieldError(f"field {selector!r}: no column {first.name!r}; columns: {cols}")
    arr: pa.Array = batch.column(idx)
    rows = np.arange(batch.num_rows, dtype=np.int64)
    for i, step in enumerate(steps):
        if i > 0:
            arr = _child(arr, step.name, selector)
        for _ in range(step.lists):
            arr, parents = _list_step(arr, step, selector)
            rows = rows[parents]
    if pa.types.is_null(arr.type):
        arr = pa.nulls(len(arr), pa.string())
    if not _is_string(arr.type):
        raise FieldError(f"field {selector!r} holds {arr.type}, not strings")
    return arr, rows


def _rebuild(arr: pa.Array, steps: list[Step], new_values: pa.Array, selector: str) -> pa.Array:
    step, rest = steps[0], steps[1:]
    if step.is_list:
        flat = pc.list_flatten(arr)
        if step.lists > 1:
            new_flat = _rebuild(flat, [Step(step.name, step.lists - 1), *rest], new_values,
                                selector)
        else:
            new_flat = _rebuild_inner(flat, rest, new_values, selector)
        lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
        offsets = np.zeros(len(arr) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        mask = arr.is_null() if arr.null_count else None
        if pa.types.is_large_list(arr.type):
            return pa.LargeListArray.from_arrays(
                pa.array(offsets, pa.int64()), new_flat, type=arr.type, mask=mask
            )
        return pa.ListArray.from_arrays(
            pa.array(offsets.astype(np.int32), pa.int32()), new_flat, type=arr.type, mask=mask
        )
    return _rebuild_inner(arr, rest, new_values, selector)


def _rebuild_inner(arr: pa.Array, rest: list[Step], new_values: pa.Array,
                   selector: str) -> pa.Array:
    if not rest:
        if pa.types.is_null(arr.type):
            return arr if new_values.null_count == len(new_values) else new_values
        return new_values.cast(arr.type) if new_values.type != arr.type else new_values
    if not pa.types.is_struct(arr.type):
        raise FieldError(f"field {selector!r}: expected a struct, found {arr.type}")
    nxt = rest[0]
    children = []
    for i, f in enumerate(arr.type):
        child = arr.field(i)
        if f.name == nxt.name:
            child = _rebuild(child, rest, new_values, selector)
        children.append(child)
    mask = arr.is_null() if arr.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(arr.type), mask=mask)


def rebuild_field(batch: pa.RecordBatch, selector: str, new_values: pa.Array) -> pa.RecordBatch:
    """``batch`` with the strings at ``selector`` replaced by ``new_values`` (same order)."""
    steps = parse_selector(selector)
    idx = batch.schema.get_field_index(steps[0].name)
    if idx < 0:
        raise FieldError(f"field {selector!r}: no column {steps[0].name!r}")
    old = batch.column(idx)
    new = _rebuild(old, steps, new_values, selector)
    cols = list(batch.columns)
    cols[idx] = new
    return pa.RecordBatch.from_arrays(cols, schema=batch.schema)


def string_columns(schema: pa.Schema) -> list[str]:
    """Top-level string columns: the default text fields when a pipeline names none."""
    return [f.name for f in schema if _is_string(f.type)]


def discover_text_fields(schema: pa.Schema) -> list[str]:
    """Every string path in ``schema``, nested ones as selectors (``messages[*].content``)."""
    out: list[str] = []

    def walk(t: pa.DataType, prefix: str) -> None:
        if _is_string(t):
            out.append(prefix)
        elif pa.types.is_struct(t):
            for f in t:
                walk(f.type, f"{prefix}.{f.name}")
        elif _is_list(t):
            walk(t.value_type, f"{prefix}[*]")

    for f in schema:
        walk(f.type, f.name)
    return out
