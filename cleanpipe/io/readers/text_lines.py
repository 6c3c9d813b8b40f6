"""Plain text: one row per non-blank line, in a single text column (``input.text_column``)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from cleanpipe.io.readers.chunks import BadRecord, Chunk, Notes, ReadOptions, table_chunks
from cleanpipe.io.readers.decoding import (
    decode_bad,
    decode_to_utf8,
    first_bad_in,
    line_numbers,
    mend_line,
)
from cleanpipe.io.readers.opening import open_bytes
from cleanpipe.io.sources import Shard


def read_text(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    raw = open_bytes(shard)
    data, bad_bytes, guess = decode_to_utf8(shard, raw, opts)
    starts, ends, numbers = line_numbers(data)
    bad: list[BadRecord] = []
    if bad_bytes.size and opts.on_decode_error == "quarantine":
        first_bad = first_bad_in(bad_bytes, starts, ends)
        for s, e, num, off in zip(starts[first_bad >= 0].tolist(), ends[first_bad >= 0].tolist(),
                                  numbers[first_bad >= 0].tolist(),
                                  first_bad[first_bad >= 0].tolist(), strict=True):
            bad.append(decode_bad(shard, data[s:e], num, off))
        keep = first_bad < 0
        starts, ends, numbers = starts[keep], ends[keep], numbers[keep]
    notes: Notes = {}
    first_bad = first_bad_in(bad_bytes, starts, ends)
    lines = [(data[s:e].decode("utf-8") if off < 0 else
              mend_line(data[s:e], num, s, guess, notes)).rstrip("\r")
             for s, e, num, off in zip(starts.tolist(), ends.tolist(), numbers.tolist(),
                                       first_bad.tolist(), strict=True)]
    table = pa.table({opts.text_column: pa.array(lines, pa.string())})
    yield from table_chunks(table, numbers, shard, bad, opts.batch_size, len(raw), notes)
