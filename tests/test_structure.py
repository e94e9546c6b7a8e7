"""The package's import structure, read from the source (imports inside functions count):
the library never imports the command line (`hca_rllib.cli` owns argument parsing and
imports the library, not the other way round), no module imports another's private
name, and the modules import each other without a cycle."""

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "hca_rllib"
CLI = "hca_rllib.cli"
# `python -m hca_rllib`: the command line's second entry point, beside the console script.
ENTRY_POINT = "hca_rllib.__main__"
# Scripts that build on the package: they use its public names only, as a user would.
SCRIPTS = [REPO / "tuned_examples", REPO / "benchmarks"]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> Dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path, name: str) -> Iterator[Tuple[int, str, List[str]]]:
    """(line, module imported from, names taken) for every import in the file; `import a.b`
    takes no names."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package upwards
                parts = name.split(".")
                up = parts[: len(parts) - node.level + (1 if path.name == "__init__.py" else 0)]
                base = ".".join(up + ([base] if base else []))
            yield node.lineno, base, [alias.name for alias in node.names]


def _targets(base: str, names: List[str], modules: Dict[str, Path]) -> Set[str]:
    """The package's modules an import loads: the one it names, and each name taken that
    is a submodule (`from hca_rllib import credit`), each cut to the nearest module."""
    found = set()
    for target in [base] + [f"{base}.{n}" for n in names]:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target:
            found.add(target)
    return found


def test_the_library_never_imports_the_command_line():
    modules = _modules()
    wrong = []
    for name, path in modules.items():
        if name == CLI or name.startswith(CLI + ".") or name == ENTRY_POINT:
            continue
        for line, base, names in _imports(path, name):
            if any(t == CLI or t.startswith(CLI + ".") for t in _targets(base, names, modules)):
                wrong.append(f"{path.relative_to(REPO)}:{line} imports {base}")
    assert not wrong, "the library imports the command line:\n" + "\n".join(wrong)


def test_no_module_imports_another_modules_private_names():
    modules = _modules()
    files = list(modules.items())
    files += [(_module_name(path), path) for folder in SCRIPTS for path in sorted(folder.rglob("*.py"))]
    wrong = []
    for name, path in files:
        for line, base, names in _imports(path, name):
            inside = base == "hca_rllib" or base.startswith("hca_rllib.")
            if not inside or base == name:
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            private += [part for part in base.split(".") if part.startswith("_") and not part.startswith("__")]
            if private:
                wrong.append(f"{path.relative_to(REPO)}:{line} from {base} import {', '.join(private)}")
    assert not wrong, "private names imported across modules:\n" + "\n".join(wrong)


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_cycles_are_found():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_the_modules():
    """The import graph (an edge for every import of another of the package's modules; the
    top-level package, which every import passes through, left out) has no cycle."""
    modules = _modules()
    graph: Dict[str, Set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for _, base, names in _imports(path, name):
            graph[name] |= _targets(base, names, modules) - {name, "hca_rllib"}
    assert "hca_rllib.runner" in graph["hca_rllib.evaluation"]  # the graph sees the imports
    assert not _cycles(graph), f"import cycles: {_cycles(graph)}"
