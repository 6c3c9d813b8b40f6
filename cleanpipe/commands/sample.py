"""``cleanpipe sample``: a small deterministic, optionally stratified sample of a dataset.

Meant for the cleaned output (``cleanpipe sample out/ -n 512 -o smoke.jsonl``) before a smoke
training run. The same input, ``-n``, ``--seed`` and ``--stratify`` always give the same rows,
in input order, whatever machine or batch size produced the input.

    >>> import pyarrow as pa
    >>> t = pa.table({"x": list(range(10)), "label": ["a"] * 8 + ["b"] * 2})
    >>> sample_table(t, 4, seed=0, stratify="label")[0].column("label").to_pylist()
    ['a', 'a', 'a', 'b']
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cleanpipe.columns import is_utf8
from cleanpipe.commands._data import add_sample_command
from cleanpipe.errors import ExitCode

__all__ = ["allocate", "register", "sample_indices", "sample_table"]


def allocate(sizes: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Rows to take from each stratum: proportional to its size (largest remainder), at least
    one from every stratum when ``n`` allows it, never more than the stratum holds."""
    sizes = np.asarray(sizes, dtype=np.int64)
    k = sizes.size
    n = int(min(n, sizes.sum()))
    take = np.zeros(k, dtype=np.int64)
    if n == 0 or k == 0:
        return take
    if n < k:
        # Too few rows for one per stratum: which strata get one is itself a seeded draw,
        # weighted by size so the sample still looks like the data.
        chosen = rng.choice(k, size=n, replace=False, p=sizes / sizes.sum())
        take[chosen] = 1
        return take
    take[:] = 1
    left = n - k
    room = sizes - 1
    if left and room.sum():
        quota = left * room / room.sum()
        take += np.floor(quota).astype(np.int64)
        rest = left - int(np.floor(quota).sum())
        if rest:
            # Ties broken by stratum order, so the result does not depend on sort stability.
            order = np.lexsort((np.arange(k), -(quota - np.floor(quota))))
            order = order[take[order] < sizes[order]]
            take[order[:rest]] += 1
    return np.minimum(take, sizes)


def sample_indices(num_rows: int, n: int, seed: int = 0,
                   groups: np.ndarray | None = None) -> np.ndarray:
    """Sorted row positions of a sample of ``n`` rows (all rows when ``n >= num_rows``).

    ``groups`` (one int per row) stratifies the draw with :func:`allocate`.
    """
    rng = np.random.default_rng(seed)
    if n >= num_rows:
        return np.arange(num_rows, dtype=np.int64)
    if groups is None:
        return np.sort(rng.choice(num_rows, size=n, replace=False)).astype(np.int64)
    sizes = np.bincount(groups)
    take = allocate(sizes, n, rng)
    order = np.argsort(groups, kind="stable")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    picked = [rng.choice(order[s:s + size], size=t, replace=False)
              for s, size, t in zip(starts, sizes, take, strict=True) if t]
    return np.sort(np.concatenate(picked)).astype(np.int64) if picked else np.zeros(0, np.int64)


def _group_codes(table: pa.Table, column: str) -> tuple[np.ndarray, list[str]]:
    if column not in table.column_names:
        raise KeyError(column)
    col = table.column(column)
    if not is_utf8(col.type):
        col = pc.cast(col, pa.string()) if not pa.types.is_nested(col.type) else pa.chunked_array(
            [pa.array([str(v) for v in col.to_pylist()], pa.string())])
    # nulls are a stratum of their own (labelled "null") rather than silently dropped
    col = pc.fill_null(col, "null")
    enc = pc.dictionary_encode(col).combine_chunks()
    return (enc.indices.to_numpy(zero_copy_only=False).astype(np.int64),
            [str(v) for v in enc.dictionary.to_pylist()])


def sample_table(table: pa.Table, n: int, *, seed: int = 0,
                 stratify: str | None = None) -> tuple[pa.Table, dict[str, int]]:
    """The sample, and rows per stratum (``{}`` without ``stratify``)."""
    if stratify is None:
        idx = sample_indices(table.num_rows, n, seed)
        return table.take(pa.array(idx)), {}
    groups, names = _group_codes(table, stratify)
    idx = sample_indices(table.num_rows, n, seed, groups)
    counts = np.bincount(groups[idx], minlength=len(names))
    return table.take(pa.array(idx)), {names[i]: int(c) for i, c in enumerate(counts) if c}


def write_table(table: pa.Table, output: str | None) -> None:
    """Write by extension: ``.parquet``, ``.jsonl``/``.json``; no output means JSONL on stdout.

    A file that is already there is replaced only if cleanpipe wrote it (it is listed in its
    folder's manifest, as report files are: see
    :func:`cleanpipe.io.output_guard.claim_report_files`), so ``-o`` can never overwrite the
    user's own data, the input included. The file appears whole or not at all.
    """
    import polars as pl

    from cleanpipe.io.output_guard import claim_report_files

    if output is None:
        sys.stdout.write(pl.from_arrow(table).write_ndjson())
        return
    path = Path(output)
    if path.suffix not in {".parquet", ".jsonl", ".json", ".ndjson"}:
        raise ValueError(f"{output}: use a .parquet or .jsonl file name")
    claim_report_files(path.parent, [path.name])
    tmp = path.with_name(f".{path.name}.cleanpipe-tmp")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, tmp)
    else:
        pl.from_arrow(table).write_ndjson(tmp)
    tmp.replace(path)


def cmd_sample(args: argparse.Namespace) -> int:
    from cleanpipe.commands._data import read_dataset

    if args.n <= 0:
        print("cleanpipe sample: -n must be positive", file=sys.stderr)
        return ExitCode.USAGE
    if args.seed < 0:
        print(f"cleanpipe sample: --seed {args.seed}: must be 0 or more", file=sys.stderr)
        return ExitCode.USAGE
    if args.output and Path(args.output).suffix not in {".parquet", ".jsonl", ".json", ".ndjson"}:
        print(f"cleanpipe sample: {args.output}: use a .parquet or .jsonl file name",
              file=sys.stderr)
        return ExitCode.USAGE
    table = read_dataset(args.input)
    try:
        sample, strata = sample_table(table, args.n, seed=args.seed, stratify=args.stratify)
    except KeyError:
        print(f"cleanpipe sample: no column {args.stratify!r} to stratify by; columns: "
              f"{', '.join(table.column_names)}", file=sys.stderr)
        return ExitCode.USAGE
    write_table(sample, args.output)
    where = args.output or "stdout"
    msg = f"sampled {sample.num_rows} of {table.num_rows} rows (seed {args.seed}) to {where}"
    print(msg, file=sys.stderr)
    if strata:
        width = max(len(k) for k in strata)
        for k, v in sorted(strata.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"  {k:<{width}}  {v}", file=sys.stderr)
    return ExitCode.PASSED


def register(subparsers: Any) -> None:
    p = add_sample_command(
        subparsers, "sample", "deterministic (optionally stratified) sample of a cleaned output",
        "Take a deterministic sample of a cleaned output folder (its data/) or any dataset, "
        "for a smoke training run. Same input, -n, --seed and --stratify: same rows, in input "
        "order.", rows=1000)
    p.add_argument("--stratify", metavar="COLUMN",
                   help="keep every value of COLUMN represented, proportionally (e.g. label)")
    p.add_argument("--output", "-o",
                   help="a .parquet or .jsonl file (default: JSONL on stdout); an existing"
                   " file is replaced only if cleanpipe wrote it")
    p.set_defaults(func=cmd_sample)
