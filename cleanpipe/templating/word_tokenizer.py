"""A throwaway word-level tokenizer: one token per whitespace-separated word.

For examples and tests of the token-counting stages, where a real vocabulary would only hide
the arithmetic: ``"a b c"`` is 3 tokens, whatever the words.

    >>> from tokenizers import Tokenizer
    >>> Tokenizer.from_file(word_tokenizer_file()).encode("a b c").ids
    [0, 0, 0]
"""

from __future__ import annotations

import os
import tempfile

from tokenizers import Tokenizer, models, pre_tokenizers


def word_tokenizer_file(folder: str | None = None) -> str:
    """Write the tokenizer as ``tokenizer.json`` in ``folder`` (a new temporary folder by
    default) and return the file's path."""
    tk = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path = os.path.join(folder or tempfile.mkdtemp(), "tokenizer.json")
    tk.save(path)
    return path
