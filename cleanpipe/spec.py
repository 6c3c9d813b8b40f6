"""The declarative pipeline: what a YAML pipeline file may say, validated on load.

    >>> spec = load_spec_text('''
    ... name: demo
    ... input: {path: data.jsonl}
    ... fields: [instruction, output]
    ... stages: []
    ... ''')
    >>> spec.name, spec.input.path, spec.output.format
    ('demo', 'data.jsonl', 'parquet')
    >>> load_spec_text("stages: []\\nbatchsize: 10\\n", "p.yaml")
    Traceback (most recent call last):
    ...
    cleanpipe.spec.ConfigError: p.yaml:2: batchsize: unknown key; did you mean 'batch_size'? ...

Errors are one line: file, line, key path, what is wrong, the valid choices and a guess.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cleanpipe.contract.stage import Stage
from cleanpipe.errors import CleanpipeError
from cleanpipe.gate import GateConfig
from cleanpipe.limits import MAX_BATCH_SIZE, MAX_ROWS_PER_PART, MAX_WORKERS, MAX_YAML_BYTES
from cleanpipe.spec_yaml import YamlLimitError, key_path_text, read_yaml
from cleanpipe.stage_order import StageOrderError, check_stage_order
from cleanpipe.templating.profiles import Profile, describe_trainer, parse_trainer


class ConfigError(CleanpipeError):
    """The pipeline file is wrong (exit code 2). ``str(err)`` is the one-line message."""


class InputSpec(BaseModel):
    """Where to read from and how."""

    model_config = ConfigDict(extra="forbid")
    path: str | list[str] | None = None
    """A file, a directory (read recursively, sorted), a glob, or a list of them."""
    format: Literal[
        "auto", "jsonl", "json", "parquet", "csv", "tsv", "arrow", "hf", "text"] = "auto"
    encoding: str = "utf-8"
    """Text encoding of JSON/CSV/text input, e.g. gb18030 or utf-16."""
    on_parse_error: Literal["quarantine", "fail"] = "quarantine"
    on_decode_error: Literal["replace", "quarantine", "fail"] = "replace"
    id_field: str | None = None
    """A column holding each record's own id; else ids are ``file:line``."""
    csv_delimiter: str | None = None
    text_column: str = "text"
    """Column name for plain-text input (one record per line)."""


class OutputSpec(BaseModel):
    """Where to write and in which form."""

    model_config = ConfigDict(extra="forbid")
    path: str | None = None
    format: Literal["parquet", "jsonl", "hf"] = "parquet"
    flag_column: str | None = None
    """Add a list<string> column of this name with the codes flagged on each kept row."""
    events: bool = True
    """Write events.parquet: one row per change, drop and flag."""
    rows_per_part: int = Field(1_000_000, ge=1, le=MAX_ROWS_PER_PART)


#: settings that change how fast a run goes, never what it writes (see docs/guarantees.md)
EXECUTION_KEYS = ("batch_size", "workers", "engine", "ray_address")


