"""Find the JSON values whose type clashes with the rest of their column.

A column of a training set must have one type: a trainer (or ``datasets``) cannot take a
``label`` that is a number in one row and a string in the next, nor a ``meta.tags`` that is
a list here and an object there. When the records of a file do not fit one Arrow type, the
records holding a *minority* type at some path (the type fewer values at that path have) are
the odd ones out: the reader quarantines them and keeps the rest, so one odd record costs
that record, not the file.

Paths use the field selector style: ``meta.tags[*]`` is each element of the list under key
``tags`` of the object under ``meta``. ``null`` fits every type, an empty list fits every
list and an empty object every object; integers and floats are both numbers (Arrow reads
them as ``double`` together).

    >>> recs = [{"x": 1, "m": {"a": [1]}}, {"x": "s", "m": {"a": [2]}}, {"x": 3, "m": {"a": {}}},
    ...         {"x": 4, "m": {"a": [3, "t"]}}, {"x": None}]
    >>> for clash in first_clashes(recs):
    ...     print(clash)
    None
    'x' is a string here but a number in most records
    'm.a' is an object here but an array in most records
    'm.a[*]' is a string here but a number in most records
    None
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


def json_kind(v: Any) -> str:
    """The JSON type of a parsed value: ``object``, ``array``, ``string``, ``number``,
    ``boolean`` or ``null``.

    >>> [json_kind(v) for v in ({}, [], "", 1, 1.5, True, None)]
    ['object', 'array', 'string', 'number', 'number', 'boolean', 'null']
    """
    if isinstance(v, bool):  # before int: bool is an int subclass
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return "null"


@dataclass(frozen=True)
class Clash:
    """A value of ``kind`` at ``path`` where most values at that path are ``usual``."""

    path: str
    kind: str
    usual: str

    def __str__(self) -> str:
        return f"{self.path!r} is {_a(self.kind)} here but {_a(self.usual)} in most records"


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def child_path(path: str, key: str) -> str:
    """The path of ``key`` inside the object at ``path`` (odd keys are quoted).

    >>> child_path("", "meta"), child_path("meta", "a"), child_path("meta", "a b")
    ('meta', 'meta.a', 'meta["a b"]')
    """
    if key.isidentifier():
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _kinds(record: dict[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """``(path, kind, value)`` of every non-null value under ``record``, in document order.

    A stack, not recursion: records are walked after the depth check, but a stack costs
    nothing and cannot overflow.
    """
    stack: list[tuple[str, Any]] = [(child_path("", k), v) for k, v in reversed(record.items())]
    while stack:
        path, v = stack.pop()
        kind = json_kind(v)
        if kind == "null":
            continue
        yield path, kind, v
        if kind == "object":
            stack.extend((child_path(path, k), x) for k, x in reversed(v.items()))
        elif kind == "array":
            item = f"{path}[*]"
            stack.extend((item, x) for x in reversed(v))


def first_clashes(records: list[dict[str, Any]]) -> list[Clash | None]:
    """For each record, its first value whose type is not the usual one at its path.

    The usual type at a path is the one most values there have; a tie goes to the type met
    first in file order, so the choice depends on the records alone.
    """
    counts: dict[str, dict[str, int]] = {}
    for rec in records:
        for path, kind, _ in _kinds(rec):
            c = counts.setdefault(path, {})
            c[kind] = c.get(kind, 0) + 1
    # max() keeps the first of equal counts, and dicts keep insertion (file) order
    usual = {p: max(c, key=c.__getitem__) for p, c in counts.items() if len(c) > 1}
    if not usual:
        return [None] * len(records)
    out: list[Clash | None] = []
    for rec in records:
        clash = None
        for path, kind, _ in _kinds(rec):
            if path in usual and kind != usual[path]:
                clash = Clash(path, kind, usual[path])
                break
        out.append(clash)
    return out


INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
#: integers up to this size are exact as a 64-bit float; a larger one in a column of floats
#: would be stored rounded (9223372036854775807 as 9223372036854775808.0)
FLOAT_EXACT = 2 ** 53


class HugeNumber(float):
    """A JSON number too large for a 64-bit float (``1e400``): Python reads it as ±inf,
    which is another value; this keeps the text as written so the record can say so.

    >>> h = json.loads("[1e400]", parse_float=parse_float)[0]
    >>> isinstance(h, HugeNumber), h.text, h
    (True, '1e400', inf)
    """

    text: str

    def __new__(cls, text: str) -> HugeNumber:
        obj = super().__new__(cls, text)
        obj.text = text
        return obj


def parse_float(text: str) -> float:
    """``json``'s ``parse_float`` hook: a float, or a :class:`HugeNumber` when it overflows."""
    v = float(text)
    return v if math.isfinite(v) else HugeNumber(text)


def first_out_of_range(record: dict[str, Any], floats: frozenset[str] = frozenset()
                       ) -> str | None:
    """What the first number that cannot be stored as written is, or None.

    JSON has no limit on numbers; Arrow and Parquet store them in 64 bits. An integer over
    64 bits, a number beyond a 64-bit float, and an integer over 2**53 at a path where other
    records hold floats (the column is float, which would round it) cannot be stored.

    >>> first_out_of_range({"a": 1, "b": [2, 2 ** 64]})
    "'b[*]' holds the integer 18446744073709551616, which does not fit in 64 bits"
    >>> first_out_of_range({"a": -2 ** 63}), first_out_of_range({"a": 2 ** 60})
    (None, None)
    >>> first_out_of_range({"a": 2 ** 60}, frozenset({"a"}))
    "'a' holds the integer 1152921504606846976, which a column of floats cannot store exactly"
    """
    for path, kind, v in _kinds(record):
        if kind != "number":
            continue
        if isinstance(v, HugeNumber):
            return f"{path!r} holds the number {v.text}, beyond the range of a 64-bit float"
        if not isinstance(v, int):
            continue
        if not INT64_MIN <= v <= INT64_MAX:
            return f"{path!r} holds the integer {v}, which does not fit in 64 bits"
        if path in floats and abs(v) > FLOAT_EXACT:
            return f"{path!r} holds the integer {v}, which a column of floats cannot store exactly"
    return None


def float_paths(records: list[dict[str, Any]]) -> frozenset[str]:
    """The paths where some record holds a float that can be stored (a
    :class:`HugeNumber` cannot, so it makes no column float).

    >>> sorted(float_paths([{"a": 1, "b": {"c": [0.5]}}, {"a": 2.0, "d": HugeNumber("1e999")}]))
    ['a', 'b.c[*]']
    """
    return frozenset(path for rec in records for path, kind, v in _kinds(rec)
                     if kind == "number" and isinstance(v, float)
                     and not isinstance(v, HugeNumber))
