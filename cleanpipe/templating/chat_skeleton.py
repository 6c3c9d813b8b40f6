"""Chat templates rendered once per conversation shape, then filled in: exact, ~20x faster.

A chat template is jinja code that costs ~0.1 ms a conversation in jinja's sandbox; the
default SFT pipeline renders every row, so rendering was most of ``context_length``'s
time. Yet a template sees a message's text only through a few operations: it writes it
out, concatenates it, strips it, or asks a question of it (``'</think>' in content``,
``content.startswith('<tool_response>')``, ``content|length``). So the template is run
once with each content replaced by a :class:`Traced` string that records those operations:

* a question is answered from the real text and recorded with its answer (a *guard*);
* a transformation (``strip``, ``lstrip``, ``rstrip``, ``+``) yields another traced value
  that remembers how it was made;
* writing it out writes a marker (``\\ue000<n>\\ue001``, private-use characters).

The output, split at its markers, is a *skeleton*: literal text and the recipe of each
traced value. Another conversation with the same roles in the same order whose texts give
the same answers to every guard takes, step by step, the same path through the template
(jinja is deterministic and saw nothing else of the texts), so its rendering is the skeleton
with its own texts substituted. Any other operation on a traced value raises
:class:`Unsupported` and that conversation is rendered by jinja instead.

Texts can also reach the template's control flow through Python internals that bypass
:class:`Traced`'s methods (``content in 'literal'``, ``'x'.startswith(content)``,
``a ~ b`` stored in a variable, ``%``-formatting, filters such as ``replace``). A template
that could do any of that is refused up front by :func:`eligible`, which reads its syntax
tree; every conversation of such a template goes to jinja. As a last check, the first
conversations each skeleton fills are also rendered by jinja and compared; a difference
switches the skeletons off for that template for good (it would be a bug here).

    >>> from jinja2.sandbox import ImmutableSandboxedEnvironment
    >>> src = ("{% for m in messages %}{% if m.content.startswith('!') %}[cmd]{% endif %}"
    ...        "<{{ m.role }}>{{ m.content | trim }}\\n{% endfor %}")
    >>> env = ImmutableSandboxedEnvironment()
    >>> env.filters["tojson"] = lambda v: ""
    >>> eligible(src, env)
    True
    >>> t = env.from_string(src)
    >>> r = SkeletonRenderer(t, {}, lambda msgs, gen: t.render(messages=msgs))
    >>> r.render([{"role": "user", "content": " hi "}], False)
    '<user>hi\\n'
    >>> r.render([{"role": "user", "content": "yo  "}], False)  # filled, no jinja
    '<user>yo\\n'
    >>> r.render([{"role": "user", "content": "!go"}], False)  # another guard answer
    '[cmd]<user>!go\\n'
    >>> r.stats["filled"], r.stats["traced"]
    (1, 2)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import itemgetter
from typing import Any

import jinja2
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from jinja2 import nodes

OPEN, CLOSE = "\ue000", "\ue001"
_MARKER = re.compile(f"{OPEN}(\\d+){CLOSE}")

#: Filters whose use of a text is visible to :class:`Traced` (``length`` calls ``len``,
#: ``trim`` calls ``strip``; ``tojson`` refuses traced values, see :func:`refuse_traced`).
SAFE_FILTERS = frozenset({"length", "count", "trim", "tojson"})
#: Tests that look only at a value's type, or at values that are never texts.
SAFE_TESTS = frozenset({"string", "defined", "undefined", "none", "false", "true", "mapping",
                        "sequence", "iterable", "number", "boolean", "integer", "float",
                        "odd", "even", "divisibleby"})
#: Callables a template may call with non-literal arguments (none returns a text).
SAFE_CALLEES = frozenset({"namespace", "raise_exception", "range"})
#: How many of each skeleton's first fills are checked against jinja.
CHECKED_FILLS = 2
#: Skeletons one shape of a batch tries (:meth:`SkeletonRenderer.render_columns`) before
#: leaving its remaining rows to :meth:`SkeletonRenderer.render`, one at a time.
COLUMN_SKELETONS = 16
#: What ``str.strip()`` removes (``str.isspace``): Arrow's own whitespace trim differs.
PY_WHITESPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003"
                 "\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_TRIMS = {"strip": pc.utf8_trim, "lstrip": pc.utf8_ltrim, "rstrip": pc.utf8_rtrim}
_EMPTY = pa.scalar("", pa.large_string())


class Unsupported(Exception):
    """A traced text met an operation the skeleton could not replay."""


# A recipe: ("msg", i) a message's content; ("call", recipe, method, args) a transformed
# text; ("cat", parts) a concatenation of literal strings and recipes.
Recipe = tuple[Any, ...]
#: Where a message's text went in a rendering: start and end of what the template wrote of
#: it, and how many of its first characters that leaves out (a ``strip``).
Place = tuple[int, int, int]

_QUESTIONS = ("startswith", "endswith", "find", "rfind", "count", "isspace", "isdigit",
              "isalpha", "isalnum", "isupper", "islower")
_TRANSFORMS = ("strip", "lstrip", "rstrip", "lower", "upper")


def ask(text: str, op: str, args: tuple[Any, ...]) -> Any:
    """The answer ``text`` gives to question ``op``: a ``str`` method, or ``"truth"``."""
    return len(text) > 0 if op == "truth" else getattr(text, op)(*args)


class Tracer:
    """Hands out traced contents for one conversation and records what was asked of them."""

    def __init__(self, contents: Sequence[str]) -> None:
        self.contents = list(contents)
        self.guards: list[tuple[Recipe, str, tuple[Any, ...], Any]] = []
        self.recipes: list[Recipe] = []

    def leaf(self, i: int) -> Traced:
        return self.make(("msg", i), self.contents[i])

    def make(self, recipe: Recipe, real: str, marker: str | None = None) -> Traced:
        if marker is None:
            self.recipes.append(recipe)
            marker = f"{OPEN}{len(self.recipes) - 1}{CLOSE}"
        t = Traced(marker)
        t.tracer, t.recipe, t.real = self, recipe, real
        return t

    def ask(self, t: Traced, op: str, args: tuple[Any, ...]) -> Any:
        for a in args:
            if not isinstance(a, str | int | type(None)) or isinstance(a, Traced | bool):
                raise Unsupported(f"{op} with a {type(a).__name__} argument")
        answer = ask(t.real, op, args)
        self.guards.append((t.recipe, op, args, answer))
        return answer


class Traced(str):
    """A message text as the template sees it while a skeleton is traced (see the module).

    Its own characters are a marker; ``real`` is the text it stands for."""

    tracer: Tracer
    recipe: Recipe
    real: str

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        if spec:
            raise Unsupported("format spec")
        return str.__str__(self)

    def __add__(self, other: object) -> Traced:
        return self._cat(self, other)

    def __radd__(self, other: object) -> Traced:
        return self._cat(other, self)

    def _cat(self, left: object, right: object) -> Traced:
        parts: list[Any] = []
        marker, real = "", ""
        for v in (left, right):
            if isinstance(v, Traced):
                if v.tracer is not self.tracer:
                    raise Unsupported("texts of two traces")
                parts.extend(v.recipe[1] if v.recipe[0] == "cat" else [v.recipe])
                marker, real = marker + str.__str__(v), real + v.real
            elif type(v) is str:
                parts.append(v)
                marker, real = marker + v, real + v
            else:
                raise Unsupported(f"+ with a {type(v).__name__}")
        return self.tracer.make(("cat", parts), real, marker)

    def __contains__(self, item: object) -> bool:
        return bool(self.tracer.ask(self, "__contains__", (item,)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Traced):
            raise Unsupported("two texts compared")
        return bool(self.tracer.ask(self, "__eq__", (other,))) if isinstance(other, str) \
            else False

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __len__(self) -> int:
        return int(self.tracer.ask(self, "__len__", ()))

    def __bool__(self) -> bool:
        return bool(self.tracer.ask(self, "truth", ()))

    __hash__ = None  # type: ignore[assignment]  # a dict lookup would bypass the guards


def _ask(op: str) -> Callable[..., Any]:
    def method(self: Traced, *args: Any) -> Any:
        return self.tracer.ask(self, op, args)
    method.__name__ = op
    return method


def _transform(op: str) -> Callable[..., Traced]:
    def method(self: Traced, *args: Any) -> Traced:
        for a in args:
            if not isinstance(a, str | type(None)) or isinstance(a, Traced):
                raise Unsupported(f"{op} with a {type(a).__name__} argument")
        return self.tracer.make(("call", self.recipe, op, args), getattr(self.real, op)(*args))
    method.__name__ = op
    return method


def _refuse(op: str) -> Callable[..., Any]:
    def method(self: Traced, *args: Any, **kwargs: Any) -> Any:
        raise Unsupported(op)
    method.__name__ = op
    return method


for _op in _QUESTIONS:
    setattr(Traced, _op, _ask(_op))
for _op in _TRANSFORMS:
    setattr(Traced, _op, _transform(_op))
_KEEP = {"__new__", "__init__", "__getattribute__", "__setattr__", "__delattr__", "__class__",
         "__init_subclass__", "__subclasshook__", "__doc__", "__dir__", "__sizeof__",
         "__reduce__", "__reduce_ex__", "__getnewargs__", "__getstate__", "__str__",
         "__format__", "__add__", "__radd__", "__contains__", "__eq__", "__ne__", "__len__",
         "__bool__", "__hash__", "__repr__"}
for _op in dir(str):
    if _op not in _KEEP and _op not in _QUESTIONS and _op not in _TRANSFORMS:
        setattr(Traced, _op, _refuse(_op))
for _op in ("__lt__", "__le__", "__gt__", "__ge__", "__mul__", "__rmul__", "__mod__",
            "__rmod__", "__iter__", "__getitem__", "__reversed__", "__int__", "__float__"):
    setattr(Traced, _op, _refuse(_op))


def refuse_traced(func: Callable[..., str]) -> Callable[..., str]:
    """``func`` (a filter such as ``tojson``) that raises :class:`Unsupported` when its
    value holds a traced text: it would read the marker's characters, not the text's."""
    def wrapped(value: Any, *args: Any, **kwargs: Any) -> str:
        if _holds_traced(value):
            raise Unsupported(getattr(func, "__name__", "filter"))
        return func(value, *args, **kwargs)
    return wrapped


def _holds_traced(value: Any) -> bool:
    if isinstance(value, Traced):
        return True
    if isinstance(value, Mapping):
        return any(_holds_traced(k) or _holds_traced(v) for k, v in value.items())
    if isinstance(value, list | tuple | set):
        return any(_holds_traced(v) for v in value)
    return False


def eligible(source: str, env: jinja2.Environment) -> bool:
    """Whether ``source`` sees texts only through what :class:`Traced` records (see the
    module): known filters and tests, ``in`` only with a literal on its left, calls of
    methods only with literal arguments, ``~`` only where its result is written out at
    once, no ``%``, and no macros, blocks or captured output (they turn written text into
    values).

        >>> env = jinja2.Environment()
        >>> eligible("{{ messages[0].content ~ '!' }}", env)
        True
        >>> eligible("{% set x = messages[0].content ~ '!' %}{{ 'a' in x }}", env)
        False
        >>> eligible("{{ messages[0].content in 'abc' }}", env)
        False
    """
    if OPEN in source or CLOSE in source:
        return False
    try:
        tree = env.parse(source)
    except jinja2.TemplateSyntaxError:
        return False
    written = {id(n) for out in tree.find_all(nodes.Output) for n in out.nodes}
    for node in tree.find_all(nodes.Node):
        if isinstance(node, nodes.Filter | nodes.FilterBlock):
            if isinstance(node, nodes.FilterBlock) or node.name not in SAFE_FILTERS:
                return False
        elif isinstance(node, nodes.Test):
            if node.name not in SAFE_TESTS:
                return False
        elif isinstance(node, nodes.Concat) and id(node) not in written:
            return False
        elif isinstance(node, nodes.Mod | nodes.Macro | nodes.CallBlock | nodes.Block
                        | nodes.AssignBlock | nodes.Include | nodes.Import | nodes.FromImport
                        | nodes.Extends):
            # each of these turns written text (markers) into a value the template can test
            return False
        elif isinstance(node, nodes.Compare):
            left = node.expr
            for operand in node.ops:
                if operand.op in ("in", "notin") and not isinstance(left, nodes.Const):
                    return False
                left = operand.expr
        elif isinstance(node, nodes.Call) and not _safe_call(node):
            return False
    return True


def _safe_call(node: nodes.Call) -> bool:
    if isinstance(node.node, nodes.Name):
        return node.node.name in SAFE_CALLEES
    literal = all(isinstance(a, nodes.Const) for a in node.args) and all(
        isinstance(k.value, nodes.Const) for k in node.kwargs)
    return literal and node.dyn_args is None and node.dyn_kwargs is None


def compiled(recipe: Recipe) -> Callable[[Sequence[str]], str]:
    """The function that makes ``recipe``'s text from a conversation's contents, resolved
    once into nested closures (a skeleton evaluates its recipes for every row).

        >>> compiled(("cat", ["<", ("call", ("msg", 1), "strip", ()), ">"]))(["", " a "])
        '<a>'
    """
    kind = recipe[0]
    if kind == "msg":
        return itemgetter(recipe[1])
    if kind == "call":
        inner, op, args = compiled(recipe[1]), recipe[2], recipe[3]
        return lambda c: getattr(inner(c), op)(*args)
    parts = [(lambda c, p=p: p) if isinstance(p, str) else compiled(p) for p in recipe[1]]
    return lambda c: "".join([f(c) for f in parts])


def column(recipe: Recipe, columns: Sequence[pa.Array]) -> pa.Array:
    """``recipe``'s text for every row at once, from each message's ``columns`` (large
    strings, no nulls); :class:`Unsupported` where Arrow has no exact equivalent.

        >>> column(("cat", ["<", ("call", ("msg", 0), "strip", ()), ">"]),
        ...        [pa.array([" a ", "b\u3000"], pa.large_string())]).to_pylist()
        ['<a>', '<b>']
    """
    kind = recipe[0]
    if kind == "msg":
        return columns[recipe[1]]
    if kind == "call":
        op, args = recipe[2], recipe[3]
        if op not in _TRIMS or len(args) > 1:
            raise Unsupported(op)
        chars = args[0] if args and args[0] is not None else PY_WHITESPACE
        inner = column(recipe[1], columns)
        return _TRIMS[op](inner, characters=chars) if chars else inner
    parts = [pa.scalar(p, pa.large_string()) if isinstance(p, str) else column(p, columns)
             for p in recipe[1]]
    return pc.binary_join_element_wise(*parts, _EMPTY)


def answers(values: pa.Array, op: str, args: tuple[Any, ...]) -> np.ndarray:
    """What each of ``values`` answers to question ``op`` (see :func:`ask`);
    :class:`Unsupported` for a question Arrow cannot answer exactly."""
    if op in ("truth", "__len__"):
        n = pc.utf8_length(values).to_numpy(zero_copy_only=False)
        return n > 0 if op == "truth" else n
    if len(args) != 1 or type(args[0]) is not str:
        raise Unsupported(op)
    kernel = {"startswith": pc.starts_with, "endswith": pc.ends_with,
              "__contains__": pc.match_substring}.get(op)
    if kernel is not None:
        got = kernel(values, pattern=args[0])
    elif op == "__eq__":
        got = pc.equal(values, pa.scalar(args[0], values.type))
    else:
        raise Unsupported(op)
    return got.to_numpy(zero_copy_only=False)


def _mentions(recipe: Recipe, i: int) -> bool:
    if recipe[0] == "msg":
        return bool(recipe[1] == i)
    if recipe[0] == "call":
        return _mentions(recipe[1], i)
    return any(not isinstance(p, str) and _mentions(p, i) for p in recipe[1])


@dataclass
class Filled:
    """Rows of one conversation shape rendered from one skeleton, all at once: their
    positions among the rows given, their texts, and where each message's text went
    (:meth:`_Skeleton.places`)."""

    rows: np.ndarray
    texts: pa.Array
    places: list[tuple[np.ndarray, np.ndarray, np.ndarray]]


class _Skeleton:
    """One path through the template: its guards and its output, split at the markers."""

    def __init__(self, tracer: Tracer, output: str) -> None:
        self.guards = [(compiled(r), op, args, answer) for r, op, args, answer in tracer.guards]
        self.guard_recipes = list(tracer.guards)
        self.parts: list[str | Callable[[Sequence[str]], str]] = []
        self.part_recipes: list[str | Recipe] = []
        pos = 0
        for m in _MARKER.finditer(output):
            if m.start() > pos:
                self.parts.append(output[pos:m.start()])
                self.part_recipes.append(output[pos:m.start()])
            recipe = tracer.recipes[int(m.group(1))]
            self.parts.append(compiled(recipe))
            self.part_recipes.append(recipe)
            pos = m.end()
        if pos < len(output):
            self.parts.append(output[pos:])
            self.part_recipes.append(output[pos:])
        self.fills = 0
        #: per message, the part that writes its text and that part's recipe, where the
        #: text is written once, as it is or trimmed (else None: searched for instead)
        self.placements = [self._placement(i) for i in range(len(tracer.contents))]

    def _placement(self, i: int) -> tuple[int, Recipe] | None:
        at = [k for k, p in enumerate(self.part_recipes)
              if not isinstance(p, str) and _mentions(p, i)]
        recipe = self.part_recipes[at[0]] if len(at) == 1 else None
        if recipe == ("msg", i) or (
                isinstance(recipe, tuple) and recipe[0] == "call" and recipe[1] == ("msg", i)
                and recipe[2] in _TRIMS and len(recipe[3]) <= 1):
            return at[0], recipe
        return None

    def holds_columns(self, columns: Sequence[pa.Array]) -> np.ndarray:
        """:meth:`holds` for every row of ``columns`` (one per message) at once."""
        ok = np.ones(len(columns[0]), dtype=bool)
        for recipe, op, args, answer in self.guard_recipes:
            ok &= answers(column(recipe, columns), op, args) == answer
        return ok

    def fill_columns(self, columns: Sequence[pa.Array]) -> tuple[pa.Array, np.ndarray]:
        """:meth:`fill` for every row of ``columns`` at once, and where each part starts
        (characters; one row per part, and one past the last)."""
        if all(isinstance(p, str) for p in self.part_recipes):
            raise Unsupported("no message text written")  # nor placed: render() decides
        arrays = [pa.scalar(p, pa.large_string()) if isinstance(p, str) else column(p, columns)
                  for p in self.part_recipes]
        starts = np.zeros((len(arrays) + 1, len(columns[0])), dtype=np.int64)
        for k, a in enumerate(arrays):
            size = len(a.as_py()) if isinstance(a, pa.Scalar) else pc.utf8_length(a).to_numpy(
                zero_copy_only=False)
            starts[k + 1] = starts[k] + size
        return pc.binary_join_element_wise(*arrays, _EMPTY), starts

    def places(self, columns: Sequence[pa.Array], starts: np.ndarray
               ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Each message's :data:`Place` in every row, as three arrays; only for messages
        written once, as they are or trimmed (:class:`Unsupported` otherwise)."""
        out = []
        for i, values in enumerate(columns):
            placed = self.placements[i]
            if placed is None:
                raise Unsupported(f"message {i} not written once as it is or trimmed")
            k, recipe = placed
            skipped = np.zeros(len(values), dtype=np.int64)
            if recipe[0] == "call" and recipe[2] != "rstrip":
                left = column(("call", recipe[1], "lstrip", recipe[3]), columns)
                skipped = (pc.utf8_length(values).to_numpy(zero_copy_only=False)
                           - pc.utf8_length(left).to_numpy(zero_copy_only=False))
            out.append((starts[k], starts[k + 1], skipped))
        return out

    def holds(self, contents: Sequence[str]) -> bool:
        for text, op, args, answer in self.guards:
            if ask(text(contents), op, args) != answer:
                return False
        return True

    def fill_placed(self, contents: Sequence[str]) -> tuple[str, list[Place | None]]:
        """The rendering of ``contents``, and each message's :data:`Place` in it (None
        where :attr:`placements` has none)."""
        pieces = [p if type(p) is str else p(contents) for p in self.parts]
        starts = list(accumulate(map(len, pieces), initial=0))
        places: list[Place | None] = []
        for i, placed in enumerate(self.placements):
            if placed is None:
                places.append(None)
                continue
            k, recipe = placed
            skipped = 0
            if recipe[0] == "call" and recipe[2] != "rstrip":
                text = contents[i]
                skipped = len(text) - len(text.lstrip(*recipe[3]))
            places.append((starts[k], starts[k + 1], skipped))
        return "".join(pieces), places


