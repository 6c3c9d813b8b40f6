"""Stage order is part of correctness: repair before removal.

``unicode_fix`` (ftfy) undoes mojibake by re-encoding the damaged text, and the characters it
re-encodes are exactly those the removal stages delete: Chinese UTF-8 read as Windows-1252 or
Latin-1 is full of C1 controls (U+0081, U+008D, U+008F, U+0090, U+009D), soft hyphens (byte
0xAD) and no-break spaces (byte 0xA0). A removal stage that runs first leaves text ftfy can
no longer decode. :data:`ORDER_RULES` is the table of such pairs; :func:`check_stage_order`
refuses a pipeline that breaks one (the pipeline loader calls it, so ``validate``, ``run``,
``check`` and :class:`~cleanpipe.pipeline.Pipeline` all refuse the same files) instead of
quietly reordering the user's stages.

    >>> from cleanpipe.stages import ControlChars, UnicodeFix
    >>> check_stage_order([UnicodeFix(), ControlChars()])  # repair, then removal: fine
    >>> try:
    ...     check_stage_order([ControlChars(), UnicodeFix()])
    ... except StageOrderError as err:
    ...     print(str(err).split(", but")[0], "...", str(err).split("; ")[-1])
    stages[0]: control_chars runs before unicode_fix (stages[1]) ... did you mean: move \
unicode_fix before control_chars

Two stages limited to disjoint ``fields:`` cannot harm each other and may come in any order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cleanpipe.contract.stage import Stage
from cleanpipe.errors import CleanpipeError


@dataclass(frozen=True)
class OrderRule:
    """``first`` must run before ``then`` on the same text, because of ``why``."""

    first: str
    then: str
    why: str


REPAIR = "unicode_fix"

#: Every pair of stages whose order matters, with the evidence the wrong order destroys.
ORDER_RULES: tuple[OrderRule, ...] = (
    OrderRule(REPAIR, "control_chars",
              "control_chars deletes the C1 characters (U+0080-U+009F) ftfy needs to undo"
              " mojibake such as Chinese UTF-8 read as Windows-1252"),
    OrderRule(REPAIR, "invisible_chars",
              "invisible_chars deletes U+00AD and U+FEFF, bytes ftfy needs to undo mojibake"),
    OrderRule(REPAIR, "whitespace",
              "whitespace may rewrite U+00A0, byte 0xA0 of mojibake ftfy needs to undo"),
)


class StageOrderError(CleanpipeError, ValueError):
    """A pipeline lists a removal stage before the repair it would sabotage (exit code 2)."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index
        """Position in ``stages:`` of the stage that runs too early."""


def _overlap(a: Stage, b: Stage) -> bool:
    # ``fields: None`` means every text field of the pipeline
    fa, fb = getattr(a, "fields", None), getattr(b, "fields", None)
    return fa is None or fb is None or bool(set(fa) & set(fb))


def check_stage_order(stages: Sequence[Stage]) -> None:
    """Raise :class:`StageOrderError` (one line) for the first rule of :data:`ORDER_RULES`
    that ``stages`` break: a ``then`` stage that runs before a ``first`` stage on a shared
    text field."""
    for i, early in enumerate(stages):
        for rule in ORDER_RULES:
            if early.name != rule.then:
                continue
            for j in range(i + 1, len(stages)):
                late = stages[j]
                if late.name == rule.first and _overlap(early, late):
                    raise StageOrderError(
                        f"stages[{i}]: {rule.then} runs before {rule.first} (stages[{j}]), but"
                        f" {rule.why}; did you mean: move {rule.first} before {rule.then}", i)
