"""Parameters and rendering shared by the stages that measure the trained sequence."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pydantic import PrivateAttr, field_validator, model_validator

from cleanpipe.contract.stage import BatchStage, StageError
from cleanpipe.templating.chat import SHAREGPT_ROLES, ChatTemplate
from cleanpipe.templating.profiles import (
    AxolotlTrainer,
    PlainTrainer,
    Profile,
    TrlTrainer,
    parse_trainer,
)
from cleanpipe.templating.sequences import (
    Rendered,
    chat_rows_from_batch,
    render_chat_rows,
    render_column_rows,
    render_template_batch,
    tools_from_batch,
)
from cleanpipe.templating.tokenizer import LoadedTokenizer
from cleanpipe.templating.trained import LlamaFactorySlots, Records, Trained, build

_MESSAGE_COLUMNS = ("messages", "conversations")


@dataclass
class Measured:
    """Token counts of one batch: ``counts[i]`` is exact, or -1 where the row is proven
    short, by ``bound[i] ≤ max_length`` or by counting only some of its pieces
    (:meth:`LoadedTokenizer.count_above`)."""

    rendered: Rendered
    counts: np.ndarray
    bound: np.ndarray
    add_special_tokens: bool

    @property
    def tokenized(self) -> np.ndarray:
        return self.counts >= 0


def load_stage_tokenizer(stage: str, path: str) -> LoadedTokenizer:
    """The tokenizer at ``path`` for stage ``stage``; an unreadable one is a
    :class:`StageError` naming both."""
    try:
        return LoadedTokenizer.load(path)
    except (OSError, ValueError) as e:
        raise StageError(f"{stage}: cannot load tokenizer {path!r}: {e}") from e


class SequenceStage(BatchStage):
    """Base of stages that render records as the trainer does and tokenize them."""

    tokenizer: str
    """A ``tokenizer.json`` file or a model directory (with ``tokenizer_config.json``)."""
    template: str | None = None
    """None: the tokenizer's chat template. ``"alpaca"``, or a format string whose
    ``{column}`` placeholders are filled from the record (e.g. ``"{prompt}{completion}"``)."""
    chat_template: str | None = None
    """Jinja source to use instead of the one in ``tokenizer_config.json``."""
    messages_field: str | None = None
    """Chat column (ShareGPT or OpenAI turns); default: ``messages`` or ``conversations``."""
    prompt_fields: list[str] = ["instruction", "input"]
    """Without a chat column: the columns joined (by newlines) into the user turn."""
    response_field: str = "output"
    """The supervised answer column (chat without a chat column, and templates; a template
    without this placeholder supervises its last placeholder)."""
    system_field: str | None = "system"
    """Column with a system prompt, when present."""
    tools_field: str | None = "tools"
    """Column with tool definitions (JSON text or a list), passed to the chat template."""
    role_map: dict[str, str] = {}
    """Extra ShareGPT ``from`` → role mappings (``human``/``gpt``/... are built in)."""
    add_special_tokens: bool | None = None
    """Let the post-processor add its tokens (BOS, [CLS]/[SEP]). Default: off for chat
    templates (they write their own, and transformers encodes them without), on for
    format-string templates."""
    append_eos: bool = False
    """Format-string templates: end the sequence with the tokenizer's ``eos_token``."""
    trainer: Profile | None = None
    """The trainer whose template, truncation and loss masking to follow: ``trl``,
    ``llamafactory``, ``axolotl`` or ``plain`` (the default), or a mapping with ``name:``
    and that trainer's options (see docs/trainers.md). A pipeline's top-level ``trainer:``
    applies to every stage that does not set its own."""

    _tok: LoadedTokenizer | None = PrivateAttr(default=None)
    _chat: ChatTemplate | None = PrivateAttr(default=None)
    _slots: LlamaFactorySlots | None = PrivateAttr(default=None)

    @field_validator("trainer", mode="before")
    @classmethod
    def _parse_trainer(cls, value: Any) -> Any:
        return None if value is None else parse_trainer(value)

    @model_validator(mode="after")
    def _trainer_length(self) -> SequenceStage:
        """The stage's ``max_length`` and the trainer's own length option are one setting:
        either fills the other; two different values are an error."""
        own = getattr(self, "max_length", None)
        p = self.trainer
        if p is None or p.length_option is None:
            return self
        if own is not None:
            if p.length_option in p.model_fields_set and p.length != own:
                raise ValueError(f"max_length {own} and trainer {p.name} {p.length_option}"
                                 f" {p.length} disagree; set one of them")
            self.trainer = p.with_length(own)  # type: ignore[assignment]
        elif hasattr(self, "max_length") and p.length is not None:
            self.max_length = p.length  # type: ignore[attr-defined]
        if isinstance(p, TrlTrainer) and p.assistant_only_loss:
            raise ValueError("trainer trl assistant_only_loss: the assistant mask comes from"
                             " {% generation %} marks in the chat template, which cleanpipe"
                             " does not read yet; use completion_only_loss with prompt and"
                             " response columns, or trainer plain")
        return self

    @property
    def profile(self) -> Profile:
        """The trainer profile in force (``plain`` when none is set)."""
        return self.trainer if self.trainer is not None else PlainTrainer()

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        if self.trainer is None:
            d.pop("trainer", None)  # pipelines without a trainer keep their config hash
        return d

    def __getstate__(self) -> dict[str, Any]:
        # Ship parameters only; workers load the tokenizer again in setup().
        state = super().__getstate__()
        state["__pydantic_private__"] = {"_tok": None, "_chat": None, "_slots": None}
        return state

    def setup(self) -> None:
        if self._tok is not None:
            return
        self._tok = load_stage_tokenizer(self.name, self.tokenizer)
        if self.template is None:
            source = self.chat_template or self._tok.chat_template
            if source is None:
                raise StageError(
                    f"{self.name}: {self.tokenizer} has no chat_template; set `template`"
                    " (e.g. 'alpaca' or '{prompt}{completion}') or `chat_template`")
            self._chat = ChatTemplate(source, self._tok.special_token_strings())

    @property
    def tok(self) -> LoadedTokenizer:
        self.setup()
        assert self._tok is not None
        return self._tok

    def _messages_column(self, batch: pa.RecordBatch) -> str | None:
        if self.messages_field is not None:
            if batch.schema.get_field_index(self.messages_field) < 0:
                raise StageError(f"{self.name}: no column {self.messages_field!r}")
            return self.messages_field
        for c in _MESSAGE_COLUMNS:
            if batch.schema.get_field_index(c) >= 0:
                return c
        return None

    def _specials(self) -> bool:
        if self.add_special_tokens is not None:
            return self.add_special_tokens
        return self.template is not None

    def render(self, batch: pa.RecordBatch) -> Rendered:
        """The sequences of ``batch`` as the trainer builds them."""
        self.setup()
        try:
            if self.template is not None:
                suffix = ""
                if self.append_eos:
                    suffix = self.tok.token_text("eos_token") or ""
                return render_template_batch(batch, self.template, self.response_field,
                                             suffix)
            assert self._chat is not None
            col = self._messages_column(batch)
            tools = tools_from_batch(batch, self.tools_field)
            if col is None and tools is None:
                return render_column_rows(batch, self.prompt_fields, self.response_field,
                                          self.system_field, self._chat)
            rows = chat_rows_from_batch(batch, col, self.prompt_fields, self.response_field,
                                        self.system_field, self.role_map)
            return render_chat_rows(rows, self._chat, tools)
        except (KeyError, ValueError) as e:
            raise StageError(f"{self.name}: {e}") from e

    def measure(self, batch: pa.RecordBatch, limit: int | None,
                exact: bool = False) -> Measured:
        """Render and count; rows provably within ``limit`` are not tokenized (unless
        ``exact``)."""
        rendered = self.render(batch)
        specials = self._specials()
        ok = ~np.asarray(rendered.texts.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        if limit is None or exact:
            bound = np.full(len(ok), np.inf)
        else:
            bound = self.tok.upper_bound(rendered.texts, limit, specials)
        need = np.flatnonzero(ok & (bound > (limit if limit is not None else -1)))
        counts = np.full(len(ok), -1, dtype=np.int64)
        if need.size:
            texts = rendered.texts.take(pa.array(need)).to_pylist()
            if limit is None or exact:
                counts[need] = self.tok.count(texts, specials)
            else:
                counts[need], refined = self.tok.count_above(texts, limit, specials)
                bound[need] = np.minimum(bound[need], refined)
        return Measured(rendered, counts, bound, specials)

    # -- trainer profiles ---------------------------------------------------------------------
    def records(self, batch: pa.RecordBatch) -> tuple[Records, Rendered | None]:
        """The batch as the trainer profiles read it, and its plain rendering (template
        records, or chat rows with their located answers)."""
        self.setup()
        try:
            if self.template is not None:
                rendered = render_template_batch(batch, self.template, self.response_field)
                texts = rendered.texts.to_pylist()
                starts = [sp[0][0] for sp in rendered.spans]
                return Records(errors=[None] * batch.num_rows,
                               prompts=[t[:s] for t, s in zip(texts, starts, strict=True)],
                               answers=[t[s:] for t, s in zip(texts, starts, strict=True)],
                               add_special_tokens=self._specials()), rendered
            assert self._chat is not None
            col = self._messages_column(batch)
            role_map = self.role_map
            if isinstance(self.profile, TrlTrainer):
                # TRL renames ShareGPT's from/value keys but passes the roles as written
                role_map = {k: k for k in SHAREGPT_ROLES}
            rows = chat_rows_from_batch(batch, col, self.prompt_fields, self.response_field,
                                        self.system_field, role_map)
            tools = tools_from_batch(batch, self.tools_field)
            if not isinstance(self.profile, AxolotlTrainer):  # the others render per trainer
                return Records(errors=[None] * len(rows), messages=rows,
                               from_columns=col is None, tools=tools), None
            rendered = render_chat_rows(rows, self._chat, tools)
            return Records(errors=list(rendered.errors), messages=rows,
                           from_columns=col is None, tools=tools), rendered
        except (KeyError, ValueError) as e:
            raise StageError(f"{self.name}: {e}") from e

    def trained(self, batch: pa.RecordBatch) -> Trained:
        """What the configured trainer builds from each row (not for ``plain``)."""
        rec, rendered = self.records(batch)
        if self.profile.name == "llamafactory" and self._slots is None \
                and self._chat is not None:
            self._slots = LlamaFactorySlots.parse(self._chat, self.tok)
        try:
            return build(self.profile, self.tok, rec, self._chat,
                         rendered.spans if rendered is not None else None, self._slots)
        except ValueError as e:
            raise StageError(f"{self.name}: {e}") from e
