"""Parsed JSON records as one Arrow table: the records that cannot share it (a type clash, a
number out of range, nesting too deep, a lone surrogate) become bad records or fixes, one
record at a time, instead of failing the file."""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa

from cleanpipe.io.readers.chunks import BadRecord, Notes, ReadOptions
from cleanpipe.io.schemas import any_type, nested_types
from cleanpipe.io.sources import InputError, Shard
from cleanpipe.io.type_clashes import (
    first_clashes,
    first_out_of_range,
    float_paths,
    parse_float,
)

#: deeper records cannot go through Arrow, Parquet and the field walkers safely; real
#: fine-tuning records are a few levels deep (conversations[*].content is 3)
MAX_NESTING = 64


#: what pyarrow raises when Python values do not fit one Arrow type (or any: a lone
#: surrogate cannot be UTF-8, an integer over 64 bits cannot be int64)
_CONVERT_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError,
                   OverflowError, UnicodeEncodeError)


def table_from_records(shard: Shard, records: list[Any], numbers: list[int],
                        opts: ReadOptions, raws: list[str] | None = None,
                        suspect: bool = False, notes: Notes | None = None
                        ) -> tuple[pa.Table, list[BadRecord]]:
    """A table of ``records``; the records that cannot share it become bad records.

    A record whose value at some path has another JSON type than most values there (a
    number where text is expected, an object where a list is, a boolean among numbers) is a
    ``type_mismatch``; a number that cannot be stored as written is a
    ``number_out_of_range``; see :mod:`cleanpipe.io.type_clashes`. One odd record costs
    that record, not the file. ``suspect`` (the text holds bare booleans or huge numbers)
    checks the records even when Arrow takes them all, since it would store ``true`` among
    numbers as ``1.0`` and ``1e400`` as ``inf``. ``numbers`` is updated in place to the
    records kept.
    """
    texts: list[str | None] = list(raws) if raws is not None else [None] * len(records)
    records, too_deep = _drop_too_deep(shard, records, numbers, texts)
    try:
        table = _from_pylist(records)
        if not (suspect and _has_numbers(table.schema)):
            return table, too_deep
    except _CONVERT_ERRORS:
        pass  # what follows only runs for files whose records do not fit one table
    bad: list[BadRecord] = []
    keep_recs: list[Any] = []
    keep_nums: list[int] = []
    keep_texts: list[str | None] = []
    floats = float_paths(records)
    for rec, num, raw, clash in zip(records, numbers, texts, first_clashes(records),
                                    strict=True):
        unfit = first_out_of_range(rec, floats) if clash is None else None
        if clash is None and unfit is None:
            keep_recs.append(rec)
            keep_nums.append(num)
            keep_texts.append(raw)
            continue
        if opts.on_parse_error == "fail":
            raise InputError(f"{shard.path}:{num}: field {clash or unfit}; make it one type"
                             " in every record or set input.on_parse_error: quarantine")
        if clash is not None:
            bad.append(BadRecord(shard.name, num, "type_mismatch",
                                 f"field {clash} of {shard.name} (line {num}); a column keeps"
                                 " one type", raw if raw is not None else _dumps(rec)))
        else:
            bad.append(BadRecord(shard.name, num, "number_out_of_range",
                                 f"field {unfit} ({shard.name}, line {num}); write it as a"
                                 " string to keep it as written",
                                 raw if raw is not None else _dumps(rec)))
    try:
        table = _from_pylist(keep_recs)
    except _CONVERT_ERRORS:
        table, unstorable = _without_unstorable(shard, keep_recs, keep_nums, keep_texts, opts,
                                                notes if notes is not None else {})
        bad += unstorable
    numbers[:] = keep_nums
    return table, bad + too_deep


def _failing_alone(records: list[Any]) -> list[tuple[int, BaseException]]:
    """The records Arrow cannot store even alone, with the error: bisection finds the few
    such records with a handful of conversions, not one per record."""
    failing: list[tuple[int, BaseException]] = []
    spans = [(0, len(records))] if records else []
    while spans:
        lo, hi = spans.pop()
        try:
            _from_pylist(records[lo:hi])
            continue
        except _CONVERT_ERRORS as e:
            if hi - lo == 1:
                failing.append((lo, e))
                continue
        mid = (lo + hi) // 2
        spans.extend(((mid, hi), (lo, mid)))
    return failing


