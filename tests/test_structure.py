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


# --------------------------------------------------------- other libraries' private names

COMPAT = PACKAGE / "compat.py"
# RLlib's documented RLModule hooks that subclasses override.
RLMODULE_HOOKS = ("_forward", "_forward_inference", "_forward_exploration", "_forward_train")
# Protected names of a base class that the package's subclasses use through `self`
# (as RLlib's own subclasses do), each with why it is not in `compat`: name -> reason.
BASE_CLASS_PROTECTED = {
    # AlgorithmConfig (HCAConfig)
    "_value_error": "AlgorithmConfig's error helper, the one RLlib's own configs' validate() use",
    "_model_config": "AlgorithmConfig's stored model_config, as RLlib's configs read it in validate()",
    # SingleAgentEnvRunner (LeanEnvRunner): the runner replaces only `_sample`'s loop
    "_env_to_module": "SingleAgentEnvRunner's connector pipeline, read to see which pieces run",
    "_module_to_env": "SingleAgentEnvRunner's connector pipeline, read to see which pieces run",
    "_try_env_reset": "SingleAgentEnvRunner's env reset with its failure handling",
    "_seed": "SingleAgentEnvRunner's seed for the first reset",
    "_log_env_steps": "SingleAgentEnvRunner's step-count metric, as its own _sample logs it",
    "_increase_sampled_metrics": "SingleAgentEnvRunner's sampled-count metrics",
    "_metrics_num_env_steps_sampled": "SingleAgentEnvRunner's step counter for the metric above",
    "_weights_seq_no": "SingleAgentEnvRunner's weights version, stored per step as its _sample does",
    "_log_episode_metrics": "SingleAgentEnvRunner's episode metrics, under RLlib's keys",
    "_callbacks": "SingleAgentEnvRunner's callback objects, handed to make_callback as its own _sample does",
    # TorchLearner (HCATorchLearner), as PPOTorchLearner uses them
    "_module": "Learner's MultiRLModule",
    "_learner_connector": "Learner's connector pipeline; build() appends pieces as PPOLearner.build does",
    "_named_optimizers": "Learner's optimizers by name",
    "_optimizer_parameters": "Learner's optimizer -> parameters map",
    "_check_component": "Learner's checkpoint component filter (Checkpointable)",
    # ItemSeriesStats (WindowMeanStats)
    "_window": "ItemSeriesStats' window length",
    "_set_items": "ItemSeriesStats' item setter (a windowed leaf's deque)",
}


def _defined_names(trees) -> Set[str]:
    """Names the package defines: functions, classes, assigned names, arguments,
    `self.x = ...`/`cls.x = ...` attributes and `__slots__` strings."""
    defined: Set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and isinstance(
                    node.value, ast.Name) and node.value.id in ("self", "cls"):
                defined.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.arg):
                defined.add(node.arg)
            elif isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets):
                defined.update(c.value for c in ast.walk(node.value)
                               if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return defined


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_reaches(files: Dict[str, Path]) -> List[str]:
    """Where the package reaches into another library's private names, as "path:line
    what": an import from a module path with a `_private` part; `from X import _name`
    with X not a package module; `obj._name` (also `getattr(obj, "_name")`) for a
    `_name` the package never defines, except RLlib's `_forward*` hooks; `self._name` /
    `super()._name` for such a name unless `BASE_CLASS_PROTECTED` lists it."""
    trees = {rel: ast.parse(path.read_text(), str(path)) for rel, path in files.items()}
    defined = _defined_names(trees.values())
    hits = []
    for rel, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if any(_private(part) for part in node.module.split(".")):
                    hits.append(f"{rel}:{node.lineno} from {node.module} import ...")
                elif not node.module.split(".")[0] == "hca_rllib":
                    hits += [f"{rel}:{node.lineno} from {node.module} import {a.name}"
                             for a in node.names if _private(a.name)]
            elif isinstance(node, ast.Import):
                hits += [f"{rel}:{node.lineno} import {a.name}" for a in node.names
                         if any(_private(part) for part in a.name.split("."))]
            elif isinstance(node, ast.Attribute) or (
                    isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                    and isinstance(node.args[1].value, str)):
                name, receiver = ((node.attr, node.value) if isinstance(node, ast.Attribute)
                                  else (node.args[1].value, node.args[0]))
                if not _private(name) or name in defined or name in RLMODULE_HOOKS:
                    continue
                own = (isinstance(receiver, ast.Name) and receiver.id in ("self", "cls")) or (
                    isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name)
                    and receiver.func.id == "super")
                if own and name in BASE_CLASS_PROTECTED:
                    continue
                hits.append(f"{rel}:{node.lineno} .{name}")
    return sorted(hits)


def _package_files(skip=()) -> Dict[str, Path]:
    return {str(p.relative_to(PACKAGE.parent)): p for p in sorted(PACKAGE.rglob("*.py"))
            if p not in skip}


def test_private_names_of_other_libraries_only_in_compat():
    """0 reaches into other libraries' private names outside hca_rllib/compat.py (the
    one module that pins and tests them: tests/test_compat.py)."""
    hits = private_reaches(_package_files(skip=(COMPAT,)))
    assert not hits, ("private names of other libraries outside hca_rllib/compat.py (add a "
                      "compat function, or list a base class's protected name in "
                      "BASE_CLASS_PROTECTED with the reason):\n" + "\n".join(hits))


def test_private_reach_counter_finds_each_kind(tmp_path):
    """The counter sees every kind of reach (and compat.py's own contacts)."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from ray.train._internal.storage import delete\n"
        "import torch._C\n"
        "from ray.tune.utils.serialization import _loads_with_cloudpickle\n"
        "from hca_rllib.module import _orthogonal_init\n"  # the package's own: not counted
        "x = torch._foreach_norm\n"
        "y = getattr(scheduler, '_trial_state', None)\n"
        "class A(Base):\n"
        "    def f(self):\n"
        "        self._own = 1\n"
        "        return self._own, self._base_helper(), super()._other(), self._value_error,"
        " self._forward_train\n")
    found = {h.split(" ", 1)[1] for h in private_reaches({"sample.py": sample})}
    assert found == {"from ray.train._internal.storage import ...", "import torch._C",
                     "from ray.tune.utils.serialization import _loads_with_cloudpickle",
                     "._foreach_norm", "._trial_state", "._base_helper", "._other"}, found
    assert private_reaches({"compat.py": COMPAT}), "compat.py's contacts are seen when counted"
