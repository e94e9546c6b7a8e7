"""The test tiers: the markers pyproject.toml registers are the ones `make test-fast`
deselects, and the tests that run a benchmark script or a learning run carry their
marker (read from the test files' source, so a new test cannot slip into the fast tier
by omission)."""

import ast
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIERS = {"learning", "cluster", "benchmark", "slow"}


def _marks(node: ast.AST) -> set:
    """Names of the `pytest.mark.<name>` decorators on a function."""
    names = set()
    for decorator in getattr(node, "decorator_list", []):
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute) \
                and target.value.attr == "mark":
            names.add(target.attr)
    return names


def _module_marks(tree: ast.Module) -> set:
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
            for value in ast.walk(node.value):
                if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Attribute) \
                        and value.value.attr == "mark":
                    names.add(value.attr)
    return names


def _tests():
    """(file, function name, its marks including the module's, its source) for every test."""
    for path in sorted((REPO / "tests").glob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        text = path.read_text()
        tree = ast.parse(text)
        module = _module_marks(tree)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                yield path.name, node.name, module | _marks(node), ast.get_source_segment(text, node)


def test_registered_markers_are_the_tiers_make_test_fast_deselects():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--strict-markers" in config["addopts"].split()  # a misspelt marker is an error
    registered = {line.split(":")[0].strip() for line in config["markers"]}
    assert registered == TIERS
    makefile = (REPO / "Makefile").read_text()
    slow = re.search(r"^SLOW_TIERS := (.*)$", makefile, re.M).group(1)
    assert set(slow.split(" or ")) == TIERS
    assert re.search(r'^test-fast:.*\n\t.*pytest -q \$\(PARALLEL\) -m "not \(\$\(SLOW_TIERS\)\)"$', makefile, re.M)
    assert re.search(r"^test: .*\n\t\$\(BIN\)/python -m pytest -q \$\(PARALLEL\)$", makefile, re.M)  # everything
    assert re.search(r"^PARALLEL \?= -n 2 --dist loadfile$", makefile, re.M)


def test_benchmark_and_learning_tests_carry_their_marker():
    tests = list(_tests())
    assert len(tests) > 100
    for name, function, marks, source in tests:
        if '"--quick"' in source:  # runs benchmarks/<script>.py --quick
            assert "benchmark" in marks, f"{name}::{function} runs a benchmark script unmarked"
        if name == "test_learning.py":
            assert "learning" in marks, f"{name}::{function}"
        if "cluster_dir" in source:  # the fixture that starts a local multi-node cluster
            assert "cluster" in marks, f"{name}::{function}"
    # The fast tier keeps tests in every file that has cheap ones.
    fast = {name for name, _, marks, _ in tests if not marks & TIERS}
    assert {"test_benchmarks_quick.py", "test_cluster.py", "test_algorithm.py", "test_envs.py"} <= fast
