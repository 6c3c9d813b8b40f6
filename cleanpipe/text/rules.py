"""The columnar engine behind the character-level text stages.

A stage is a list of :class:`Rule` s: a reason code, an RE2 pattern that finds it, and the
rewrite that fixes it. Rules whose code is configured as ``fix`` rewrite in order; the others
only record findings.

Finding the candidates: with a :class:`~cleanpipe.text.byte_scan.ByteScan` (every stage
has one), one compiled pass over the UTF-8 bytes gives each string a bit per rule; each rule
then runs on its own candidates only, RE2 confirms where the bit is only a superset, strings
a fix changed are scanned again, and a final trim rule that most strings need alone runs
over the whole array in one pass. Without a scan, one RE2 union pass finds the strings that
hold anything (the reference path the tests compare against).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cleanpipe.contract.stage import Action, Findings, TextResult
from cleanpipe.text.arrays import cp_label, examples, put, regex_mask
from cleanpipe.text.byte_scan import ByteScan


@dataclass(frozen=True)
class Rule:
    """One reason code: where it fires, and how it is fixed.

    ``detect`` is an RE2 pattern; ``replace``/``replacement`` the RE2 rewrite (defaults:
    remove what ``detect`` matches). ``fixer``, when set, rewrites the affected strings in
    Python instead (for context rules RE2 cannot express); it gets and returns a list.
    ``codepoints`` are counted one by one in the metrics and named in ``detail``.
    """

    code: str
    detect: str
    replace: str | None = None
    replacement: str = ""
    codepoints: Sequence[int] = ()
    fixer: Callable[[list[str]], list[str]] | None = None
    detail: str | None = None
    trim: str | None = None
    """Characters trimmed from both ends with ``utf8_trim`` (``detect`` is then unused)."""
    exact: bool = False
    """The rule's byte-scan bit is exactly ``detect`` (not just a superset): skip RE2."""

    def mask(self, texts: pa.Array) -> np.ndarray:
        if self.trim is None:
            return regex_mask(texts, self.detect)
        if len(texts) == 0:
            return np.zeros(0, dtype=bool)
        shorter = pc.less(pc.binary_length(pc.utf8_trim(texts, self.trim)),
                          pc.binary_length(texts))
        return pc.fill_null(shorter, False).to_numpy(zero_copy_only=False)


