"""A ``.json`` file: an array of objects, one object (a single list value is unwrapped), or
JSON lines."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from cleanpipe.io.readers.chunks import BadRecord, Chunk, Notes, ReadOptions, table_chunks
from cleanpipe.io.readers.decoding import decode_to_utf8, line_of
from cleanpipe.io.readers.jsonl import jsonl_chunks
from cleanpipe.io.readers.opening import open_bytes
from cleanpipe.io.readers.records import SUSPECT, json_decoder, table_from_records
from cleanpipe.io.sources import InputError, Shard
from cleanpipe.io.type_clashes import (
    json_kind,
)
from cleanpipe.io.utf8_repair import mend

_SURROGATE = re.compile("[\udc80-\udcff]")


def read_json(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    """A JSON array of objects, one object (``{"split": [records]}`` is unwrapped, as
    datasets' ``field=`` would), or JSON lines in a ``.json`` file."""
    raw = open_bytes(shard)
    data, bad_bytes, guess = decode_to_utf8(shard, raw, opts)
    # invalid bytes survive decoding as lone surrogates, so the records holding them
    # can be found after parsing (quarantine) or read by the repair rule (replace)
    text = data.decode("utf-8", errors="surrogateescape" if bad_bytes.size else "strict")
    stripped = text.lstrip()
    if not stripped:
        yield from table_chunks(pa.table({}), np.zeros(0, np.int64), shard, [], opts.batch_size,
                            len(raw))
        return
    try:
        obj = json_decoder(text).decode(text)
    except json.JSONDecodeError as err:
        if stripped.startswith("{") and (err.msg == "Extra data" or "\n" in stripped.strip()):
            # a .json file that holds JSON lines: one bad line costs one record
            yield from jsonl_chunks(shard, len(raw), data, bad_bytes, opts, guess)
            return
        raise InputError(f"{shard.path}:{err.lineno}: not valid JSON: {err.msg} (column"
                         f" {err.colno}); fix the file, or write it as JSON lines so that a"
                         " bad record costs only that record") from None
    except RecursionError:
        raise InputError(f"{shard.path}: JSON nested too deeply to read") from None
    if isinstance(obj, dict):
        lists = [v for v in obj.values() if isinstance(v, list)]
        obj = lists[0] if len(obj) == 1 and len(lists) == 1 else [obj]
    if not isinstance(obj, list):
        raise InputError(f"{shard.path}: holds a JSON {json_kind(obj)}; expected an array of"
                         " objects, an object, or JSON lines")
    bad: list[BadRecord] = []
    records, numbers = [], []
    notes: Notes = {}
    surrogates = _SURROGATE if bad_bytes.size else None
    bad_i = 0
    for i, rec in enumerate(obj, start=1):
        if surrogates is not None:
            dumped = json.dumps(rec, ensure_ascii=False)
            n_bad = len(surrogates.findall(dumped))
            if n_bad:
                # records are in file order, so the k-th bad byte belongs to the record
                # holding the k-th surrogate
                off = int(bad_bytes[min(bad_i, bad_bytes.size - 1)])
                bad_i += n_bad
                if opts.on_decode_error == "quarantine":
                    line = line_of(data, off)
                    bad.append(BadRecord(
                        shard.name, i, "decode_error",
                        f"invalid UTF-8 at line {line}, byte offset {off} (record {i})",
                        _fffd(dumped)[:100_000], off))
                    continue
                fixed, mends = mend(dumped.encode("utf-8", errors="surrogateescape"), guess)
                rec = json.loads(fixed)
                notes[i] = [(m.code, m.describe(f"record {i}, near byte offset {off}"))
                            for m in mends]
        if isinstance(rec, dict):
            records.append(rec)
            numbers.append(i)
        else:
            bad.append(BadRecord(shard.name, i, "parse_error",
                                 f"record {i} is a JSON {json_kind(rec)}, not an object",
                                 json.dumps(rec, ensure_ascii=False)[:100_000]))
    table, records_bad = table_from_records(shard, records, numbers, opts,
                                             suspect=bool(SUSPECT.search(text)), notes=notes)
    bad = sorted(bad + records_bad, key=lambda b: b.line)
    yield from table_chunks(table, np.asarray(numbers, np.int64), shard, bad, opts.batch_size,
                        len(raw), notes)


def _fffd(s: str) -> str:
    return _SURROGATE.sub("\ufffd", s)