class PipelineSpec(BaseModel):
    """A whole pipeline. ``stages`` holds validated stage objects."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, allow_inf_nan=False)
    name: str = "pipeline"
    description: str = ""
    input: InputSpec = InputSpec()
    output: OutputSpec = OutputSpec()
    fields: list[str] | None = None
    """Text fields the text stages work on; default: every string field found."""
    batch_size: int = Field(4096, ge=1, le=MAX_BATCH_SIZE)
    """Rows per batch: changes speed and memory, never the output."""
    workers: int | None = Field(None, ge=1, le=MAX_WORKERS)
    """Worker processes (default: all cores): changes speed, never the output."""
    engine: Literal["local", "ray"] = "local"
    ray_address: str | None = None
    trainer: Profile | None = None
    """The trainer that will read the output (``trl``, ``llamafactory``, ``axolotl``,
    ``plain``, or a mapping with ``name:`` and its options): the length and trainable-token
    stages follow its template, truncation and loss masking unless they set their own."""
    stages: list[Any] = []
    gate: Any = None
    #: the file it came from (for messages)
    source: str | None = None

    @field_validator("trainer", mode="before")
    @classmethod
    def _parse_trainer(cls, value: Any) -> Any:
        return None if value is None else parse_trainer(value)

    def config_dict(self) -> dict[str, Any]:
        """The pipeline as plain data, as the report stores it: everything but the
        :data:`EXECUTION_KEYS` (the report records those with its timings)."""
        d = self.model_dump(mode="json", exclude={"stages", "gate", "source", "trainer",
                                                  *EXECUTION_KEYS})
        if self.trainer is not None:  # absent otherwise: older pipelines keep their hash
            d["trainer"] = describe_trainer(self.trainer)
        d["stages"] = [{"stage": s.name, **s.describe()} for s in self.stages]
        g = self.gate
        d["gate"] = g.model_dump(mode="json") if hasattr(g, "model_dump") else g
        return d

    def config_hash(self) -> str:
        """sha256 of what decides the results: :meth:`config_dict` less the name, the
        description, where the data lives (``input.path``, ``output.path``) and each stage's
        :attr:`~cleanpipe.contract.stage.Stage.execution_params`. Equal hashes: the same input
        gives the same output, byte for byte."""
        d = self.config_dict()
        for key in ("name", "description"):
            d.pop(key, None)
        d["input"].pop("path", None)
        d["output"].pop("path", None)
        d["stages"] = [{k: v for k, v in entry.items() if k not in type(s).execution_params}
                       for s, entry in zip(self.stages, d["stages"], strict=True)]
        blob = json.dumps(d, sort_keys=True, ensure_ascii=False).encode()
        return "sha256:" + hashlib.sha256(blob).hexdigest()


def check_setting(key: str, value: Any, option: str) -> Any:
    """A command-line override of a top-level setting, validated as the file's value is.

        >>> check_setting("workers", 4, "--workers")
        4
        >>> check_setting("batch_size", 0, "--batch-size")
        Traceback (most recent call last):
        ...
        cleanpipe.spec.ConfigError: --batch-size 0: Input should be greater than or equal to 1
    """
    try:
        return getattr(PipelineSpec.model_validate({key: value}), key)
    except ValidationError as err:
        raise ConfigError(f"{option} {value}: {err.errors()[0]['msg']}") from None


def _fmt_path(loc: tuple[Any, ...]) -> str:
    return key_path_text(loc) or "(top level)"


def _where(source: str | None, lines: dict[tuple[Any, ...], int], loc: tuple[Any, ...]) -> str:
    src = source or "<pipeline>"
    for n in range(len(loc), 0, -1):
        if loc[:n] in lines:
            return f"{src}:{lines[loc[:n]]}"
    return src


def _guess(word: str, choices: list[str]) -> str:
    m = difflib.get_close_matches(str(word), choices, n=1, cutoff=0.6)
    return f"did you mean {m[0]!r}? " if m else ""


def _model_keys(model: type[BaseModel]) -> list[str]:
    return sorted(model.model_fields)


def _raise_validation(err: ValidationError, model: type[BaseModel], base: tuple[Any, ...],
                      source: str | None, lines: dict[tuple[Any, ...], int]) -> None:
    e = err.errors()[0]
    loc = tuple(e["loc"])
    full = base + loc
    where = _where(source, lines, full)
    key = _fmt_path(full)
    if e["type"] == "extra_forbidden":
        sub: Any = model
        for p in loc[:-1]:
            f = getattr(sub, "model_fields", {}).get(p)
            ann = getattr(f, "annotation", None) if f else None
            sub = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
            if sub is None:
                break
        keys = _model_keys(sub) if sub is not None else []
        raise ConfigError(f"{where}: {key}: unknown key; {_guess(loc[-1], keys)}"
                          f"valid keys: {', '.join(keys)}") from None
    msg = e["msg"]
    ctx = e.get("ctx") or {}
    if "expected" in ctx:
        msg = f"{msg}"
    raise ConfigError(f"{where}: {key}: {msg} (got {e.get('input')!r})") from None


def build_stage(entry: Any, index: int, source: str | None = None,
                lines: dict[tuple[Any, ...], int] | None = None) -> Stage:
    """A stage object from one ``stages:`` entry (``{stage: NAME, ...params}``, or a stage
    object built in code, taken as it is)."""
    from cleanpipe.stages.registry import get_stage_class, stage_classes

    lines = lines or {}
    loc: tuple[Any, ...] = ("stages", index)
    if isinstance(entry, Stage):
        return entry
    if isinstance(entry, str):
        entry = {"stage": entry}
    if not isinstance(entry, dict) or "stage" not in entry:
        raise ConfigError(f"{_where(source, lines, loc)}: {_fmt_path(loc)}: each stage is a"
                          " mapping with a 'stage:' key, e.g. '- stage: unicode_fix'")
    params = dict(entry)
    name = params.pop("stage")
    cls = get_stage_class(str(name))
    if cls is None:
        classes = stage_classes()
        raise ConfigError(
            f"{_where(source, lines, (*loc, 'stage'))}: {_fmt_path((*loc, 'stage'))}: unknown"
            f" stage {name!r}; {_guess(name, list(classes))}valid stages: {', '.join(classes)}"
        )
    try:
        return cls.model_validate(params)
    except ValidationError as err:
        _raise_validation(err, cls, loc, source, lines)
        raise  # pragma: no cover


def _with_trainer(entry: Any, trainer: Any) -> Any:
    """A stage entry with the pipeline's ``trainer:`` added, for stages that follow one and
    do not set their own."""
    from cleanpipe.contract.sequence_stage import SequenceStage
    from cleanpipe.stages.registry import get_stage_class

    if not isinstance(entry, dict) or "trainer" in entry:
        return entry
    cls = get_stage_class(str(entry.get("stage")))
    if cls is None or not issubclass(cls, SequenceStage):
        return entry
    return {**entry, "trainer": trainer}


def spec_from_dict(data: Any, source: str | None = None,
                   lines: dict[tuple[Any, ...], int] | None = None) -> PipelineSpec:
    """A validated pipeline from plain data; ``lines`` (key path -> line, as
    :func:`~cleanpipe.spec_yaml.read_yaml` gives) let errors name the line."""
    lines = lines or {}
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source or '<pipeline>'}: a pipeline is a mapping (name:, input:,"
                          " stages:, ...), not a {type(data).__name__}")
    data = dict(data)
    raw_stages = data.pop("stages", []) or []
    raw_gate = data.pop("gate", None)
    if not isinstance(raw_stages, list):
        raise ConfigError(f"{_where(source, lines, ('stages',))}: stages: must be a list")
    try:
        spec = PipelineSpec.model_validate(data)
    except ValidationError as err:
        _raise_validation(err, PipelineSpec, (), source, lines)
        raise  # pragma: no cover
    if data.get("trainer") is not None:
        raw_stages = [_with_trainer(e, data["trainer"]) for e in raw_stages]
    spec.stages = [build_stage(e, i, source, lines) for i, e in enumerate(raw_stages)]
    try:
        check_stage_order(spec.stages)
    except StageOrderError as err:
        loc = ("stages", err.index)
        raise ConfigError(f"{_where(source, lines, loc)}: {err}") from None
    if raw_gate is not None:
        try:
            spec.gate = GateConfig.model_validate(raw_gate)
        except ValidationError as err:
            _raise_validation(err, GateConfig, ("gate",), source, lines)
        codes: dict[str, list[str]] = {"read": ["parse_error", "decode_error"]}
        for st in spec.stages:
            codes.setdefault(st.name, []).extend(st.codes)
        unknown = spec.gate.unknown_reasons(codes)
        if unknown:
            known = sorted({c for cs in codes.values() for c in cs})
            raise ConfigError(
                f"{_where(source, lines, ('gate',))}: gate: reason {unknown[0]!r} is not a code"
                f" of any stage in this pipeline; {_guess(unknown[0].split('/')[-1], known)}"
                f"codes: {', '.join(known)}")
    spec.source = source
    return spec


def load_spec_text(text: str, source: str | None = None) -> PipelineSpec:
    try:
        data, lines = read_yaml(text, source)
    except YamlLimitError as e:
        raise ConfigError(str(e)) from None
    return spec_from_dict(data, source, lines=lines)


def load_spec(path: str | Path) -> PipelineSpec:
    p = Path(path)
    try:
        if p.stat().st_size > MAX_YAML_BYTES:
            raise ConfigError(f"{p}: {p.stat().st_size:,} bytes: a pipeline file may hold at"
                              f" most {MAX_YAML_BYTES:,} bytes")
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such pipeline file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: cannot read the pipeline file: {e}") from None
    return load_spec_text(text, str(p))