class SkeletonRenderer:
    """Renders conversations of plain ``{role, content}`` messages by skeletons (see the
    module); ``plain(messages, add_generation_prompt)`` is the jinja rendering it must equal.

    ``template`` is the same source compiled for tracing (its ``tojson`` wrapped with
    :func:`refuse_traced`); ``constants`` are the other variables every render gets.
    ``stats`` counts conversations filled from a skeleton, traced, and rendered by jinja.
    """

    def __init__(self, template: jinja2.Template, constants: Mapping[str, Any],
                 plain: Callable[[list[dict[str, Any]], bool], str]) -> None:
        self.template = template
        self.constants = dict(constants)
        self.plain = plain
        self.skeletons: dict[tuple[Any, ...], list[_Skeleton]] = {}
        self.refused: dict[tuple[Any, ...], tuple[int, int]] = {}  # (failed, tried)
        self.on = True
        self.stats = {"filled": 0, "traced": 0, "jinja": 0}

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool
               ) -> str:
        return self.render_placed(messages, add_generation_prompt)[0]

    def render_placed(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool
                      ) -> tuple[str, list[Place | None] | None]:
        """:meth:`render`, and where a skeleton wrote each message's text
        (:meth:`_Skeleton.fill_placed`; None where jinja rendered the conversation)."""
        key = self._shape(messages, add_generation_prompt)
        if key is None or not self.on or self._given_up(key):
            return self._jinja(messages, add_generation_prompt), None
        contents = [m["content"] for m in messages]
        sk = next((s for s in self.skeletons.get(key, ()) if s.holds(contents)), None)
        if sk is None:
            sk = self._trace(key, contents, add_generation_prompt)
            if sk is None:
                return self._jinja(messages, add_generation_prompt), None
            self.stats["traced"] += 1
        else:
            self.stats["filled"] += 1
        text, places = sk.fill_placed(contents)
        if sk.fills < CHECKED_FILLS:
            sk.fills += 1
            want = self.plain(list(messages), add_generation_prompt)
            if want != text:
                self.on = False
                return want, None
        return text, places

    def render_columns(self, roles: Sequence[str], columns: Sequence[pa.Array], gen: bool
                       ) -> list[Filled]:
        """Conversations of one shape (``roles``), one column of texts per message (large
        strings, no nulls), rendered from skeletons with Arrow kernels: the rows filled,
        skeleton by skeleton. The others are left to :meth:`render` (a skeleton that could
        not be traced or checked, a question or transformation Arrow cannot answer
        exactly, a message not written as it is or trimmed)."""
        key = (gen, *roles)
        n = len(columns[0]) if columns else 0
        left = np.arange(n)
        done: list[Filled] = []
        if not columns or any(OPEN in r or CLOSE in r for r in roles):
            return done
        while left.size and self.on and not self._given_up(key) \
                and len(done) < COLUMN_SKELETONS:
            first = [str(c[int(left[0])].as_py()) for c in columns]
            sk = next((s for s in self.skeletons.get(key, ()) if s.holds(first)), None)
            traced = sk is None
            if sk is None:
                sk = self._trace(key, first, gen)
                if sk is None:
                    break
            rest = columns if left.size == n else [c.take(pa.array(left)) for c in columns]
            try:
                ok = sk.holds_columns(rest)
                if not ok[0]:  # Arrow answered the traced row otherwise than Python
                    break
                mine = rest if ok.all() else [c.filter(pa.array(ok)) for c in rest]
                texts, starts = sk.fill_columns(mine)
                places = sk.places(mine, starts)
            except Unsupported:
                break
            if not self._checked_rows(sk, roles, mine, texts, gen):
                break
            done.append(Filled(left[ok], texts, places))
            self.stats["traced"] += traced
            self.stats["filled"] += int(ok.sum()) - traced
            left = left[~ok]
        return done

    def _checked_rows(self, sk: _Skeleton, roles: Sequence[str], columns: Sequence[pa.Array],
                      texts: pa.Array, gen: bool) -> bool:
        """The first rows a skeleton fills at once checked against jinja, as
        :meth:`render_placed` checks them: False (and the skeletons off) if jinja
        disagrees."""
        for r in range(min(CHECKED_FILLS - sk.fills, len(texts))):
            msgs = [{"role": role, "content": c[r].as_py()} for role, c in zip(roles, columns,
                                                                              strict=True)]
            try:
                want = self.plain(msgs, gen)
            except Exception:  # render() turns it into the row's error
                return False
            sk.fills += 1
            if want != texts[r].as_py():
                self.on = False
                return False
        return True

    def _jinja(self, messages: Sequence[Mapping[str, Any]], gen: bool) -> str:
        self.stats["jinja"] += 1
        return self.plain(list(messages), gen)

    def _given_up(self, key: tuple[Any, ...]) -> bool:
        # a shape whose conversations mostly fail to trace (the template splits every
        # answer, say) stops paying for the attempt; a few odd texts do not stop it
        failed, tried = self.refused.get(key, (0, 0))
        return failed >= 8 and 2 * failed > tried

    @staticmethod
    def _shape(messages: Sequence[Mapping[str, Any]], gen: bool) -> tuple[Any, ...] | None:
        roles = []
        for m in messages:
            # keys in the order the trace builds them: a template may iterate over them
            if (type(m) is not dict and not isinstance(m, Mapping)) or len(m) != 2 \
                    or next(iter(m)) != "role" or type(m.get("content")) is not str:
                return None
            role = m.get("role")
            if type(role) is not str or OPEN in role or CLOSE in role:
                return None
            roles.append(role)
        return (gen, *roles)

    def _trace(self, key: tuple[Any, ...], contents: list[str], gen: bool
               ) -> _Skeleton | None:
        tracer = Tracer(contents)
        msgs = [{"role": r, "content": tracer.leaf(i)} for i, r in enumerate(key[1:])]
        try:
            out = self.template.render(messages=msgs, tools=None, add_generation_prompt=gen,
                                       **self.constants)
        except Exception:  # Unsupported, or the template raised: jinja decides this one
            failed, tried = self.refused.get(key, (0, 0))
            self.refused[key] = (failed + 1, tried + 1)
            return None
        failed, tried = self.refused.get(key, (0, 0))
        self.refused[key] = (failed, tried + 1)
        sk = _Skeleton(tracer, out)
        self.skeletons.setdefault(key, []).append(sk)
        return sk
