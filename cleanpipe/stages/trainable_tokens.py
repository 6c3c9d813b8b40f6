"""``trainable_tokens``: samples that keep no supervised token after templating and truncation.

If every label of a sample is -100 the trainer divides a zero loss by zero supervised tokens
and the batch loss is NaN. That happens when the answer is empty, or when the prompt fills
the window so that truncation to ``max_length`` cuts the whole answer away.

Supervised tokens are those overlapping an assistant turn (chat) or the response column
(template); the end-of-turn token is not counted, so an empty answer counts 0.

The report gets the supervised tokens of the rows that reach the stage (untruncated) and of
the rows the run writes (within the window, whatever later stages drop): the figure to
compare with the trainer's log. A row
the byte-level proof passes without tokenizing enters with a sound upper bound, the UTF-8
bytes of its answer (each token overlapping the answer holds at least one of them), and the
total is then marked as an upper bound; ``exact_counts: true`` tokenizes every row.

With a ``trainer`` profile (``trl``, ``llamafactory``, ``axolotl``) the supervised tokens are
the ones that trainer gives a label, after its own truncation (both report figures are that
count); a row the trainer leaves out itself (axolotl's ``excess_length_strategy: drop``, a
conversation LLaMA-Factory cannot align) has none.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
from pydantic import Field

from cleanpipe.contract import published as pub
from cleanpipe.contract.sequence_stage import SequenceStage
from cleanpipe.contract.stage import Action, BatchContext, BatchResult, Findings
from cleanpipe.templating.sequences import supervised_counts
from cleanpipe.templating.trained import Trained


class TrainableTokens(SequenceStage):
    """Drop samples with fewer than ``min_trainable`` supervised tokens in the window.

        >>> from cleanpipe.templating.word_tokenizer import word_tokenizer_file
        >>> path = word_tokenizer_file()  # one token per word
        >>> stage = TrainableTokens(tokenizer=path, max_length=3, template="{prompt} {output}")
        >>> stage({"prompt": ["a b", "a", "a b c"], "output": ["c", "", "d"]})
        {'prompt': ['a b'], 'output': ['c']}
    """

    name = "trainable_tokens"
    codes = {"no_trainable_tokens": Action.DROP, "render_error": Action.DROP}
    forbidden_actions = {"no_trainable_tokens": frozenset({Action.FIX}),
                         "render_error": frozenset({Action.FIX})}
    publishes = frozenset({pub.SUPERVISED_TOKENS_BEFORE, pub.SUPERVISED_TOKENS_AFTER})

    max_length: int | None = Field(default=None, gt=0)
    """Truncation length of the trainer (right truncation); None: no truncation. With a
    ``trainer`` profile, the same as its length option."""
    min_trainable: int = Field(default=1, ge=1)
    """Fewest supervised tokens a sample must keep."""
    exact_counts: bool = False
    """Tokenize every record, even those the byte-level proof passes (slower; exact
    supervised-token totals in the report)."""

    def process(self, batch: pa.RecordBatch, ctx: BatchContext) -> BatchResult:
        if self.profile.name != "plain":
            return self.judge(self.trained(batch))
        rendered = self.render(batch)
        n = batch.num_rows
        specials = self._specials()
        ok = ~np.asarray(rendered.texts.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        empty = np.array([all(e <= s for s, e in sp) for sp in rendered.spans], dtype=bool)
        trainable = np.full(n, -1, dtype=np.int64)
        trainable[ok & empty] = 0
        need = ok & ~empty
        bounded = np.zeros(n, dtype=bool)
        if self.tok.unit == "bytes" and self.min_trainable == 1 and not self.exact_counts:
            # Byte-level BPE leaves no byte outside a token, so a non-empty answer inside a
            # window it provably fits in keeps at least one supervised token.
            if self.max_length is None:  # nothing is truncated: no bound needed
                sure = need.copy()
            else:
                bound = self.tok.upper_bound(rendered.texts, self.max_length, specials)
                sure = need & (bound <= self.max_length)
            trainable[sure] = 1
            bounded = sure
            need &= ~sure
        rows = np.flatnonzero(need)
        # supervised tokens without truncation: where the window cuts nothing, the same
        untruncated = np.zeros(n, dtype=np.int64)
        if rows.size:
            encs = self.tok.encode(rendered.texts.take(pa.array(rows)).to_pylist(), specials)
            offsets = [e.offsets for e in encs]
            spans = [rendered.spans[i] for i in rows]
            trainable[rows] = supervised_counts(offsets, spans, self.max_length)
            untruncated[rows] = (trainable[rows] if self.max_length is None
                                 else supervised_counts(offsets, spans, None))
        if bounded.any():
            texts = rendered.texts.take(pa.array(np.flatnonzero(bounded))).to_pylist()
            untruncated[bounded] = [
                sum(len(t[s:e].encode("utf-8")) for s, e in rendered.spans[i] if e > s)
                for t, i in zip(texts, np.flatnonzero(bounded).tolist(), strict=True)]
        found = Findings(self.name)
        errors = [i for i, e in enumerate(rendered.errors) if e]
        if errors:
            found.add(errors, "render_error", self.action_of("render_error"),
                      detail=[rendered.errors[i] for i in errors])
        bad = np.flatnonzero(ok & (trainable >= 0) & (trainable < self.min_trainable))
        if bad.size:
            found.add(bad, "no_trainable_tokens", self.action_of("no_trainable_tokens"), detail=[
                "empty answer" if empty[i] else
                f"{trainable[i]} supervised tokens within {self.max_length}" for i in bad])
        reasons = Counter("empty_answer" if empty[i] else "truncated_away" for i in bad)
        # rows proven to fit the window lose nothing to truncation: their bound holds after
        within = np.where(bounded, untruncated, np.maximum(trainable, 0))
        kept = ok.copy()
        kept[found.positions(Action.DROP)] = False
        return BatchResult(None, found, {
            "rows": n,
            "tokenized": int(rows.size),
            "no_trainable_tokens": int(bad.size),
            "reasons": dict(reasons),
            pub.SUPERVISED_TOKENS_BEFORE: pub.total_metrics(int(untruncated[ok].sum()),
                                                            int(bounded[ok].sum())),
            pub.SUPERVISED_TOKENS_AFTER: pub.total_metrics(int(within[kept].sum()),
                                                           int(bounded[kept].sum())),
        }, per_row={pub.SUPERVISED_TOKENS_AFTER: pub.RowValues(within, bounded, ok)})

    def judge(self, t: Trained) -> BatchResult:
        """The findings for rows already built by :meth:`trained` (trainer profiles)."""
        n = len(t.errors)
        trainable = t.supervised
        found = Findings(self.name)
        errors = [i for i, e in enumerate(t.errors) if e]
        if errors:
            found.add(errors, "render_error", self.action_of("render_error"),
                      detail=[t.errors[i] for i in errors])
        ok = np.array([not e for e in t.errors], dtype=bool)
        bad = np.flatnonzero(ok & (trainable < self.min_trainable))
        opt = self.profile.length_option
        limit = f" within {opt} {self.profile.length}" if opt and self.profile.length else ""

        def why(i: int) -> str:
            if t.skipped[i]:
                return str(t.skipped[i])
            return f"{trainable[i]} supervised tokens{limit} ({self.profile.name})"

        def reason(i: int) -> str:
            if t.skipped[i]:
                return "left_out_by_trainer"
            return "truncated_away" if t.lengths[i] > len(t.ids[i]) else "no_labelled_token"

        if bad.size:
            found.add(bad, "no_trainable_tokens", self.action_of("no_trainable_tokens"),
                      detail=[why(i) for i in bad])
        kept = ok.copy()
        kept[found.positions(Action.DROP)] = False
        return BatchResult(None, found, {
            "rows": n,
            "tokenized": int(ok.sum()),
            "no_trainable_tokens": int(bad.size),
            "reasons": dict(Counter(reason(i) for i in bad)),
            pub.SUPERVISED_TOKENS_BEFORE: pub.total_metrics(int(trainable[ok].sum())),
            pub.SUPERVISED_TOKENS_AFTER: pub.total_metrics(int(trainable[kept].sum())),
        }, per_row={pub.SUPERVISED_TOKENS_AFTER: pub.RowValues(trainable, None, ok)})
