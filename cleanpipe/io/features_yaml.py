"""The ``features`` list of an output's dataset card, from its Arrow schema, without importing
``datasets``.

``datasets`` writes this list itself (``Features.from_arrow_schema``, then the card's YAML
form), but importing it takes ~0.3 s and tearing it down at exit ~0.2 s more, at the end of
every run that writes an output: on t0 as one file that was 6% of the run. For the column
types a cleaned dataset holds (null, booleans, integers, floats, strings, binary,
timestamps, dates, lists and structs of these) the list is written here, entry for entry
as ``datasets`` 4 and 5 write it (``tests/test_features_yaml.py`` compares the two). For
anything else :func:`features_yaml` returns ``None`` and the caller asks ``datasets``:

- another column type (a dictionary, a decimal, an extension type, ...);
- a schema that carries ``datasets``' own features in its metadata (a ``ClassLabel``'s
  names, say), which ``datasets`` reads back from there;
- an installed ``datasets`` of another major version, whose card layout may differ (3.x
  wrote ``sequence`` where 4.x writes ``list``).

    >>> features_yaml(pa.schema([("text", pa.string()), ("ids", pa.list_(pa.int64())),
    ...                          ("meta", pa.struct([("lang", pa.string())]))]),
    ...               datasets_version="5.2.0")
    [{'name': 'text', 'dtype': 'string'}, {'name': 'ids', 'list': 'int64'}, \
{'name': 'meta', 'struct': [{'name': 'lang', 'dtype': 'string'}]}]
    >>> features_yaml(pa.schema([("x", pa.string())]), datasets_version="3.6.0") is None
    True
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

import pyarrow as pa
import pyarrow.types as pat

#: the ``datasets`` major versions whose card layout this module writes
LAYOUT_MAJORS = (4, 5)

_VALUES = {
    pa.null(): "null", pa.bool_(): "bool",
    pa.int8(): "int8", pa.int16(): "int16", pa.int32(): "int32", pa.int64(): "int64",
    pa.uint8(): "uint8", pa.uint16(): "uint16", pa.uint32(): "uint32", pa.uint64(): "uint64",
    pa.float16(): "float16", pa.float32(): "float32", pa.float64(): "float64",
    pa.string(): "string", pa.large_string(): "large_string",
    pa.binary(): "binary", pa.large_binary(): "large_binary",
    pa.date32(): "date32", pa.date64(): "date64",
}


def installed_datasets_version() -> str | None:
    """The installed ``datasets``' version, read from its metadata (no import).

        >>> installed_datasets_version().split(".")[0].isdigit()
        True
    """
    try:
        return metadata.version("datasets")
    except metadata.PackageNotFoundError:
        return None


def features_yaml(schema: pa.Schema, datasets_version: str | None = None
                  ) -> list[dict[str, Any]] | None:
    """The card's ``features`` for ``schema`` as ``datasets`` (of ``datasets_version``,
    default the installed one) would write them, or ``None`` where this module cannot
    vouch for that (see the module docstring).

        >>> features_yaml(pa.schema([("t", pa.timestamp("ms", tz="UTC"))]), "4.0.0")
        [{'name': 't', 'dtype': 'timestamp[ms, tz=UTC]'}]
        >>> features_yaml(pa.schema([("p", pa.decimal128(5, 2))]), "4.0.0") is None
        True
    """
    version = datasets_version or installed_datasets_version()
    try:
        major = int((version or "").split(".")[0])
    except ValueError:
        return None
    if major not in LAYOUT_MAJORS:
        return None
    if schema.metadata and b"huggingface" in schema.metadata:
        return None
    return _fields(list(schema))


def _fields(fields: list[pa.Field]) -> list[dict[str, Any]] | None:
    # datasets keeps the last of two fields with one name (it builds a dict): left to it
    if len({f.name for f in fields}) != len(fields):
        return None
    out = []
    for f in fields:
        feature = _feature(f.type)
        if feature is None:
            return None
        out.append({"name": f.name, **feature})
    return out


def _feature(t: pa.DataType) -> dict[str, Any] | None:
    if isinstance(t, pa.BaseExtensionType):
        return None  # datasets has features for some; and a Python one may not hash
    if pat.is_struct(t):
        children = _fields([t.field(i) for i in range(t.num_fields)])
        return None if children is None else {"struct": children}
    if pat.is_list(t) or pat.is_large_list(t) or pat.is_fixed_size_list(t):
        inner = _feature(t.value_type)
        if inner is None:
            return None
        out: dict[str, Any] = {"large_list" if pat.is_large_list(t) else "list": _short(inner)}
        if pat.is_fixed_size_list(t):
            out["length"] = t.list_size
        return out
    if pat.is_timestamp(t):
        if t.tz is None:
            return {"dtype": f"timestamp[{t.unit}]"}
        return {"dtype": f"timestamp[{t.unit}, tz={t.tz}]"} if t.tz else None
    name = _VALUES.get(t)
    return None if name is None else {"dtype": name}


def _short(inner: dict[str, Any]) -> Any:
    """A list's item as the card writes it: a plain type by its name, a struct by its
    fields, anything else (a list of lists) as it is."""
    if list(inner) == ["dtype"]:
        return inner["dtype"]
    if list(inner) == ["struct"]:
        return inner["struct"]
    return inner
