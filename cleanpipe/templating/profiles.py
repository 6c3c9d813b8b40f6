"""Trainer profiles: which trainer will read the data, with that trainer's own option names.

A profile decides how a record becomes the token sequence a trainer trains on: the template,
where the sequence is cut, and which tokens carry a label. ``plain`` is cleanpipe's own
reading (the answer text is supervised, right truncation); the others follow the trainers:

* ``trl``: TRL's ``SFTTrainer`` (options of ``SFTConfig``: ``max_length``,
  ``truncation_mode``, ``completion_only_loss``, ``assistant_only_loss``).
* ``llamafactory``: LLaMA-Factory's supervised processor (``cutoff_len``,
  ``train_on_prompt``, ``mask_history``, ``enable_thinking``).
* ``axolotl``: axolotl (``sequence_len``, ``excess_length_strategy``, ``train_on_inputs``).

In a pipeline file, ``trainer:`` is a name or a mapping with ``name:`` and the options:

    >>> parse_trainer("trl").max_length
    1024
    >>> p = parse_trainer({"name": "llamafactory", "cutoff_len": 512})
    >>> p.name, p.length
    ('llamafactory', 512)
    >>> parse_trainer({"name": "axolotl", "cutoff_len": 512})
    Traceback (most recent call last):
    ...
    ValueError: trainer.cutoff_len: unknown option of trainer axolotl; valid: excess_length_strategy, name, sequence_len, train_on_inputs
"""  # noqa: E501

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError


class _Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    #: the option that holds the sequence length, in this trainer's own spelling
    length_option: ClassVar[str | None] = None

    @property
    def length(self) -> int | None:
        """Where the trainer cuts sequences (None: it does not cut)."""
        return getattr(self, self.length_option) if self.length_option else None

    def with_length(self, value: int) -> _Profile:
        """The same profile with its length option set to ``value``."""
        return self.model_copy(update={self.length_option: value}) if self.length_option \
            else self


class PlainTrainer(_Profile):
    """cleanpipe's own reading: answer text supervised, right truncation at the stage's
    ``max_length``."""

    name: Literal["plain"] = "plain"


class TrlTrainer(_Profile):
    """TRL ``SFTTrainer`` dataset preparation."""

    name: Literal["trl"] = "trl"
    max_length: int | None = Field(1024, gt=0)
    """``SFTConfig.max_length`` (TRL's default 1024); null: no truncation."""
    truncation_mode: Literal["keep_start", "keep_end"] = "keep_start"
    """``SFTConfig.truncation_mode``: keep the first (default) or the last tokens."""
    completion_only_loss: bool | None = None
    """``SFTConfig.completion_only_loss``; None (TRL's default): on for prompt-completion
    data (format-string templates, prompt/response columns), no effect on a messages
    column."""
    assistant_only_loss: bool = False
    """``SFTConfig.assistant_only_loss``: needs ``{% generation %}`` marks in the chat
    template, as in TRL."""

    length_option: ClassVar[str | None] = "max_length"


class LlamaFactoryTrainer(_Profile):
    """LLaMA-Factory's supervised dataset processor, with the template LLaMA-Factory parses
    from the tokenizer's chat template."""

    name: Literal["llamafactory"] = "llamafactory"
    cutoff_len: int = Field(2048, gt=0)
    """``cutoff_len`` (LLaMA-Factory's default 2048), split per turn between prompt and
    answer."""
    train_on_prompt: bool = False
    """``train_on_prompt``: prompt tokens carry labels too."""
    mask_history: bool = False
    """``mask_history``: only the last turn is supervised, and it gets the budget first."""
    enable_thinking: bool = True
    """``enable_thinking`` (reasoning templates): an answer without a thought gets an empty
    one, supervised when true, part of the prompt when false."""
    preserve_thinking: bool = False
    """``preserve_thinking``: keep the thoughts of earlier turns with ``mask_history``."""

    length_option: ClassVar[str | None] = "cutoff_len"


class AxolotlTrainer(_Profile):
    """axolotl's tokenization and length handling."""

    name: Literal["axolotl"] = "axolotl"
    sequence_len: int = Field(512, gt=0)
    """``sequence_len`` (axolotl's default 512)."""
    excess_length_strategy: Literal["drop", "truncate", "raise"] = "drop"
    """``excess_length_strategy``: longer rows are dropped (default), truncated, or stop
    preprocessing with an error."""
    train_on_inputs: bool = False
    """``train_on_inputs``: prompt tokens carry labels too."""

    length_option: ClassVar[str | None] = "sequence_len"


Profile = PlainTrainer | TrlTrainer | LlamaFactoryTrainer | AxolotlTrainer
TRAINERS: dict[str, type[_Profile]] = {c.model_fields["name"].default: c for c in
                                      (PlainTrainer, TrlTrainer, LlamaFactoryTrainer,
                                       AxolotlTrainer)}
_ADAPTER = TypeAdapter(Annotated[Profile, Field(discriminator="name")])


def parse_trainer(value: Any) -> Profile:
    """A profile from a pipeline's ``trainer:`` value (a name or a mapping with ``name:``).
    Raises ValueError naming the option and the valid ones."""
    if isinstance(value, _Profile):
        return value  # type: ignore[return-value]
    data = {"name": value} if isinstance(value, str) else value
    if not isinstance(data, dict) or data.get("name") not in TRAINERS:
        name = data.get("name") if isinstance(data, dict) else data
        raise ValueError(f"trainer: unknown trainer {name!r}; valid: {', '.join(TRAINERS)}")
    cls = TRAINERS[data["name"]]
    valid = sorted(cls.model_fields)
    for key in data:
        if key not in valid:
            raise ValueError(f"trainer.{key}: unknown option of trainer {data['name']}; "
                             f"valid: {', '.join(valid)}")
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as err:
        e = err.errors()[0]
        key = ".".join(str(x) for x in e["loc"][1:])
        raise ValueError(f"trainer.{key}: {e['msg']} (got {e.get('input')!r})") from None


def describe_trainer(profile: Profile) -> dict[str, Any]:
    """The profile as plain data, for the report."""
    return profile.model_dump(mode="json")
