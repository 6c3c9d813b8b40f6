"""``whitespace``: unusual spaces, trailing spaces, runs, blank lines and edge whitespace.

Every code is only flagged by default: none of these changes what a model learns, while
rewriting them changes what the trainer sees of a clean row. A prompt that ends in ``\\n``
and a completion that starts with a space (``{"prompt": "The sky is", "completion": " blue."}``)
are joined by the trainer as they are, so trimming either teaches ``"The sky isblue."``;
markdown's two trailing spaces are a line break; NBSP keeps ``10 kg`` together. Set an action
to ``fix`` to rewrite (``actions: {unusual_space: fix}``), e.g. for pre-training text.

==================  ===================================================  ============
code                what                                                 default
==================  ===================================================  ============
``unusual_space``   U+00A0, U+1680, U+2000–U+200A, U+202F, U+205F        flagged
                    (U+3000 IDEOGRAPHIC SPACE only with                  (fix: → space)
                    ``keep_ideographic_space: false``: it is legitimate
                    in CJK text)
``space_run``       two or more spaces/tabs after a non-space            flagged
                    (indentation is never touched; fixing collapses the  (fix: one space)
                    run to one space, which also realigns tables)
``trailing_space``  spaces/tabs before a line break or the end           flagged
                                                                         (fix: removed)
``blank_lines``     three or more line breaks in a row                   flagged
                                                                         (fix: two)
``edge_whitespace`` ASCII whitespace at the start or end of the string   flagged
                                                                         (fix: trimmed)
==================  ===================================================  ============
"""

from __future__ import annotations

import functools

import pyarrow as pa

from cleanpipe.contract.stage import Action, ExampleCount, TextResult, TextStage
from cleanpipe.text.byte_scan import ByteScan
from cleanpipe.text.rules import Rule, RuleSet, cls, expand

_UNUSUAL = (0xA0, 0x1680, (0x2000, 0x200A), 0x202F, 0x205F)


class Whitespace(TextStage):
    """Flag unusual spaces, trailing spaces, runs, blank lines and edge whitespace.

    Defaults change nothing (see the module docstring for why); each code fixes on request.

        >>> stage = Whitespace()
        >>> stage(" 10\\u00a0kg  of rice \\nnext line\\t\\n")
        ' 10\\xa0kg  of rice \\nnext line\\t\\n'
        >>> stage.transform(pa.array([" 10\\u00a0kg \\n"])).findings.codes()
        {'unusual_space': 1, 'trailing_space': 1, 'edge_whitespace': 1}
        >>> fix = Whitespace(action="fix")
        >>> fix(" 10\\u00a0kg  of rice \\nnext line\\t\\n")
        '10 kg of rice\\nnext line'
        >>> fix("中文\\u3000全角空格")
        '中文\\u3000全角空格'
    """

    name = "whitespace"
    codes = {
        "unusual_space": Action.FLAG, "space_run": Action.FLAG, "trailing_space": Action.FLAG,
        "blank_lines": Action.FLAG, "edge_whitespace": Action.FLAG,
    }

    keep_ideographic_space: bool = True
    """Leave U+3000 alone (it is the normal space of CJK text)."""
    examples: ExampleCount = 5
    """Before/after examples kept per code per batch."""

    def _unusual(self) -> tuple:
        return _UNUSUAL if self.keep_ideographic_space else (*_UNUSUAL, 0x3000)

    def _rules(self) -> list[Rule]:
        unusual = self._unusual()
        ws = r"[ \t\n\r\x0B\x0C]"
        rules = [
            Rule("unusual_space", cls(*unusual), replacement=" ", codepoints=expand(*unusual),
                 exact=True),
            Rule("space_run", r"[^ \t\n][ \t]{2,}[^ \t\n]", replace=r"([^ \t\n])[ \t]{2,}",
                 replacement=r"\1 ", detail="run"),
            Rule("trailing_space", r"[ \t]+(\n|$)", replacement=r"\1", detail="trailing",
                 exact=True),
            Rule("blank_lines", r"\n{3,}", replacement="\n\n", detail="blank lines", exact=True),
            Rule("edge_whitespace", f"^{ws}+|{ws}+$", trim=" \t\n\r\x0b\x0c",
                 detail="edges"),
        ]
        return rules

    def transform(self, texts: pa.Array) -> TextResult:
        return RuleSet(self.name, self._rules(), self.action_of, self.examples,
                       scan=_scan(self._unusual())).apply(texts)


@functools.cache
def _scan(unusual: tuple) -> ByteScan:
    # Bits in the order of the rules in ``Whitespace.transform``.
    return ByteScan([unusual], space_run=1, trailing_space=2, blank_lines=3,
                    edge_whitespace=4)
