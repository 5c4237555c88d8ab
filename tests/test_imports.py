"""No two modules of the package import each other: layers import downwards only.

Read from the source (no import runs): `import` and `from ... import` statements anywhere in
a module, at module level or inside a function, relative ones resolved. `from pkg import
name` depends on `pkg.name` when that is a module, else on `pkg` itself (its `__init__`).
Imports under `if TYPE_CHECKING:` never run and are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "checkpointer"

KNOWN_MUTUAL: set[frozenset[str]] = set()
"""Pairs allowed to import each other: none."""


def _modules() -> dict[str, Path]:
    found = {}
    for path in (ROOT / PACKAGE).rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def import_graph() -> dict[str, set[str]]:
    """Each module of the package and the modules of the package it imports."""
    modules = _modules()

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(filter(None, (owner(alias.name) for alias in node.names)))
                continue
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                target = sub if sub in modules else owner(base)
                if target is not None:
                    targets.add(target)
        targets.discard(name)
        graph[name] = targets
    return graph


def test_the_import_graph_is_read() -> None:
    graph = import_graph()
    assert "checkpointer.serde.frames" in graph["checkpointer.serde.msgpack_serde"]
    assert "checkpointer.serde.msgpack_serde" in graph["checkpointer.serde.compression"]
    # A function-level import counts.
    assert "checkpointer.cli.transfer_cmds" in graph["checkpointer.ui.data"]
    assert len(graph) > 50 and all(t in graph for ts in graph.values() for t in ts)


def test_no_two_modules_import_each_other() -> None:
    graph = import_graph()
    mutual = {frozenset({a, b}) for a, targets in graph.items() for b in targets if a in graph[b]}
    unexpected = sorted(sorted(pair) for pair in mutual - KNOWN_MUTUAL)
    assert not unexpected, f"modules importing each other: {unexpected}"


def test_the_serde_layers_import_downwards() -> None:
    """frames and the fast path know nothing of the serializers above them; the msgpack
    serializer knows nothing of compression, encryption or caching."""
    graph = import_graph()
    serde = "checkpointer.serde."
    below = {
        "frames": set(),
        "fast_path": {"value_types"},
        "fresh_copy": set(),
        "value_cache": {"frames", "fast_path", "fresh_copy", "value_types"},
        "msgpack_serde": {"frames", "fast_path", "value_types", "classes", "records", "base"},
    }
    for name, allowed in below.items():
        used = {t[len(serde) :] for t in graph[serde + name] if t.startswith(serde)}
        assert used <= allowed, f"{name} imports {sorted(used - allowed)}"
