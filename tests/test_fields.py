from __future__ import annotations

import pyarrow as pa
import pytest

from cleanpipe.fields import FieldError, discover_text_fields, flatten_field, rebuild_field


def _chat() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([
        {"id": 1, "conversations": [{"from": "human", "value": "hi"},
                                    {"from": "gpt", "value": "yo"}], "chosen": {"value": "c"}},
        {"id": 2, "conversations": None, "chosen": None},
        {"id": 3, "conversations": [], "chosen": {"value": None}},
        {"id": 4, "conversations": [{"from": "human", "value": None}], "chosen": {"value": "d"}},
    ])


def test_flatten_nested_list_struct() -> None:
    vals, rows = flatten_field(_chat(), "conversations[*].value")
    assert vals.to_pylist() == ["hi", "yo", None]
    assert rows.tolist() == [0, 0, 3]


def test_rebuild_round_trip_is_identity() -> None:
    b = _chat()
    for sel in ("conversations[*].value", "conversations[*].from", "chosen.value"):
        vals, _ = flatten_field(b, sel)
        assert rebuild_field(b, sel, vals).equals(b)


def test_rebuild_changes_only_target() -> None:
    b = _chat()
    out = rebuild_field(b, "conversations[*].value", pa.array(["HI", "YO", None]))
    assert out.schema == b.schema
    assert out.column(1).to_pylist()[0] == [{"from": "human", "value": "HI"},
                                            {"from": "gpt", "value": "YO"}]
    assert out.column(1).to_pylist()[1] is None
    assert out.column(2).equals(b.column(2))


def test_rebuild_sliced_batch() -> None:
    b = _chat().slice(1, 3)
    vals, rows = flatten_field(b, "conversations[*].value")
    assert rows.tolist() == [2]
    assert rebuild_field(b, "conversations[*].value", vals).to_pylist() == b.to_pylist()


def test_errors_name_the_selector() -> None:
    with pytest.raises(FieldError, match="no column 'message'"):
        flatten_field(_chat(), "message[*].content")
    with pytest.raises(FieldError, match=r"no key .content.*from, value"):
        flatten_field(_chat(), "conversations[*].content")
    with pytest.raises(FieldError, match="not a list"):
        flatten_field(_chat(), "chosen[*].value")


def test_discover() -> None:
    assert discover_text_fields(_chat().schema) == [
        "conversations[*].from", "conversations[*].value", "chosen.value"]


def test_list_of_lists() -> None:
    b = pa.RecordBatch.from_pylist([{"n": [["a", "b"], [], None, ["c"]]}, {"n": None}])
    assert discover_text_fields(b.schema) == ["n[*][*]"]
    vals, rows = flatten_field(b, "n[*][*]")
    assert vals.to_pylist() == ["a", "b", "c"] and rows.tolist() == [0, 0, 0]
    out = rebuild_field(b, "n[*][*]", pa.array(["A", "B", "C"]))
    assert out.column(0).to_pylist() == [[["A", "B"], [], None, ["C"]], None]
    assert rebuild_field(b, "n[*][*]", vals).equals(b)
