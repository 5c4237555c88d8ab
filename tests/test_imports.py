"""No two modules of the package import each other: layers import downwards only.

Read from the source (no import runs): `import` and `from ... import` statements anywhere in
a module, at module level or inside a function, relative ones resolved. `from pkg import
name` depends on `pkg.name` when that is a module, else on `pkg` itself (its `__init__`).
Imports under `if TYPE_CHECKING:` never run and are left out. The imports that run when a
module is imported (module level) must form no cycle at all, of any length.
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


def _imports(tree: ast.AST, module_level: bool = False) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        elif module_level and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def import_graph(*, module_level: bool = False) -> dict[str, set[str]]:
    """Each module of the package and the modules of the package it imports.

    With `module_level`, only the imports that run when the module is imported (none in a
    function), and `from pkg import sub` depends on `pkg` as well as on `pkg.sub`: it reads
    `sub` from the package, whose `__init__` runs first."""
    modules = _modules()

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8")), module_level):
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
                if module_level and sub in modules and base in modules:
                    targets.add(base)
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


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path that ends where it starts, or None."""
    done: set[str] = set()
    for start in sorted(graph):
        path, on_path = [start], {start}
        pending = [iter(sorted(graph[start]))]
        while pending:
            following = next(pending[-1], None)
            if following is None:
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                pending.pop()
            elif following in on_path:
                return [*path[path.index(following) :], following]
            elif following not in done:
                path.append(following)
                on_path.add(following)
                pending.append(iter(sorted(graph[following])))
    return None


def test_the_module_level_graph_is_read() -> None:
    graph = import_graph(module_level=True)
    # `from checkpointer.graph import StateGraph` reads the package.
    assert "checkpointer.graph" in graph["checkpointer.demo"]
    # A function-level import does not run on import.
    assert "checkpointer.cli.transfer_cmds" not in graph["checkpointer.ui.data"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_at_module_level() -> None:
    """Importing any module never comes back to one still being imported."""
    cycle = _cycle(import_graph(module_level=True))
    assert cycle is None, f"module-level import cycle: {' -> '.join(cycle or [])}"


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
