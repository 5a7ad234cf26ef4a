"""The package's import graph has no cycle, counting imports inside functions too: a cycle makes
the order modules load in matter, and a lazy import that closes one fails only on the path that
runs it. Read from the source with ast (nothing is imported)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"l3codec": ROOT / "l3codec", "l3codec.kernels": ROOT / "kernels",
            "l3codec.converters": ROOT / "converters"}


def package_modules() -> dict:
    """Dotted module name -> source path, for the three folders the package is made of."""
    found = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [p for p in path.relative_to(folder).with_suffix("").parts if p != "__init__"]
            if package == "l3codec" and parts and parts[0] in ("kernels", "converters"):
                continue  # a link to the folders above, in a developer's worktree
            found[".".join([package, *parts])] = path
    return found


def imported_by(name: str, path: Path, known: dict) -> set:
    """The package's modules that `name` imports anywhere in its source (parents excluded: a
    parent package is always initialised before its modules)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            targets = [t for t in (f"{base}.{alias.name}" for alias in node.names) if t in known] or [base]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


def cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    return found


def test_the_package_has_no_import_cycle():
    known = package_modules()
    graph = {name: imported_by(name, path, known) for name, path in known.items()}
    assert len(graph) > 40 and sum(map(len, graph.values())) > 100  # the whole package was read
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
