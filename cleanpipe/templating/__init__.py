"""Tokenizers, chat templates and supervised spans: the sequence a trainer actually sees.

Shared by the fine-tuning guards (``context_length``, ``trainable_tokens``, ``token_ids``).
"""

from cleanpipe.templating.chat import (
    KNOWN_ROLES,
    SHAREGPT_ROLES,
    ChatTemplate,
    TemplateError,
    to_messages,
)
from cleanpipe.templating.sequences import (
    ALPACA_INPUT,
    ALPACA_NO_INPUT,
    Rendered,
    render_chat_rows,
    render_template_batch,
    supervised_counts,
)
from cleanpipe.templating.tokenizer import LoadedTokenizer

__all__ = [
    "ALPACA_INPUT",
    "ALPACA_NO_INPUT",
    "KNOWN_ROLES",
    "SHAREGPT_ROLES",
    "ChatTemplate",
    "LoadedTokenizer",
    "Rendered",
    "TemplateError",
    "render_chat_rows",
    "render_template_batch",
    "supervised_counts",
    "to_messages",
]
