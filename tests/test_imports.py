"""No import circle among the modules of parallel/ and models/ (read statically, function-level imports included)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("parallel", "models")


def _module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path, name, modules):
    """The modules of `modules` that the file at `path` imports, wherever the import statement is.

    `from package import name` counts as an import of package.name when that is a module, else
    of the package. A package's lazy table (strings in _EXPORTS) is no import.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                submodule = "%s.%s" % (base, alias.name)
                found.add(submodule if submodule in modules else base)
    # Importing a.b.c runs a/__init__ and a/b/__init__ too; those are the packages' own (lazy) doing.
    return {module for module in found if module in modules and module != name}


def _graph():
    modules = {_module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")}
    return {name: _imports(path, name, modules) for name, path in modules.items()}


def _cycles(graph):
    """Every strongly connected group of more than one module, and every module importing itself (Tarjan)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph[node]:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_no_import_circle_among_the_modules():
    cycles = _cycles(_graph())
    assert not cycles, "import circles: %s" % "; ".join(" <-> ".join(group) for group in cycles)


def test_the_engine_imports_nothing_of_the_job_layer():
    graph = _graph()
    assert not {module for module in graph["parallel.engine"] if module.startswith("parallel.jobs")}


def test_a_circle_is_found():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
