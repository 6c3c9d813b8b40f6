"""``context_length``: records longer than the context window, counted with the real tokenizer.

The sequence measured is the one the trainer tokenizes: chat data rendered with the chat
template from ``tokenizer_config.json``, or a format-string template for alpaca-style
columns, special tokens included. Counts are exact; records whose length is provably under
``max_length`` (a sound bound for the tokenizer, see :mod:`cleanpipe.templating.tokenizer`)
are not tokenized.

Actions for ``too_long``: ``drop`` (default), ``flag``, ``fail``, or ``fix`` = truncate the
last answer so the sequence fits, only where some of that answer survives; a record whose
prompt alone fills the window is dropped.

The report gets the token length of every row that reaches the stage and of every row the
run writes, whatever later stages drop (:mod:`cleanpipe.contract.published`). A row proven
short, by its size alone or after encoding some of its pieces, is placed by that proof, a
sound upper bound of its length that depends on the row alone, and counted as bounded (the
chart shows those apart, and a total including one is marked as an upper bound): tokenizing
it only to place it would cost the time the proof saves. ``exact_counts: true`` measures
every row.

With a ``trainer`` profile (``trl``, ``llamafactory``, ``axolotl``) the length counted is
the one that trainer builds, and the window is its own option (``max_length``,
``cutoff_len``, ``sequence_len``); every record is tokenized. Under ``axolotl`` the default
action follows ``excess_length_strategy``: ``drop`` drops, ``truncate`` flags (axolotl
trains on the first ``sequence_len`` tokens), ``raise`` fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, model_validator

from cleanpipe.contract import published as pub
from cleanpipe.contract.sequence_stage import Measured, SequenceStage
from cleanpipe.contract.stage import Action, BatchContext, BatchResult, Findings
from cleanpipe.fields import flatten_field, rebuild_field
from cleanpipe.templating.profiles import AxolotlTrainer
from cleanpipe.templating.sequences import template_response

#: what the stage also gives per row: the engine totals them over the rows the run writes
_PER_ROW = (pub.TOKENS_AFTER, pub.TOTAL_TOKENS_AFTER)


class ContextLength(SequenceStage):
    """Drop (or flag, or truncate) records longer than ``max_length`` tokens.

    Example, with a tiny word-level tokenizer::

        >>> from cleanpipe.templating.word_tokenizer import word_tokenizer_file
        >>> path = word_tokenizer_file()  # one token per word
        >>> stage = ContextLength(tokenizer=path, max_length=4, template="{prompt} {output}")
        >>> stage({"prompt": ["a b", "a b c d"], "output": ["c", "e f"]})
        {'prompt': ['a b'], 'output': ['c']}
    """

    name = "context_length"
    codes = {"too_long": Action.DROP, "render_error": Action.DROP}
    forbidden_actions = {"render_error": frozenset({Action.FIX})}
    publishes = frozenset({pub.TOKENS_BEFORE, pub.TOKENS_AFTER, pub.TOTAL_TOKENS_BEFORE,
                           pub.TOTAL_TOKENS_AFTER, pub.ROWS_MEASURED, pub.ROWS_OVER_WINDOW,
                           pub.SHARE_OVER_WINDOW})

    max_length: int | None = Field(None, gt=0)
    """The context window in tokens; required unless the ``trainer`` profile sets it
    (``max_length``, ``cutoff_len``, ``sequence_len``)."""
    exact_counts: bool = False
    """Tokenize every record, even those provably under the limit (slower)."""

    @model_validator(mode="after")
    def _window(self) -> ContextLength:
        if self.max_length is None:
            raise ValueError("max_length: required (or a trainer with its length option, e.g."
                             " trainer: {name: trl, max_length: 1024})")
        if self.profile.name != "plain" and self.action_of("too_long") == Action.FIX:
            raise ValueError(f"too_long: action fix truncates answers for trainer plain only;"
                             f" trainer {self.profile.name} truncates on its own")
        return self

    def _too_long_action(self) -> Action:
        p = self.profile
        if isinstance(p, AxolotlTrainer) and "too_long" not in self.actions \
                and self.action is None:
            return {"drop": Action.DROP, "truncate": Action.FLAG,
                    "raise": Action.FAIL}[p.excess_length_strategy]
        return self.action_of("too_long")

    def process(self, batch: pa.RecordBatch, ctx: BatchContext) -> BatchResult:
        if self.profile.name != "plain":
            return self._process_trained(batch)
        assert self.max_length is not None
        m = self.measure(batch, self.max_length, exact=self.exact_counts)
        found = Findings(self.name)
        errors = [i for i, e in enumerate(m.rendered.errors) if e]
        if errors:
            found.add(errors, "render_error", self.action_of("render_error"),
                      detail=[m.rendered.errors[i] for i in errors])
        long_rows = np.flatnonzero(m.counts > self.max_length)
        out_batch = None
        truncated: list[int] = []
        act = self.action_of("too_long")
        if long_rows.size and act == Action.FIX:
            out_batch, truncated, cannot = self._truncate(batch, m, long_rows)
            if truncated:
                found.add(truncated, "too_long", Action.FIX, detail=[
                    f"{m.counts[i]} tokens > {self.max_length}: answer truncated to fit"
                    for i in truncated])
            if cannot:
                found.add(cannot, "too_long", Action.DROP, detail=[
                    f"{m.counts[i]} tokens > {self.max_length}; the prompt alone leaves no"
                    " room for the answer" for i in cannot])
        elif long_rows.size:
            found.add(long_rows, "too_long", act, detail=[
                f"{m.counts[i]} tokens > {self.max_length}" for i in long_rows])
        metrics, after = self._metrics(m, found, long_rows.size, truncated, out_batch)
        return BatchResult(out_batch, found, metrics, per_row=dict.fromkeys(_PER_ROW, after))

    def measure_rows(self, batch: pa.RecordBatch) -> dict[str, pub.RowValues]:
        """Token lengths of ``batch``'s rows as they are: none truncated, even those over the
        window (the default would give a truncated row's length, not the row's)."""
        if self.profile.name != "plain":
            return super().measure_rows(batch)  # trainer profiles rewrite nothing
        assert self.max_length is not None
        return dict.fromkeys(_PER_ROW, self._lengths(
            self.measure(batch, self.max_length, exact=self.exact_counts)))

    def _process_trained(self, batch: pa.RecordBatch) -> BatchResult:
        """Lengths as the profile's trainer builds them; every row is tokenized."""
        t = self.trained(batch)
        found = Findings(self.name)
        errors = [i for i, e in enumerate(t.errors) if e]
        if errors:
            found.add(errors, "render_error", self.action_of("render_error"),
                      detail=[t.errors[i] for i in errors])
        long_rows = np.flatnonzero(t.lengths > self.max_length)
        if long_rows.size:
            opt = self.profile.length_option
            found.add(long_rows, "too_long", self._too_long_action(), detail=[
                f"{t.lengths[i]} tokens > {self.profile.name} {opt} {self.max_length}"
                for i in long_rows])
        measured = t.lengths >= 0
        lengths = np.where(measured, t.lengths, 0)
        kept = measured.copy()
        kept[found.positions(Action.DROP)] = False
        none = np.zeros(len(lengths), dtype=bool)
        return BatchResult(None, found, {
            "rows": len(lengths),
            "tokenized": int(measured.sum()),
            "skipped_provably_short": 0,
            "too_long": int(long_rows.size),
            "truncated": 0,
            pub.TOKENS_BEFORE: pub.histogram_metrics(lengths[measured], none[measured]),
            pub.TOKENS_AFTER: pub.histogram_metrics(lengths[kept], none[kept]),
            pub.TOTAL_TOKENS_BEFORE: pub.total_metrics(int(lengths[measured].sum())),
            pub.TOTAL_TOKENS_AFTER: pub.total_metrics(int(lengths[kept].sum())),
            pub.ROWS_MEASURED: pub.total_metrics(int(measured.sum())),
            pub.ROWS_OVER_WINDOW: pub.total_metrics(int(long_rows.size)),
        }, per_row=dict.fromkeys(_PER_ROW, pub.RowValues(lengths, None, measured)))

    def _lengths(self, m: Measured) -> pub.RowValues:
        """Each row's token length (0 and not counted: no sequence); a row proven short is
        placed by its bound (an integer count is at most its floor).

        The report must not depend on how rows were batched: both proofs, by size alone and
        by counting some of a row's pieces, give a bound that is a function of the row
        (:meth:`LoadedTokenizer.count_above`), whatever the worker's piece cache held.
        """
        measured = ~np.asarray(m.rendered.texts.is_null().to_numpy(zero_copy_only=False),
                               dtype=bool)
        before = np.where(m.counts >= 0, m.counts, 0)
        bounded = measured & (m.counts < 0)
        before[bounded] = np.floor(m.bound[bounded]).astype(np.int64)
        return pub.RowValues(before, bounded, measured)

    def _metrics(self, m: Measured, found: Findings, n_long: int, truncated: list[int],
                 out_batch: pa.RecordBatch | None) -> tuple[dict[str, Any], pub.RowValues]:
        """The batch's metrics, and the lengths of its rows as the stage passes them on."""
        lengths = self._lengths(m)
        before, bounded, measured = lengths.values, lengths.bounded, lengths.counted
        assert bounded is not None and measured is not None
        after = before.copy()
        if truncated:
            assert out_batch is not None
            rows = pa.array(truncated, pa.int64())
            after[truncated] = self.measure(out_batch.take(rows), None).counts
        kept = measured.copy()
        kept[found.positions(Action.DROP)] = False
        return {
            "rows": len(m.counts),
            "tokenized": int((measured & ~bounded).sum()),
            "skipped_provably_short": int(bounded.sum()),
            "too_long": int(n_long),
            "truncated": len(truncated),
            pub.TOKENS_BEFORE: pub.histogram_metrics(before[measured], bounded[measured]),
            pub.TOKENS_AFTER: pub.histogram_metrics(after[kept], bounded[kept]),
            pub.TOTAL_TOKENS_BEFORE: pub.total_metrics(int(before[measured].sum()),
                                                       int(bounded.sum())),
            pub.TOTAL_TOKENS_AFTER: pub.total_metrics(int(after[kept].sum()),
                                                      int(bounded[kept].sum())),
            pub.ROWS_MEASURED: pub.total_metrics(int(measured.sum())),
            pub.ROWS_OVER_WINDOW: pub.total_metrics(int(n_long)),
        }, pub.RowValues(after, bounded, measured)

    def summary(self, metrics: Mapping[str, Any]) -> pub.Summary:
        """The published values, with the share of measured rows over the window."""
        out = super().summary(metrics)
        measured = out.values[pub.ROWS_MEASURED].value
        over = out.values[pub.ROWS_OVER_WINDOW].value
        out.values[pub.SHARE_OVER_WINDOW] = pub.Total(round(over / measured, 6)
                                                      if measured else 0.0)
        return out

    # -- truncation ---------------------------------------------------------------------------
    def _answer_field(self, batch: pa.RecordBatch) -> tuple[str, bool]:
        """Selector of the answer text and whether it lives in a chat column."""
        if self.template is not None:
            return template_response(self.template, self.response_field), False
        col = self._messages_column(batch)
        if col is None:
            return self.response_field, False
        struct = batch.schema.field(col).type.value_type
        key = "content" if struct.get_field_index("content") >= 0 else "value"
        return f"{col}[*].{key}", True

    def _truncate(self, batch: pa.RecordBatch, m: Measured, rows: np.ndarray
                  ) -> tuple[pa.RecordBatch | None, list[int], list[int]]:
        selector, nested = self._answer_field(batch)
        values, owners = flatten_field(batch, selector)
        first = np.searchsorted(owners, np.arange(batch.num_rows))
        texts = m.rendered.texts.take(pa.array(rows)).to_pylist()
        encs = self.tok.encode(texts, m.add_special_tokens)
        new_vals: dict[int, str] = {}
        done, cannot = [], []
        for r, enc in zip(rows.tolist(), encs, strict=True):
            spans, last = m.rendered.spans[r], m.rendered.last[r]
            if not spans or last is None:
                cannot.append(r)
                continue
            s, e = spans[-1]
            flat = int(first[r] + last[0]) if nested else r
            original = values[flat].as_py() or ""
            offs = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)
            # Tokens after the answer (end-of-turn, [SEP]...) must still fit after the cut.
            before_end = np.flatnonzero((offs[:, 0] < e) & (offs[:, 1] > offs[:, 0]))
            after = len(offs) - (int(before_end[-1]) + 1 if before_end.size else 0)
            keep = self.max_length - after
            cut = int(offs[keep - 1, 1]) if 0 < keep <= len(offs) else s
            fitted = None
            # BPE may merge differently at the new end; shorten until the re-count fits.
            for _ in range(8):
                if cut <= s:
                    break
                candidate = original[: last[1] + (cut - s)]
                if self._fits(batch, r, selector, nested, flat, first, values, candidate):
                    fitted = candidate
                    break
                cut -= max(1, (cut - s) // 20)
            if fitted is None:
                cannot.append(r)
            else:
                new_vals[flat] = fitted
                done.append(r)
        if not new_vals:
            return None, done, cannot
        mask = np.zeros(len(values), dtype=bool)
        mask[list(new_vals)] = True
        replaced = pc.replace_with_mask(
            values, pa.array(mask), pa.array([new_vals[i] for i in sorted(new_vals)],
                                             values.type))
        return rebuild_field(batch, selector, replaced), done, cannot

    def _fits(self, batch: pa.RecordBatch, r: int, selector: str, nested: bool, flat: int,
              first: np.ndarray, values: pa.Array, candidate: str) -> bool:
        one = batch.slice(r, 1)
        if nested:
            vals, _ = flatten_field(one, selector)
            local = flat - int(first[r])
            mask = np.zeros(len(vals), dtype=bool)
            mask[local] = True
            vals = pc.replace_with_mask(vals, pa.array(mask), pa.array([candidate], vals.type))
        else:
            vals = pa.array([candidate], values.type)
        trial = self.measure(rebuild_field(one, selector, vals), None)
        return bool(trial.counts[0] >= 0 and trial.counts[0] <= self.max_length)
