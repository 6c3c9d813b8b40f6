"""The package's layers, and a walk over every import that keeps them.

Each module belongs to one layer; a module may import from its own layer and the layers
below it, never from a layer above (``dedup`` may use the stage contract, not the stages;
the stage contract may not reach into the engine). Every import is read from the source
with :mod:`ast`, the ones inside functions too (they run as surely, only later), so a cycle
cannot hide in a function-level import. Imports under ``if TYPE_CHECKING:`` never run: they
must respect the layers but cannot form a cycle.

The walk also refuses a module using another module's ``_private`` name: importing it, reading
it as an attribute of the module, or reading or writing an ``_attribute`` that only another
module's classes define (``stage._report = ...`` from the engine). Modules talk through public,
documented names.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "cleanpipe"

#: Bottom to top. A module is in the layer of its longest listed prefix.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("cleanpipe.version", "cleanpipe.errors", "cleanpipe.limits",
              "cleanpipe.fault_points", "cleanpipe.numba_cache", "cleanpipe.precompiled",
              "cleanpipe.memory", "cleanpipe.fields", "cleanpipe.columns")),
    # reading inputs, writing outputs, and the containers results are handed back in
    ("io", ("cleanpipe.io", "cleanpipe.result")),
    # chat templates and tokenizers: what a trainer sees of a row
    ("templating", ("cleanpipe.templating",)),
    # what a stage is and hands back; using one stage on its own
    ("contract", ("cleanpipe.contract",)),
    # building blocks of the stages (not stages themselves)
    ("text", ("cleanpipe.text",)),
    ("dedup", ("cleanpipe.dedup",)),
    ("stages", ("cleanpipe.stages",)),
    # a pipeline file read and checked against the stages
    ("config", ("cleanpipe.spec_yaml", "cleanpipe.stage_order", "cleanpipe.gate",
                "cleanpipe.spec")),
    ("engine", ("cleanpipe.engine",)),
    ("report", ("cleanpipe.report",)),
    ("pipeline", ("cleanpipe.pipeline",)),
    ("interface", ("cleanpipe.commands", "cleanpipe.cli", "cleanpipe")),
)


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported module
    line: int
    runs: bool  # False under ``if TYPE_CHECKING:``


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module


def modules() -> dict[str, Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        out[name] = Module(name, path, ast.parse(path.read_text(), str(path)))
    return out


def layer_of(module: str) -> int:
    best, at = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, at = len(p), i
    return at


def _is_package(mod: Module) -> bool:
    return mod.path.name == "__init__.py"


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                inside.update(id(n) for n in ast.walk(stmt))
    return inside


def _absolute(mod: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.name.split(".")
    if not _is_package(mod):
        base.pop()
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports(mods: dict[str, Module]) -> tuple[list[Import], list[str]]:
    """Every import of a cleanpipe module, and every private name imported from one."""
    found: list[Import] = []
    private: list[str] = []
    for mod in mods.values():
        typing_only = _type_checking_nodes(mod.tree)
        for node in ast.walk(mod.tree):
            runs = id(node) not in typing_only
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "cleanpipe":
                        found.append(Import(mod.name, alias.name, node.lineno, runs))
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(mod, node)
                if base.split(".")[0] != "cleanpipe":
                    continue
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    found.append(Import(mod.name, sub if sub in mods else base, node.lineno,
                                        runs))
                    if _private(alias.name) and sub not in mods:
                        private.append(f"{_where(mod)}:{node.lineno} ({mod.name}) imports"
                                       f" {alias.name} from {base}")
    return found, private


def _where(mod: Module) -> Path:
    return mod.path.relative_to(PACKAGE.parent)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def module_aliases(mod: Module, mods: dict[str, Module]) -> dict[str, str]:
    """Local names bound to another cleanpipe module (``import cleanpipe.x as y``,
    ``from cleanpipe import x``)."""
    out = {}
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in mods and a.asname:
                    out[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(mod, node)
            for a in node.names:
                if f"{base}.{a.name}" in mods:
                    out[a.asname or a.name] = f"{base}.{a.name}"
    out.pop(mod.name, None)
    return out


def private_attributes(mod: Module) -> set[str]:
    """The ``_names`` a module defines: module globals, class attributes, ``self._x``."""
    names: set[str] = set()
    for node in ast.walk(mod.tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    names.add(n.id)
                elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and \
                        n.value.id in ("self", "cls"):
                    names.add(n.attr)
    return {n for n in names if _private(n)}


def private_uses(mods: dict[str, Module]) -> list[str]:
    """Reads and writes of another module's ``_private`` names through attributes."""
    defined = {m.name: private_attributes(m) for m in mods.values()}
    elsewhere: dict[str, set[str]] = defaultdict(set)
    for name, attrs in defined.items():
        for a in attrs:
            elsewhere[a].add(name)
    out = []
    for mod in mods.values():
        aliases = module_aliases(mod, mods)
        for node in ast.walk(mod.tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            if owner in ("self", "cls"):
                continue
            if owner in aliases:
                out.append(f"{_where(mod)}:{node.lineno} ({mod.name}) uses"
                           f" {aliases[owner]}.{node.attr}")
            elif node.attr not in defined[mod.name] and elsewhere.get(node.attr):
                owners = ", ".join(sorted(elsewhere[node.attr]))
                out.append(f"{_where(mod)}:{node.lineno} ({mod.name}) uses"
                           f" {ast.unparse(node)}, private to {owners}")
    return out


def cycles(edges: list[Import]) -> list[list[str]]:
    """Strongly connected groups of modules that import each other (Tarjan)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for e in edges:
        if e.runs and e.source != e.target:
            graph[e.source].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer():
    missing = [m for m in modules() if layer_of(m) < 0]
    assert not missing, f"modules in no layer (add them to LAYERS in {__file__}): {missing}"


def test_no_import_from_a_higher_layer():
    mods = modules()
    edges, _ = imports(mods)
    upward = [f"{_where(mods[e.source])}:{e.line} {e.source}"
              f" ({LAYERS[layer_of(e.source)][0]}) imports {e.target}"
              f" ({LAYERS[layer_of(e.target)][0]})"
              for e in edges if layer_of(e.target) > layer_of(e.source)]
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_no_import_cycle():
    found = cycles(imports(modules())[0])
    assert not found, "modules that import each other (function-level imports included):\n" + \
        "\n".join(" <-> ".join(c) for c in found)


def test_no_module_uses_another_modules_private_names():
    mods = modules()
    found = imports(mods)[1] + private_uses(mods)
    assert not found, ("private names used outside their module (give the owner a public,"
                       " documented name or method for it):\n" + "\n".join(found))


def test_the_walk_sees_what_it_must_refuse(tmp_path, monkeypatch):
    """The checks above fail on a planted cycle, upward import and private use."""
    pkg = tmp_path / "cleanpipe"
    (pkg / "stages").mkdir(parents=True)
    (pkg / "dedup").mkdir()
    for d in (pkg, pkg / "stages", pkg / "dedup"):
        (d / "__init__.py").write_text("")
    (pkg / "dedup" / "a.py").write_text("def f():\n    from cleanpipe.stages.b import g\n")
    (pkg / "stages" / "b.py").write_text(
        "from cleanpipe.dedup import a\n\n"
        "def g(stage):\n    stage._hidden = a._table\n")
    (pkg / "dedup" / "c.py").write_text(
        "_table = {}\n\nclass C:\n    def __init__(self):\n        self._hidden = 1\n")
    monkeypatch.setitem(globals(), "PACKAGE", pkg)
    mods = modules()
    edges, _ = imports(mods)
    assert cycles(edges) == [["cleanpipe.dedup.a", "cleanpipe.stages.b"]]
    assert [(e.source, e.target) for e in edges
            if layer_of(e.target) > layer_of(e.source)] == [
        ("cleanpipe.dedup.a", "cleanpipe.stages.b")]
    uses = private_uses(mods)
    assert any("stage._hidden, private to cleanpipe.dedup.c" in u for u in uses), uses
    assert any("uses cleanpipe.dedup.a._table" in u for u in uses), uses
