"""``schema``: required fields, types, chat structure and preference pairs.

Chat checks run on a ``messages``/``conversations`` column (OpenAI ``role``/``content`` or
ShareGPT ``from``/``value``), vectorised over the flattened turns: unknown roles, the first
turn (system or user), the last turn (assistant), user/assistant alternation (system and
tool turns aside) and empty assistant turns. Preference checks: ``chosen`` and ``rejected``
both non-empty and different.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cleanpipe.columns import is_utf8
from cleanpipe.contract.stage import Action, BatchContext, BatchResult, BatchStage, Findings
from cleanpipe.templating.chat import KNOWN_ROLES, SHAREGPT_ROLES

_TYPES = {
    "string": is_utf8,
    "int": pa.types.is_integer,
    "float": lambda t: pa.types.is_floating(t) or pa.types.is_integer(t),
    "bool": pa.types.is_boolean,
    "list": lambda t: pa.types.is_list(t) or pa.types.is_large_list(t),
    "struct": pa.types.is_struct,
}


def _text_of(col: pa.Array) -> pa.Array:
    """A string column, or the ``value``/``content`` of a struct column (LLaMA-Factory DPO)."""
    if pa.types.is_struct(col.type):
        for key in ("content", "value", "text"):
            if col.type.get_field_index(key) >= 0:
                return pc.struct_field(col, key)
    return col


class SchemaCheck(BatchStage):
    """Check the shape of each record.

        >>> SchemaCheck(required=["text"], chat_field=None)({"text": ["ok", "", None]})
        {'text': ['ok']}
    """

    name = "schema"
    codes = {"missing_field": Action.DROP, "null_field": Action.DROP,
             "empty_field": Action.DROP, "wrong_type": Action.DROP,
             "unknown_role": Action.DROP, "bad_first_role": Action.DROP,
             "bad_last_role": Action.DROP, "not_alternating": Action.DROP,
             "empty_assistant": Action.DROP, "empty_preference": Action.DROP,
             "chosen_equals_rejected": Action.DROP}
    forbidden_actions = dict.fromkeys(codes, frozenset({Action.FIX}))

    required: list[str] = []
    """Columns that must exist, be non-null and (strings, lists) non-empty."""
    types: dict[str, Literal["string", "int", "float", "bool", "list", "struct"]] = {}
    """Expected type per column."""
    chat_field: str | None = "auto"
    """Chat column to check (``auto``: ``messages`` or ``conversations`` when present)."""
    first_roles: list[str] = ["system", "user"]
    last_roles: list[str] = ["assistant"]
    role_map: dict[str, str] = {}
    """Extra ShareGPT ``from`` → role mappings."""
    chosen_field: str = "chosen"
    rejected_field: str = "rejected"

    def process(self, batch: pa.RecordBatch, ctx: BatchContext) -> BatchResult:
        n = batch.num_rows
        found = Findings(self.name)
        names = batch.schema.names
        for f in self.required:
            if f not in names:
                found.add(np.arange(n), "missing_field", self.action_of("missing_field"),
                          field=f, detail=f"no column {f!r}")
                continue
            col = batch.column(names.index(f))
            found.add(col.is_null(), "null_field", self.action_of("null_field"), field=f)
            if _TYPES["string"](col.type):
                empty = pc.fill_null(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(col)), 0),
                                     False)
                found.add(empty, "empty_field", self.action_of("empty_field"), field=f)
            elif _TYPES["list"](col.type):
                empty = pc.fill_null(pc.equal(pc.list_value_length(col), 0), False)
                found.add(empty, "empty_field", self.action_of("empty_field"), field=f)
        for f, t in self.types.items():
            if f in names and not _TYPES[t](batch.schema.field(f).type):
                found.add(np.arange(n), "wrong_type", self.action_of("wrong_type"), field=f,
                          detail=f"{f} is {batch.schema.field(f).type}, expected {t}")
        chat = self.chat_field
        if chat == "auto":
            chat = next((c for c in ("messages", "conversations") if c in names), None)
        if chat is not None and chat in names:
            self._chat(batch, chat, found)
        if self.chosen_field in names and self.rejected_field in names:
            ch = _text_of(batch.column(names.index(self.chosen_field)))
            rj = _text_of(batch.column(names.index(self.rejected_field)))
            if _TYPES["string"](ch.type) and _TYPES["string"](rj.type):
                empty = pc.or_(pc.fill_null(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(ch)),
                                                     0), True),
                               pc.fill_null(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(rj)),
                                                     0), True))
                found.add(empty, "empty_preference", self.action_of("empty_preference"),
                          field=self.chosen_field)
                same = pc.fill_null(pc.equal(ch, rj), False)
                found.add(same, "chosen_equals_rejected",
                          self.action_of("chosen_equals_rejected"), field=self.chosen_field)
        return BatchResult(None, found, {"rows": n, **found.codes()})

    def _chat(self, batch: pa.RecordBatch, chat: str, found: Findings) -> None:
        col = batch.column(batch.schema.get_field_index(chat))
        st = col.type.value_type
        role_key = "role" if st.get_field_index("role") >= 0 else "from"
        text_key = "content" if st.get_field_index("content") >= 0 else "value"
        flat = pc.list_flatten(col)
        owner = pc.list_parent_indices(col).to_numpy(zero_copy_only=False)
        raw = pc.fill_null(pc.struct_field(flat, role_key), "")
        roles_map = {**SHAREGPT_ROLES, **self.role_map}
        keys = pa.array(list(roles_map), pa.string())
        vals = pa.array(list(roles_map.values()), pa.string())
        idx = pc.index_in(pc.cast(raw, pa.string()), value_set=keys)
        roles = pc.if_else(pc.is_valid(idx), pc.take(vals, pc.fill_null(idx, 0)),
                           pc.cast(raw, pa.string()))
        r = np.asarray(roles.to_numpy(zero_copy_only=False), dtype=object)
        unknown = ~np.isin(r, list(KNOWN_ROLES))
        found.add(np.unique(owner[unknown]), "unknown_role", self.action_of("unknown_role"),
                  field=chat, detail=[f"role {v!r}" for v in
                                      r[unknown][np.unique(owner[unknown], return_index=True)[1]]])
        n = batch.num_rows
        lens = pc.fill_null(pc.list_value_length(col), 0).to_numpy(zero_copy_only=False)
        has = lens > 0
        found.add(~has, "empty_field", self.action_of("empty_field"), field=chat,
                  detail="no turns")
        starts = np.zeros(n, dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        first = np.flatnonzero(has)
        bad_first = first[~np.isin(r[starts[first]], self.first_roles)]
        found.add(bad_first, "bad_first_role", self.action_of("bad_first_role"), field=chat,
                  detail=[f"first turn is {r[starts[i]]!r}" for i in bad_first])
        ends = starts + lens - 1
        bad_last = first[~np.isin(r[ends[first]], self.last_roles)]
        found.add(bad_last, "bad_last_role", self.action_of("bad_last_role"), field=chat,
                  detail=[f"last turn is {r[ends[i]]!r}" for i in bad_last])
        # Alternation between user and assistant turns, system and tool turns set aside.
        conv = np.isin(r, ["user", "assistant"])
        cr, co = r[conv], owner[conv]
        same = (co[1:] == co[:-1]) & (cr[1:] == cr[:-1])
        found.add(np.unique(co[1:][same]), "not_alternating", self.action_of("not_alternating"),
                  field=chat, detail="two user or two assistant turns in a row")
        text = pc.fill_null(pc.struct_field(flat, text_key), "")
        if _TYPES["string"](text.type):
            blank = pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(text)), 0) \
                .to_numpy(zero_copy_only=False)
            ea = np.unique(owner[(r == "assistant") & blank])
            found.add(ea, "empty_assistant", self.action_of("empty_assistant"), field=chat,
                      detail="an assistant turn is empty")
