"""External (out-of-core) LSH clustering: band keys spilled to Parquet, joined with polars.

For corpora whose band keys do not fit in memory: each observed batch appends its keys in
long form ``(idx, band, key)`` to a Parquet file under a temporary directory; clustering is
then a polars group-by on ``(band, key)`` → candidate edges → connected components by
min-label propagation. Pair rules (all pairs in small buckets, a star in large ones) match
:func:`cleanpipe.dedup.kernels.bucket_pairs`, so both modes find the same edges.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:  # imported where used: only ``external: true`` runs need polars
    import polars as pl


class KeySpill:
    """Band keys of observed batches, written to Parquet as they come."""

    def __init__(self, directory: str | None = None) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="cleanpipe-lsh-", dir=directory))
        self._parts = 0
        self.bytes_written = 0

    @property
    def directory(self) -> Path:
        return self._dir

    def append(self, first_idx: int, keys: np.ndarray, valid: np.ndarray) -> None:
        bands = keys.shape[1]
        rows = np.flatnonzero(valid)
        if rows.size == 0:
            return
        idx = np.repeat(rows.astype(np.int64) + first_idx, bands)
        band = np.tile(np.arange(bands, dtype=np.int16), rows.size)
        table = pa.table({"idx": idx, "band": band, "key": keys[rows].reshape(-1)})
        path = self._dir / f"part-{self._parts:06d}.parquet"
        pq.write_table(table, path, compression="zstd")
        self.bytes_written += path.stat().st_size
        self._parts += 1

    def scan(self) -> pl.LazyFrame | None:
        import polars as pl

        if self._parts == 0:
            return None
        return pl.scan_parquet(str(self._dir / "*.parquet"))

    def cleanup(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)

    def __getstate__(self) -> dict:
        # The spill is only read in the main process; workers get the stage without it.
        return {"_dir": self._dir, "_parts": self._parts, "bytes_written": self.bytes_written}


def candidate_pairs(keys: pl.LazyFrame | None, max_all_pairs: int = 64) -> pl.DataFrame:
    """Unique ``(left, right)`` pairs, ``left < right``, sharing a key in some band."""
    import polars as pl

    empty = pl.DataFrame({"left": [], "right": []}, schema={"left": pl.Int64, "right": pl.Int64})
    if keys is None:
        return empty
    g = keys.with_columns(
        size=pl.len().over("band", "key"), first=pl.col("idx").min().over("band", "key"),
    ).filter(pl.col("size") >= 2)
    small = g.filter(pl.col("size") <= max_all_pairs).select("band", "key", "idx")
    all_pairs = (
        small.join(small, on=["band", "key"], suffix="_r")
        .filter(pl.col("idx") < pl.col("idx_r"))
        .select(left=pl.col("idx"), right=pl.col("idx_r"))
    )
    star = (
        g.filter((pl.col("size") > max_all_pairs) & (pl.col("idx") != pl.col("first")))
        .select(left=pl.col("first"), right=pl.col("idx"))
    )
    return pl.concat([all_pairs, star]).unique().sort("left", "right").collect()


def components(n: int, edges: pl.DataFrame) -> np.ndarray:
    """Smallest index of each document's component, by min-label propagation in polars."""
    import polars as pl

    labels = np.arange(n, dtype=np.int64)
    if edges.height == 0:
        return labels
    both = pl.concat([
        edges.select(src=pl.col("left"), dst=pl.col("right")),
        edges.select(src=pl.col("right"), dst=pl.col("left")),
    ])
    lab = (pl.concat([both.select(node=pl.col("src"))]).unique()
           .with_columns(label=pl.col("node")))
    while True:
        # One hop of propagation: each node takes the smallest label among its neighbours.
        hop = (both.join(lab, left_on="src", right_on="node")
               .group_by("dst").agg(pl.col("label").min().alias("nb")))
        new = (lab.join(hop, left_on="node", right_on="dst", how="left")
               .with_columns(label=pl.min_horizontal("label", pl.col("nb").fill_null(
                   pl.col("label"))))
               .select("node", "label"))
        # Pointer jumping (label of my label) shortens long chains to a few rounds.
        new = (new.join(new.select(pl.col("node").alias("l"), pl.col("label").alias("ll")),
                        left_on="label", right_on="l", how="left")
               .with_columns(label=pl.min_horizontal("label", pl.col("ll").fill_null(
                   pl.col("label"))))
               .select("node", "label"))
        changed = (new.join(lab, on="node", suffix="_old")
                   .filter(pl.col("label") != pl.col("label_old")).height)
        lab = new
        if changed == 0:
            break
    labels[lab["node"].to_numpy()] = lab["label"].to_numpy()
    return labels