@dataclass
class RuleSet:
    stage: str
    rules: list[Rule]
    action_of: Callable[[str], Action]
    limit: int = 5
    prefilter: str | None = None
    scan: ByteScan | None = None
    metrics: dict = field(default_factory=dict)

    def apply(self, texts: pa.Array, bits: np.ndarray | None = None) -> TextResult:
        """Run the rules. ``bits`` (from :class:`ByteScan`, bit *k* ↔ ``rules[k]``) names the
        strings each rule may match; without it one RE2 union pass finds them."""
        found = Findings(self.stage)
        counts: dict[str, int] = {}
        metrics: dict = {"strings": len(texts), "strings_hit": 0, "codepoints": counts}
        if not self.rules or len(texts) == 0:
            return TextResult(texts, found, metrics)
        if bits is None and self.scan is not None:
            bits = self.scan(texts)
        if bits is not None and self.scan is None:
            raise ValueError("bits need the scan that made them")
        if bits is not None:
            bulk = self._bulk_last(texts, bits)
            if bulk is not None:
                return bulk
            hit = bits != 0
        else:
            union = self.prefilter or "|".join(
                f"(?:{r.detect})" for r in self.rules if r.trim is None)
            hit = regex_mask(texts, union)
            for r in self.rules:
                if r.trim is not None:
                    hit |= r.mask(texts)
        rows = np.flatnonzero(hit)
        metrics["strings_hit"] = int(rows.size)
        if rows.size == 0:
            return TextResult(texts, found, metrics)
        # Taking a large subset costs more than the passes it saves.
        sub = texts if rows.size * 2 > len(texts) else texts.take(pa.array(rows))
        if sub is texts:
            rows = np.arange(len(texts), dtype=np.int64)
        if not pa.types.is_large_string(sub.type):
            sub = sub.cast(pa.large_string())
        sub_bits = bits[rows] if bits is not None else None
        rule_bits = np.uint32((1 << len(self.rules)) - 1)
        # Strings a fix touched: only they can differ from the input at the end.
        dirty = np.zeros(len(sub), dtype=bool)
        out = sub
        hits: list[tuple[Rule, np.ndarray, list[str | None] | None]] = []
        for k, rule in enumerate(self.rules):
            cand: np.ndarray | None = None
            part = out
            if sub_bits is not None:
                on = ((sub_bits >> k) & 1).astype(bool)
                cand = np.flatnonzero(on)
                if cand.size == 0:
                    continue
                if cand.size * 2 > len(out):
                    cand = None
                else:
                    part = out.take(pa.array(cand))
            trimmed = None
            if rule.trim is not None:
                # The trim is its own detector: strings it shortens are the hits.
                trimmed = pc.utf8_trim(part, rule.trim)
                m = pc.fill_null(pc.less(pc.binary_length(trimmed), pc.binary_length(part)),
                                 False).to_numpy(zero_copy_only=False)
            elif rule.exact and sub_bits is not None:
                # The scan's bit is this rule's own test: no RE2 pass needed.
                m = np.ones(len(part), dtype=bool) if cand is not None else on
            else:
                m = rule.mask(part)
            loc = np.flatnonzero(m)
            local = loc if cand is None else cand[loc]
            fixed: list[str] | None = None
            if rule.fixer is not None and local.size:
                # A context rule may keep every match (a ZWJ inside an emoji): only the
                # strings it actually changes are findings.
                old = out.take(pa.array(local)).to_pylist()
                new = rule.fixer(old)
                keep = [i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b]
                local = local[keep]
                loc = loc[keep]
                fixed = [new[i] for i in keep]
            if local.size == 0:
                continue
            if rule.codepoints:
                hit_part = (part if cand is not None and loc.size == len(part)
                            else out.take(pa.array(local)))
                details = self._details(rule, hit_part, counts)
            else:
                details = None
            hits.append((rule, local, details))
            if self.action_of(rule.code) is not Action.FIX:
                continue
            dirty[local] = True
            if fixed is not None:
                new_local = pa.array(fixed, pa.large_string())
                out = put(out, local, new_local)
            else:
                if trimmed is not None:
                    new_part = trimmed
                else:
                    new_part = pc.replace_substring_regex(part, rule.replace or rule.detect,
                                                          rule.replacement)
                out = new_part if cand is None else put(out, cand, new_part)
                new_local = None
            if sub_bits is not None and k + 1 < len(self.rules):
                # The fix may create or remove what later rules look for: scan the strings
                # it changed again, so the bits stay true of the current text.
                if new_local is None:
                    new_local = (new_part if cand is not None and loc.size == len(part)
                                 else out.take(pa.array(local)))
                sub_bits[local] = self.scan_of(new_local) & rule_bits
        for rule, local, details in hits:
            before, after = examples(local, sub, out, self.limit)
            found.add(rows[local], rule.code, self.action_of(rule.code),
                      detail=details if details is not None else rule.detail,
                      before=before, after=after)
        # Only strings a fix touched can differ.
        if sub_bits is None or dirty.sum() * 2 > len(sub):
            changed = np.flatnonzero(pc.fill_null(pc.not_equal(sub, out), False)
                                     .to_numpy(zero_copy_only=False))
        else:
            touched = np.flatnonzero(dirty)
            t_idx = pa.array(touched)
            diff = pc.fill_null(pc.not_equal(sub.take(t_idx), out.take(t_idx)), False)
            changed = touched[diff.to_numpy(zero_copy_only=False)]
        metrics["strings_changed"] = int(changed.size)
        if changed.size == 0:
            return TextResult(texts, found, metrics)
        if rows.size == len(texts) and changed.size * 2 > len(texts):
            return TextResult(out.cast(texts.type), found, metrics)
        if rows.size == len(texts):
            return TextResult(put(texts, changed, out.take(pa.array(changed))), found, metrics)
        return TextResult(put(texts, rows[changed], out.take(pa.array(changed))), found,
                          metrics)

    def _bulk_last(self, texts: pa.Array, bits: np.ndarray) -> TextResult | None:
        """Most strings need only the last rule (``whitespace``: a trailing newline to trim).

        Taking them into the subset and through every rule costs more than the rules: run
        the others on the rest, then the last rule's trim over the whole array in one pass
        (a no-op where its bit is clear, and idempotent where it already ran).
        """
        last = self.rules[-1]
        last_bit = np.uint32(1 << (len(self.rules) - 1))
        only = bits == last_bit
        if last.trim is None or len(self.rules) < 2 or int(only.sum()) * 2 <= len(texts):
            return None
        head = self.apply(texts, np.where(only, np.uint32(0), bits))
        base = head.texts
        trimmed = pc.utf8_trim(base, last.trim)
        shorter = pc.fill_null(pc.less(pc.binary_length(trimmed), pc.binary_length(base)),
                               False).to_numpy(zero_copy_only=False)
        tail = np.flatnonzero(shorter & only)
        metrics = head.metrics
        metrics["strings_hit"] += int(only.sum())
        if tail.size == 0:
            return head
        action = self.action_of(last.code)
        out = trimmed if action is Action.FIX else base
        if action is Action.FIX:
            metrics["strings_changed"] = metrics.get("strings_changed", 0) + int(tail.size)
        # One chunk for the last rule, positions in order, as a single pass would give.
        found = Findings(self.stage)
        positions = tail
        for chunk in head.findings.chunks:
            if chunk is head.findings.chunks[-1] and chunk.code == last.code:
                positions = np.union1d(chunk.positions, tail)
            else:
                found.chunks.append(chunk)
        before, after = examples(positions, texts, out, self.limit)
        found.add(positions, last.code, action, detail=last.detail, before=before,
                  after=after)
        return TextResult(out.cast(texts.type) if out.type != texts.type else out, found,
                          metrics)

    def scan_of(self, texts: pa.Array) -> np.ndarray:
        assert self.scan is not None
        return self.scan(texts)

    @staticmethod
    def _details(rule: Rule, hit: pa.Array, counts: dict[str, int]) -> list[str | None] | None:
        if not rule.codepoints:
            return None
        names: list[list[str]] = [[] for _ in range(len(hit))]
        for cp in rule.codepoints:
            # The regex kernel finds a one-character literal far faster than
            # ``count_substring`` does (it skips ahead with memchr); same counts.
            c = pc.count_substring_regex(hit, f"\\x{{{cp:X}}}").to_numpy(zero_copy_only=False)
            total = int(c.sum())
            if total:
                label = cp_label(cp)
                counts[label] = counts.get(label, 0) + total
                for i in np.flatnonzero(c):
                    names[i].append(label)
        return [",".join(n) or None for n in names]


def cls(*items: int | tuple[int, int]) -> str:
    """An RE2 character class from code points and inclusive ranges."""
    parts = []
    for it in items:
        if isinstance(it, tuple):
            parts.append(f"\\x{{{it[0]:X}}}-\\x{{{it[1]:X}}}")
        else:
            parts.append(f"\\x{{{it:X}}}")
    return "[" + "".join(parts) + "]"


def expand(*items: int | tuple[int, int]) -> list[int]:
    out: list[int] = []
    for it in items:
        out.extend(range(it[0], it[1] + 1) if isinstance(it, tuple) else [it])
    return out
