"""The package's shape, read from source: no import cycles, no private names across modules, no giant modules.

Every ``import`` counts, also those inside functions and under ``TYPE_CHECKING``: a deferred import still ties
two modules together.

Size: a module over ``SOFT_LIMIT`` lines (STYLE.md's "no file over ~400 lines without a reason") is a prompt to
look for a second concept inside it, not a number to trim to. Split it where a concept ends; where the module
is one concept, name it in ``WHOLE`` with the reason, and the test lets it grow. Moving lines out only to pass
the number hides the design (a reader looks for a concept in each file). The list stays honest both ways: an
entry that fits the limit again, or whose module is gone, fails until it is dropped.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "provider" / "ignite_tf"
SOFT_LIMIT = 400
# Modules over SOFT_LIMIT, and why each is one concept (or what is splitting it).
WHOLE = {
    "ignite_tf.reader.partition": "one class, PartitionReader: routing, failover and pipelined scans share its "
                                  "node connections and the in-flight partition's keys (tf_dataset wraps it)",
    "ignite_tf.cluster.launcher": "the Launcher interface and its two launchers that start a supervisor process "
                                  "(SupervisedLauncher, LocalLauncher): launch, claim, wait and stop are one life "
                                  "cycle over one state store; the Kubernetes launcher is in cluster/k8s",
    "ignite_tf.cluster.supervision.loop": "one class, Supervisor: its records, the mechanics of starting, "
                                          "stopping and restarting tasks and the poll all change the one state "
                                          "it records; the rules (policy.py), the backends and the outage "
                                          "budget (ignite_tf.retries) are apart already",
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(modules: dict[str, Path]) -> tuple[dict[str, set[str]], list[str]]:
    """Module -> the package's modules it imports; and each private name one module takes from another."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    private = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module,
                            None if f"{node.module}.{a.name}" in modules else a.name) for a in node.names]
            else:
                continue
            for target, imported in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if not target or target == name or not target.startswith("ignite_tf"):
                    continue
                if target != "ignite_tf":
                    graph[name].add(target)
                if imported and imported.startswith("_") and not imported.startswith("__"):
                    private.append(f"{name} imports {target}.{imported}")
    return graph, private


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

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


def test_the_import_graph_has_no_cycle():
    graph, _ = _imports(_modules())
    assert len(graph) > 40 and sum(map(len, graph.values())) > 60  # the walk found the package's imports
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_another_modules_private_name():
    _, private = _imports(_modules())
    assert private == []


def test_no_module_is_a_giant():
    """Over SOFT_LIMIT lines only with a reason in WHOLE (see the module docstring)."""
    lines = {name: len(path.read_text().splitlines()) for name, path in _modules().items()}
    unexplained = {name: n for name, n in lines.items() if n > SOFT_LIMIT and name not in WHOLE}
    assert unexplained == {}, "split these by concept, or name them in WHOLE with why each is one concept"
    stale = [name for name in WHOLE if lines.get(name, 0) <= SOFT_LIMIT]
    assert stale == [], "these fit the limit now (or are gone): drop them from WHOLE"


def test_top_level_modules_are_not_prefix_families():
    """``validation_spec`` beside ``validation_suite`` means a folder is missing."""
    top = [p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("__")]
    prefixes = [t.split("_")[0] for t in top if "_" in t.strip("_")]
    families = {p: [t for t in top if t.startswith(p + "_")] for p in prefixes}
    assert {p: f for p, f in families.items() if len(f) > 1 or p in top} == {}


def test_no_module_imports_the_development_tooling_or_the_tests():
    """The wheel holds the provider only: ``ignite_tf_dev`` (devtools/) and ``tests`` are not installed there."""
    found = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            found += [f"{name} imports {t}" for t in targets if t.split(".")[0] in ("ignite_tf_dev", "tests")]
    assert found == []
