"""The suite's own rules, read from its source: no test waits by sleeping, no assertion accepts either outcome,
and the tiers' bookkeeping (tests/support/tiers.py) judges what it should.

A sleep as synchronisation passes or fails with the machine's speed: a test waits for the event instead (the
state record, the log line, the pod phase) with ``tests.support.polling.wait_for``. A sleep that *is* the
workload (a job that must still be running, a handler that must be slow) is listed in ``SLEEPS`` with why.
An assertion ``status in (A, B)`` passes whichever way the product went: a test makes its run deterministic
and names the one outcome; where two are truly right, ``EITHER`` says why.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from tests.support import tiers

TESTS = Path(__file__).resolve().parent
# Sleeps that are the workload, not a wait: path (from tests/) -> why.
SLEEPS = {
    "jobs/": "job scripts the tests run as a TensorFlow task's program: their sleeps are the work being supervised",
    "support/": "the polling helpers themselves",
    "runtime/test_platform_probe.py::do_GET": "a metadata server that is slow to answer, the case under test",
    "cluster/test_policy.py::put": "a state write that takes long enough for the SIGTERM to arrive inside it",
    "operators/test_ownership.py::logged_lines": "an async poll of the trigger's log lines: it yields to the event "
                                                 "loop that runs the trigger (wait_for would block that loop)",
}
# Either-outcome assertions over a status that are right as they are: "path::function" -> why.
EITHER: dict[str, str] = {}
STATUS_WORDS = ("status", "state", "outcome", "phase")


@functools.cache
def _test_sources() -> dict[str, ast.Module]:
    return {str(path.relative_to(TESTS)): ast.parse(path.read_text(), str(path))
            for path in sorted(TESTS.rglob("*.py"))}


def _is_sleep(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr == "sleep" and isinstance(func.value, ast.Name) and func.value.id in ("time", "asyncio")
    return isinstance(func, ast.Name) and func.id == "sleep"


def _enclosing(tree: ast.Module) -> dict[ast.AST, str]:
    """Each node -> the name of the function it is in ("" at module level)."""
    owner: dict[ast.AST, str] = {}

    def visit(node: ast.AST, name: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else name
            owner[child] = inner
            visit(child, inner)

    visit(tree, "")
    return owner


def sleeps_in(sources: dict[str, ast.Module], allowed: dict[str, str]) -> list[str]:
    found = []
    for path, tree in sources.items():
        if any(path.startswith(prefix) for prefix in allowed):
            continue
        owner = _enclosing(tree)
        found += [f"{path}:{node.lineno} ({owner[node] or 'module'})" for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and _is_sleep(node) and f"{path}::{owner[node]}" not in allowed]
    return found


def either_outcomes_in(sources: dict[str, ast.Module], allowed: dict[str, str]) -> list[str]:
    found = []
    for path, tree in sources.items():
        owner = _enclosing(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assert):
                continue
            for compare in ast.walk(node.test):
                if not (isinstance(compare, ast.Compare) and isinstance(compare.ops[0], ast.In)):
                    continue
                choices = compare.comparators[0]
                if not (isinstance(choices, ast.Tuple | ast.List | ast.Set) and len(choices.elts) > 1
                        and all(isinstance(e, ast.Constant | ast.Attribute) for e in choices.elts)):
                    continue
                subject = ast.unparse(compare.left).lower()
                key = f"{path}::{owner[node]}"
                if any(word in subject for word in STATUS_WORDS) and key not in allowed:
                    found.append(f"{path}:{node.lineno} ({owner[node]}): {ast.unparse(compare)}")
    return found


def test_no_test_waits_by_sleeping():
    found = sleeps_in(_test_sources(), SLEEPS)
    assert found == [], ("wait for the event with tests.support.polling.wait_for (or, for a sleep that is the "
                         "workload, list it in SLEEPS with why)")


def test_no_assertion_accepts_either_status():
    found = either_outcomes_in(_test_sources(), EITHER)
    assert found == [], "make the run deterministic and assert its one outcome (or list it in EITHER with why)"


def test_the_rules_find_what_they_forbid():
    """The two readers above on planted source: each finds its case, and an allow-list entry silences it."""
    planted = {"x/test_planted.py": ast.parse(
        "import time\n"
        "def test_a():\n"
        "    time.sleep(1)\n"
        "    assert state.status in ('succeeded', 'failed')\n"
        "    assert kind in ('a', 'b')\n"  # not over a status: a membership test of a value
        "    assert phase == 'Running'\n")}
    assert sleeps_in(planted, {}) == ["x/test_planted.py:3 (test_a)"]
    assert sleeps_in(planted, {"x/test_planted.py::test_a": "why"}) == []
    assert either_outcomes_in(planted, {}) == [
        "x/test_planted.py:4 (test_a): state.status in ('succeeded', 'failed')"]
    assert either_outcomes_in(planted, {"x/test_planted.py::test_a": "why"}) == []


def test_the_allow_lists_name_what_is_there():
    sources = _test_sources()
    for key in [*SLEEPS, *EITHER]:
        path, _, function = key.partition("::")
        if path.endswith("/"):
            assert any(p.startswith(path) for p in sources), f"{key}: no such folder in tests/"
            continue
        assert path in sources, f"{key}: no such file"
        names = {n.name for n in ast.walk(sources[path]) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        assert function in names, f"{key}: no function {function!r} in {path}"


def test_components_follow_from_the_fixtures_a_test_uses():
    assert tiers.components_of(["tmp_path", "cache_name"]) == []
    assert tiers.components_of(["ignite_client", "ignite_conn", "ignite_cluster", "k8s_cluster"]) == ["ignite", "k8s"]


def test_the_slow_registry_names_unlisted_slow_tests_and_stale_entries():
    calls = {"t::slow_unlisted": 61.0, "t::slow_listed": 80.0, "t::now_fast": 10.0, "t::near": 50.0}
    registry = {"t::slow_listed": "why", "t::now_fast": "why", "t::near": "why", "t::not_run": "why"}
    problems = tiers.slow_registry_problems(calls, registry)
    assert [p.split()[0] for p in problems] == ["t::slow_unlisted", "t::now_fast"], problems
    assert "SLOW" in problems[0] and "drop it from SLOW" in problems[1]


def test_every_slow_entry_names_a_test_of_the_suite():
    """A SLOW entry left behind by a rename would never be judged again."""
    sources = _test_sources()
    for nodeid in tiers.SLOW:
        path, _, name = nodeid.partition("::")
        path = str(Path(path).relative_to("tests"))
        assert path in sources, f"{nodeid}: no such file"
        names = {n.name for n in ast.walk(sources[path]) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        assert name.split("[")[0] in names, f"{nodeid}: no test {name!r} in {path}"


def test_the_slow_registry_says_what_the_last_full_run_did():
    """The registry against the newest `make test` report in .test-reports/ (none on a fresh clone: nothing to
    judge yet): a test over the limit that it does not name, or an entry whose test ran well under it, fails
    here until SLOW is brought up to date. Checked here rather than in the run itself, whose times are the
    shared machine's weather. Tests whose file is gone since (moved, renamed) are not judged."""
    report, calls = tiers.last_full_run()
    calls = {nodeid: s for nodeid, s in calls.items() if (TESTS.parent / nodeid.split("::")[0]).is_file()}
    problems = tiers.slow_registry_problems(calls, tiers.SLOW)
    assert problems == [], f"{report}: bring tests/support/tiers.py SLOW up to date"


def test_the_last_full_run_is_read_by_node_id(tmp_path):
    (tmp_path / "test-20261128T000000.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.cluster.test_x" name="test_a[p]" time="61.5"/>'
        '<testcase classname="tests.test_y" name="test_b" time="0.1"/></testsuite></testsuites>')
    (tmp_path / "check-20261129T000000.xml").write_text("<testsuites/>")  # a check run is not a full run
    report, calls = tiers.last_full_run(tmp_path)
    assert report.name == "test-20261128T000000.xml"
    assert calls == {"tests/cluster/test_x.py::test_a[p]": 61.5, "tests/test_y.py::test_b": 0.1}
