"""Unify the schemas of shards where that loses nothing; otherwise say which files disagree.

Lossless here means: a column missing from a shard becomes nulls, a ``null`` column takes
the other shard's type, integers widen, ``string`` widens to ``large_string``, structs take
the union of their keys. A column that is a string in one file and a number in another is an
error naming both files.

    >>> a = pa.schema([("x", pa.int32()), ("y", pa.null())])
    >>> b = pa.schema([("x", pa.int64()), ("y", pa.string()), ("z", pa.string())])
    >>> unify_schemas([("a.jsonl", a), ("b.jsonl", b)])
    x: int64
    y: string
    z: string
    >>> unify_schemas([("a.jsonl", a), ("c.jsonl", pa.schema([("x", pa.string())]))])
    Traceback (most recent call last):
    ...
    cleanpipe.io.errors.InputError: column 'x' is int32 in a.jsonl but string in c.jsonl; ...
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa

from cleanpipe.columns import is_utf8
from cleanpipe.fields import FieldError, parse_selector, selector_root
from cleanpipe.io.sources import InputError


def nested_types(t: pa.DataType | pa.Schema) -> Iterator[tuple[pa.DataType, int]]:
    """Every type in a type (or in a schema's columns), with its depth (1: the type itself,
    or a column): struct fields, list values, map keys and items. Iterative, so data nested
    past Python's recursion limit is walked too.

    >>> [(str(x), d) for x, d in nested_types(pa.list_(pa.struct([("a", pa.int8())])))]
    [('list<item: struct<a: int8>>', 1), ('struct<a: int8>', 2), ('int8', 3)]
    """
    stack = [(f.type, 1) for f in t] if isinstance(t, pa.Schema) else [(t, 1)]
    while stack:
        x, d = stack.pop()
        yield x, d
        if pa.types.is_struct(x):
            stack.extend((x.field(i).type, d + 1) for i in range(x.num_fields))
        elif pa.types.is_list(x) or pa.types.is_large_list(x) or pa.types.is_fixed_size_list(x):
            stack.append((x.value_type, d + 1))
        elif pa.types.is_map(x):
            stack.extend(((x.key_type, d + 1), (x.item_type, d + 1)))


def any_type(t: pa.DataType | pa.Schema, pred: Callable[[pa.DataType], bool]) -> bool:
    """Whether ``pred`` holds for any of :func:`nested_types`.

    >>> any_type(pa.schema([("m", pa.list_(pa.struct([("x", pa.float64())])))]),
    ...          pa.types.is_floating)
    True
    """
    return any(pred(x) for x, _ in nested_types(t))


def _unify_pair(a: pa.Schema, b: pa.Schema) -> pa.Schema:
    return pa.unify_schemas([a, b], promote_options="permissive")


def _lossy(old: pa.DataType, new: pa.DataType) -> bool:
    """Permissive promotion also turns int into float or into string-like; we refuse those."""
    if pa.types.is_integer(old) and not pa.types.is_integer(new):
        return True
    if (pa.types.is_floating(old) or pa.types.is_boolean(old)) and (
            is_utf8(new)):
        return True
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        for f in old:
            idx = new.get_field_index(f.name)
            if idx >= 0 and _lossy(f.type, new.field(idx).type):
                return True
    if (pa.types.is_list(old) or pa.types.is_large_list(old)) and (
            pa.types.is_list(new) or pa.types.is_large_list(new)):
        return _lossy(old.value_type, new.value_type)
    return False


def unify_schemas(named: list[tuple[str, pa.Schema]]) -> pa.Schema:
    """One schema for all ``(shard name, schema)`` pairs, or :class:`InputError`."""
    named = [(n, s) for n, s in named if len(s)]
    if not named:
        return pa.schema([])
    result = named[0][1]
    owner = {f.name: named[0][0] for f in result}
    for name, schema in named[1:]:
        if schema.equals(result):
            continue
        try:
            merged = _unify_pair(result, schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            merged = None
        bad = None
        for f in schema:
            if f.name not in owner:
                owner[f.name] = name
                continue
            old = result.field(f.name).type
            if merged is None:
                try:
                    _unify_pair(pa.schema([result.field(f.name)]), pa.schema([f]))
                except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                    bad = f
                    break
            else:
                new = merged.field(f.name).type
                if not pa.types.is_null(old) and not pa.types.is_null(f.type) and (
                        _lossy(old, new) or _lossy(f.type, new)):
                    bad = f
                    break
        if bad is not None:
            old = result.field(bad.name).type
            raise InputError(
                f"column {bad.name!r} is {old} in {owner[bad.name]} but {bad.type} in {name};"
                " make it one type in every file (or read the files in separate runs)"
            )
        assert merged is not None
        for f in merged:
            if pa.types.is_null(result.field(f.name).type) if f.name in result.names else True:
                owner.setdefault(f.name, name)
        result = merged
    return result


def cast_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` in ``schema``: missing columns become nulls, columns reordered and widened."""
    if batch.schema.equals(schema):
        return batch
    cols = []
    for f in schema:
        idx = batch.schema.get_field_index(f.name)
        if idx < 0:
            cols.append(pa.nulls(batch.num_rows, f.type))
        else:
            col = batch.column(idx)
            cols.append(col if col.type.equals(f.type) else col.cast(f.type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def unify_tables(tables: list[pa.Table], names: list[str]) -> pa.Table:
    schema = unify_schemas([(n, t.schema) for n, t in zip(names, tables, strict=True)])
    batches = []
    for t in tables:
        for b in t.to_batches():
            batches.append(cast_batch(b, schema))
    return pa.Table.from_batches(batches, schema=schema)


def selector_type(selector: str) -> pa.DataType:
    """The least type that holds a text field at ``selector``: what its column is in a file
    where no record has it.

        >>> selector_type("input")
        DataType(string)
        >>> selector_type("messages[*].content")
        ListType(list<item: struct<content: string>>)
    """
    steps = parse_selector(selector)
    t: pa.DataType = pa.string()
    for step in reversed(steps[1:]):
        for _ in range(step.lists):
            t = pa.list_(t)
        t = pa.struct([(step.name, t)])
    for _ in range(steps[0].lists):
        t = pa.list_(t)
    return t


def with_text_fields(batch: pa.RecordBatch, selectors: list[str]) -> pa.RecordBatch:
    """``batch`` with a column of nulls for each text field whose column it lacks.

    A field missing from a whole file reads as a key missing from each of its records does:
    null (the ``schema`` stage decides whether a row may lack it), so shards written with and
    without an optional field (alpaca files often omit ``input``) are one dataset. The added
    column is the least type for the selectors (:func:`selector_type`); the writer unifies
    it with the other files' type, as for any missing key. Columns come after the file's own,
    in the order of ``selectors``, so the result depends on the file and the config alone.

        >>> b = pa.RecordBatch.from_pylist([{"instruction": "hi", "output": "yo"}])
        >>> with_text_fields(b, ["instruction", "input", "output"]).to_pylist()
        [{'instruction': 'hi', 'output': 'yo', 'input': None}]
    """
    missing: dict[str, pa.DataType] = {}
    names = set(batch.schema.names)
    for sel in selectors:
        root = selector_root(sel)
        if root in names:
            continue
        t = selector_type(sel)
        if root in missing:  # two selectors into one absent column: the union of both
            t = _unify_pair(pa.schema([(root, missing[root])]), pa.schema([(root, t)])).field(
                root).type
        missing[root] = t
    if not missing:
        return batch
    arrays = [*batch.columns, *(pa.nulls(batch.num_rows, t) for t in missing.values())]
    fields = [*batch.schema, *(pa.field(n, t) for n, t in missing.items())]
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def check_fields_seen(selectors: list[str], seen: set[str]) -> None:
    """A :class:`FieldError` for text fields no input file has: a name that is in no file
    is a typo in ``fields:``, not an optional field.

        >>> check_fields_seen(["text", "lable"], {"text", "label"})
        Traceback (most recent call last):
        ...
        cleanpipe.fields.FieldError: text field 'lable' is in no input file; columns: label, text
    """
    absent = [s for s in selectors if selector_root(s) not in seen]
    if absent:
        raise FieldError(f"text field {absent[0]!r} is in no input file; columns:"
                         f" {', '.join(sorted(seen))}")
