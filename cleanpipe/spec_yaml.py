"""Read a pipeline YAML file once, safely: a size limit, an alias-expansion limit, duplicate
keys refused, and the line of every key for error messages.

The text is composed into a node tree once (PyYAML's safe loader, libyaml when installed);
the checks, the line index and the data all come from that one tree.

    >>> data, lines = read_yaml("name: demo\\nstages:\\n  - stage: whitespace\\n", "p.yaml")
    >>> data["stages"], lines[("stages", 0, "stage")]
    ([{'stage': 'whitespace'}], 3)
    >>> read_yaml("stages: []\\nstages: [x]\\n", "p.yaml")
    Traceback (most recent call last):
    ...
    cleanpipe.spec_yaml.YamlLimitError: p.yaml:2: stages: duplicate key (first at line 1); ...

Limits: :data:`~cleanpipe.limits.MAX_YAML_BYTES` (the file's size) and
:data:`~cleanpipe.limits.MAX_ALIAS_NODES` (what aliases add once expanded).
"""

from __future__ import annotations

from typing import Any

import yaml

from cleanpipe.errors import CleanpipeError
from cleanpipe.limits import MAX_ALIAS_NODES, MAX_YAML_BYTES

__all__ = ["YamlLimitError", "key_path_text", "read_yaml"]

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # type: ignore[assignment]
_MERGE_TAG = "tag:yaml.org,2002:merge"

Lines = dict[tuple[Any, ...], int]


class YamlLimitError(CleanpipeError, ValueError):
    """The file is not YAML, or breaks a limit; ``str(err)`` is the one-line message."""


def read_yaml(text: str, source: str | None = None) -> tuple[Any, Lines]:
    """``(data, lines)`` of a YAML document; ``lines`` maps each key path (``("stages", 0,
    "stage")``) to its 1-based line."""
    src = source or "<pipeline>"
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_YAML_BYTES:
        raise YamlLimitError(f"{src}: {size:,} bytes: a pipeline file may hold at most"
                             f" {MAX_YAML_BYTES:,} bytes")
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        lines: Lines = {}
        if root is not None:
            _check_tree(root, src, lines)
        data = loader.construct_document(root) if root is not None else None
    except RecursionError:
        raise YamlLimitError(f"{src}: nested too deeply to be a pipeline file") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{src}:{mark.line + 1}" if mark else src
        problem = getattr(e, "problem", None) or str(e)
        raise YamlLimitError(f"{where}: not valid YAML: {problem}") from None
    finally:
        loader.dispose()
    return data, lines


def _key_text(node: yaml.Node) -> Any:
    return node.value if isinstance(node, yaml.ScalarNode) else None


def _check_tree(root: yaml.Node, src: str, lines: Lines) -> None:
    """Walk the tree once per distinct node: refuse duplicate keys and recursive aliases,
    count what aliases add, and index the line of every key path outside aliases."""
    sizes: dict[int, int] = {}  # expanded node count of each distinct node
    added = 0

    def expanded(node: yaml.Node, path: tuple[Any, ...] | None, active: set[int]) -> int:
        nonlocal added
        nid = id(node)
        if nid in sizes:
            # a second use of a node: an alias; what it adds is its whole expansion
            added += sizes[nid]
            if added > MAX_ALIAS_NODES:
                line = node.start_mark.line + 1
                raise YamlLimitError(
                    f"{src}:{line}: aliases expand to more than {MAX_ALIAS_NODES:,} values;"
                    " write the values out, or use fewer nested aliases")
            return sizes[nid]
        if nid in active:
            raise YamlLimitError(f"{src}:{node.start_mark.line + 1}: an alias refers to the"
                                 " node that contains it (a recursive structure)")
        active.add(nid)
        total = 1
        if isinstance(node, yaml.MappingNode):
            seen: dict[tuple[str, Any], int] = {}
            for k, v in node.value:
                kline = k.start_mark.line + 1
                key = _key_text(k)
                if k.tag != _MERGE_TAG and isinstance(k, yaml.ScalarNode):
                    if (k.tag, key) in seen:
                        where = key if path is None else key_path_text((*path, key))
                        raise YamlLimitError(
                            f"{src}:{kline}: {where}: duplicate key (first at line"
                            f" {seen[(k.tag, key)]}); a key may appear once in a mapping")
                    seen[(k.tag, key)] = kline
                sub = None if path is None else (*path, key)
                if sub is not None:
                    lines[sub] = kline
                total += expanded(k, None, active) + expanded(v, sub, active)
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                sub = None if path is None else (*path, i)
                if sub is not None:
                    lines[sub] = v.start_mark.line + 1
                total += expanded(v, sub, active)
        active.discard(nid)
        sizes[nid] = total
        return total

    expanded(root, (), set())


def key_path_text(loc: tuple[Any, ...]) -> str:
    """A key path as the user writes it.

        >>> key_path_text(("stages", 0, "patterns"))
        'stages[0].patterns'
    """
    s = ""
    for p in loc:
        s += f"[{p}]" if isinstance(p, int) else (f".{p}" if s else str(p))
    return s
