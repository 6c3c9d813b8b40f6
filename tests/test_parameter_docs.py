"""Stage parameter descriptions read from the docstrings under the fields, on demand, as
pydantic's ``use_attribute_docstrings`` read them at import."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from cleanpipe.contract.parameter_docs import descriptions


class _Base(BaseModel):
    size: int = 3
    """Rows per batch."""
    mode: str = "a"
    """How to go."""


class _Child(_Base):
    size: int = 4  # declared again, without a docstring: pydantic showed none
    name: str = Field("x", description="given in code")
    """The docstring loses to the description given in code."""


class _GrandChild(_Child):
    size: int = 5
    """Rows per batch, again."""


class _Pydantic(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)
    size: int = 3
    """Rows per batch."""
    mode: str = "a"
    """How to go."""


class _PydanticChild(_Pydantic):
    size: int = 4
    name: str = Field("x", description="given in code")
    """The docstring loses to the description given in code."""


def test_docstrings_read_as_pydantic_read_them() -> None:
    assert descriptions(_Base) == {"size": "Rows per batch.", "mode": "How to go."}
    assert descriptions(_Child) == {"mode": "How to go.", "name": "given in code"}
    assert descriptions(_GrandChild)["size"] == "Rows per batch, again."
    pydantic_own = {n: f.description for n, f in _PydanticChild.model_fields.items()
                    if f.description}
    assert descriptions(_Child) == pydantic_own
