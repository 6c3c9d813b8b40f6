"""A stage's parameter descriptions, read from the docstrings under its fields, on demand.

A stage documents a parameter with a string right below it (an *attribute docstring*).
Pydantic can copy those into each field's ``description`` when the class is defined
(``use_attribute_docstrings``), but it does so by reading and parsing the class's source
file: ~0.2 s over the stage modules, paid by every process that imports them (the CLI, a
fork server, every Ray worker), while only ``cleanpipe stages`` shows the descriptions.
So they are read here, when asked for.

    >>> from cleanpipe.stages.exact_dedup import ExactDedup
    >>> descriptions(ExactDedup)["action"]  # documented on the base class, Stage
    'Action for every code of this stage (overrides the defaults).'
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from functools import cache
from itertools import pairwise

from pydantic import BaseModel


def descriptions(model: type[BaseModel]) -> dict[str, str]:
    """Per field of ``model`` that has one, its description: the ``description`` given in
    code, else the docstring under the field where it was last declared."""
    docs = attribute_docstrings(model)
    out = {}
    for name, field in model.model_fields.items():
        text = field.description or docs.get(name)
        if text:
            out[name] = text
    return out


@cache
def attribute_docstrings(cls: type[BaseModel]) -> dict[str, str]:
    """The docstrings under annotated class attributes of ``cls`` and its bases, as pydantic
    read them: a class that declares a field again replaces the base's docstring with its
    own, or with none; pydantic's ``BaseModel`` and classes whose source cannot be read
    contribute none."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not issubclass(klass, BaseModel) or klass is BaseModel:
            continue
        own = _own(klass)
        for name in inspect.get_annotations(klass):
            out.pop(name, None)
        out.update(own)
    return out


@cache
def _own(klass: type) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):  # built in, or defined where no source file is kept
        return {}
    tree = ast.parse(source)
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    out = {}
    for stmt, after in pairwise(body):
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            out[stmt.target.id] = inspect.cleandoc(after.value.value)
    return out