def _without_unstorable(shard: Shard, records: list[Any], numbers: list[int],
                        texts: list[str | None], opts: ReadOptions, notes: Notes
                        ) -> tuple[pa.Table, list[BadRecord]]:
    """The table of the records Arrow can store; the others become bad records (an
    integer over 64 bits) or are repaired (a lone surrogate with ``on_decode_error:
    replace``). ``records``, ``numbers`` and ``texts`` are updated in place."""
    bad: list[BadRecord] = []
    drop: set[int] = set()
    for i, err in _failing_alone(records):
        num, rec = numbers[i], records[i]
        raw = texts[i] if texts[i] is not None else _dumps(rec)
        if isinstance(err, UnicodeEncodeError):
            # a \ud800 escape is valid JSON but not text (a lone surrogate has no UTF-8):
            # treated like undecodable bytes, by input.on_decode_error
            if opts.on_decode_error == "fail":
                raise InputError(f"{shard.path}:{num}: a lone surrogate escaped in a string"
                                 " is not text; set input.on_decode_error to replace or"
                                 " quarantine")
            if opts.on_decode_error == "replace":
                records[i] = _no_surrogates(rec)
                notes.setdefault(num, []).append((
                    "decode_replaced", f"a lone surrogate escaped in a string (line {num}) is"
                    " not text: replaced by U+FFFD"))
                continue
            bad.append(BadRecord(shard.name, num, "decode_error",
                                 f"a lone surrogate escaped in a string (line {num}) is not"
                                 " text", raw))
        else:
            if opts.on_parse_error == "fail":
                raise InputError(f"{shard.path}:{num}: the record cannot be stored ({err});"
                                 " set input.on_parse_error: quarantine to keep going")
            bad.append(BadRecord(shard.name, num, "type_mismatch",
                                 f"record {num} of {shard.name} cannot be stored: {err}", raw))
        drop.add(i)
    keep = [i for i in range(len(records)) if i not in drop]
    records[:] = [records[i] for i in keep]
    numbers[:] = [numbers[i] for i in keep]
    texts[:] = [texts[i] for i in keep]
    try:
        return _from_pylist(records), bad
    except _CONVERT_ERRORS as e:
        # each record stores alone and none clashes in type: not expected; still one line
        raise InputError(f"{shard.path}: its records do not fit one table ({e}); make each"
                         " field one type, or convert the file to Parquet first") from e


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _no_surrogates(rec: Any) -> Any:
    """``rec`` with every lone surrogate (keys included) replaced by U+FFFD.

    >>> _no_surrogates({"a\\ud800": ["x\\udfff"]})
    {'a�': ['x�']}
    """
    return json.loads(_LONE_SURROGATE.sub("\ufffd", json.dumps(rec, ensure_ascii=False)))


def type_depth(schema: pa.Schema | pa.DataType) -> int:
    """How many levels of struct/list nesting a schema has (iteratively: no recursion)."""
    return max((depth for _, depth in nested_types(schema)), default=0)


def _has_numbers(schema: pa.Schema) -> bool:
    """Whether any field, at any depth, is an integer or a float."""
    return any_type(schema, lambda t: pa.types.is_integer(t) or pa.types.is_floating(t))


#: a bare JSON boolean, and an exponent no 64-bit float can hold: where the text has one,
#: Arrow may store a record with another value than it holds (true as 1.0, 1e400 as inf)
_BARE_BOOL = r"[:\[,]\s*(?:true|false)\s*[,\]}]"


_BIG_EXPONENT = r"\d[eE]\+?0*[1-9]\d{2}"


SUSPECT = re.compile(f"{_BARE_BOOL}|{_BIG_EXPONENT}")


SUSPECT_BYTES = re.compile(SUSPECT.pattern.encode())


#: an integer literal of 16+ digits: pyarrow's reader stores it as a (rounded) float when
#: its column also holds floats, and an integer over 64 bits as a float always
LONG_INT_BYTES = re.compile(rb"[:\[,]\s*-?\d{16,}\s*[,\]}]")


def json_decoder(text: str | bytes) -> json.JSONDecoder:
    """A JSON decoder that marks numbers too large for a float (see :class:`HugeNumber`)
    where the text may hold one; the plain, faster one elsewhere."""
    big = re.search(_BIG_EXPONENT if isinstance(text, str) else _BIG_EXPONENT.encode(), text)
    return json.JSONDecoder(parse_float=parse_float) if big else json.JSONDecoder()


def _value_depth(v: Any) -> int:
    depth = 0
    stack = [(v, 0)]
    while stack:
        x, d = stack.pop()
        depth = max(depth, d)
        if isinstance(x, dict):
            stack.extend((y, d + 1) for y in x.values())
        elif isinstance(x, list):
            stack.extend((y, d + 1) for y in x)
    return depth


def _drop_too_deep(shard: Shard, records: list[Any], numbers: list[int],
                   raws: list[str | None]) -> tuple[list[Any], list[BadRecord]]:
    """Records nested deeper than :data:`MAX_NESTING` become bad records (``numbers`` and
    ``raws`` are updated in place). Records are only walked when one holds a nested value at all."""
    if not any(isinstance(v, (dict, list)) for r in records for v in r.values()):
        return records, []
    keep, nums, texts, bad = [], [], [], []
    for rec, num, raw in zip(records, numbers, raws, strict=True):
        d = _value_depth(rec)
        if d > MAX_NESTING:
            bad.append(BadRecord(shard.name, num, "too_deep",
                                 f"record {num} is nested {d} levels deep; at most"
                                 f" {MAX_NESTING} levels can be stored: flatten it",
                                 raw if raw is not None else _dumps(rec)))
            continue
        keep.append(rec)
        nums.append(num)
        texts.append(raw)
    numbers[:] = nums
    raws[:] = texts
    return keep, bad


def _dumps(rec: Any) -> str | None:
    try:
        return json.dumps(rec, ensure_ascii=False)[:100_000]
    except RecursionError:  # deeper than json can write: the row id still says where it was
        return None


def _from_pylist(records: list[Any]) -> pa.Table:
    """One table of the records: its columns are the keys of all records.

    ``pa.Table.from_pylist`` takes the columns from the first record alone, so a key that
    first appears later was silently dropped (and a ``{}`` record made no row); an array of
    the records infers the union of their keys, in order of appearance.

    >>> _from_pylist([{"a": 1}, {"b": "x", "a": 2}, {}]).to_pylist()
    [{'a': 1, 'b': None}, {'a': 2, 'b': 'x'}, {'a': None, 'b': None}]
    """
    return pa.Table.from_struct_array(pa.array(records)) if records else pa.table({})
