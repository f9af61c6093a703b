"""No import circle among the modules of parallel/ and models/ (read statically, function-level imports included)."""

import ast
import functools
from pathlib import Path

import pytest

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


@functools.lru_cache(maxsize=None)  # read once for the module's 12 tests (parsing every module: 0.2 s of CPU)
def _graph():
    """{module: the modules of parallel/ and models/ it imports}; shared by the tests, which only read it."""
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


# What each layer may import of the project (its package docstring says the same). The engine and
# loop sit on the three layers below them; the job layer on the engine; none of the three layers
# knows another, but for the manifest's durable write.
SHARED = {"parallel", "parallel.lazy", "parallel.locations", "parallel.messages", "parallel.model", "parallel.signals"}
# A model family (models/<family>/) builds on the modules every family shares, the ViT's blocks and what a
# model gives the engine; never on another family (ResNet on VGG16's Caffe preprocessing, which both use). The
# registry is a shared table of names (it loads a family by name, never by an import): a weights reader asks it
# which model a file it refuses belongs to.
MODELS_SHARED = {"models.common", "models.files", "models.hub_checkpoint", "models.hub_download",
                 "models.imagenet_download", "models.keras_h5", "models.registry", "models.safetensors_files",
                 "models.text_tokenizer", "models.text_tower", "models.vit.vit", "models.vit.vit_config",
                 "models.vit.vit_layers", "parallel.model"}
MAY_IMPORT = {
    "parallel.devices": SHARED,
    "parallel.inputs": SHARED | {"parallel.output", "parallel.output.durable"},
    "parallel.output": SHARED,
    "models.clip": MODELS_SHARED,
    "models.convnext": MODELS_SHARED,
    "models.dinov2": MODELS_SHARED,
    "models.efficientnet": MODELS_SHARED,
    "models.resnet": MODELS_SHARED | {"models.vgg16"},
    # SigLIP writes its config.json and tokenizer files durably (standard library only; no engine).
    "models.siglip": MODELS_SHARED | {"parallel.output.durable"},
    "models.vit": set(),
}


def _crossings(graph, layer, allowed):
    """The imports of a module of `layer` that leave it for a module not in `allowed`, as "a -> b"."""
    return {"%s -> %s" % (module, target) for module, targets in graph.items()
            if module == layer or module.startswith(layer + ".")
            for target in targets
            if not (target == layer or target.startswith(layer + ".")) and target not in allowed}


@pytest.mark.parametrize("layer", sorted(MAY_IMPORT))
def test_a_layer_imports_only_itself_and_what_it_may(layer):
    beyond = _crossings(_graph(), layer, MAY_IMPORT[layer])
    assert not beyond, "imports across layers: %s" % ", ".join(sorted(beyond))


def test_a_crossing_is_found():
    graph = {"p.devices.a": {"p.devices.b", "p.inputs.c"}, "p.devices.b": {"p.messages"}, "p.devicesx": {"p.jobs"}}
    assert _crossings(graph, "p.devices", {"p.messages"}) == {"p.devices.a -> p.inputs.c"}
