"""The suite's tiers and time budget, as a pytest plugin (``pytest_plugins`` in tests/conftest.py).

Tiers follow from what a test uses, never from a hand-set mark: a test whose fixtures (with everything they
depend on: ``item.fixturenames`` is the closure) start a real component gets that component's mark, and
``real`` besides. ``--tier check`` (``make check``) runs the rest: planners, schemas, policies, settings,
parsers, the public API, the docs; ``--tier all`` (``make test``, the default) runs everything.

Each run ends with its wall time against the tier's budget and the state of ``SLOW``, the registry of tests
whose own body (the ``call`` phase: a shared fixture's start belongs to the component, not to the first test
that asks for it) runs over ``SLOW_S``, each with why it cannot be faster: a test over ``SLOW_S`` with no entry,
and an entry whose test now runs under ``STALE_S``, are named there. Times are not asserted in the run itself
(the machine is shared and noisy): ``make check`` fails on them instead, read from the newest full run's JUnit
report in ``.test-reports/`` (tests/test_suite_rules.py), until the registry says what the suite does. The
band between the two limits keeps a test near the limit from flipping in and out of the registry.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from pathlib import Path

# Fixture -> the real component it starts (or reaches). A test that uses one, directly or through another
# fixture, is not in `make check`.
COMPONENTS = {
    "ignite_cluster": "ignite",
    "secure_ignite_cluster": "ignite",
    "own_ignite": "ignite",
    "airflow_services": "services",
    "k8s_cluster": "k8s",
    "object_store": "objstore",
    "built_wheel": "packaging",
}
REAL = "real"
# Seconds a tier's tests may take on the 2-core development machine (`make` adds its set-up before them).
BUDGET_S = {"check": 3 * 60, "all": 30 * 60}
COLD_BUDGET_S = 45 * 60  # `make test` on a machine where the session builds the local Kubernetes first
SLOW_S, STALE_S = 60.0, 40.0
# JUnit XML of each run (the Makefile's --junitxml: check-<UTC time>.xml, test-<UTC time>.xml), call times only
# (pyproject's junit_duration_report).
REPORTS = Path(__file__).resolve().parents[2] / ".test-reports"

# Tests whose own body runs over SLOW_S, by node id, and why none can be faster.
SLOW: dict[str, str] = {
    "tests/services/test_retry_reattach.py::test_killed_training_task_runner_is_retried_onto_its_running_cluster":
        "Airflow learns of a SIGKILLed task runner only from its missed heartbeats (30 s, the least that keeps live "
        "runners safe on a loaded 2-core machine); the cluster must train on past that and the retry's start",
    "tests/k8s_executor/test_kubernetes_executor.py::test_yaml_pipeline_under_kubernetes_executor":
        "the whole pipeline, each Airflow task in a pod of its own, and a second run refused: pod starts and the "
        "scheduler's loops are the test",
    "tests/pipeline/test_factory.py::test_user_script_end_to_end":
        "the whole pipeline under dag.test() (load, discovery, plan, validation per shard, the tutorial script "
        "unchanged on 2 workers, publish): one run is the test",
    "tests/test_benches.py::test_k8s_deployed_bench_smoke":
        "the bench's smoke run of each of its parts (start-up, input, a deleted pod's restart, locality), each a "
        "cluster of real pods",
    "tests/runtime/test_training.py::test_ported_conv_tutorial_with_repeat_trains_on_two_workers":
        "TensorFlow's tutorial as ported, unchanged (3 epochs x 70 Conv2D steps on 2 workers): the port's own "
        "numbers are what is tested",
    "tests/cluster/k8s/test_supervisor_pod.py::test_training_outlives_its_launcher_and_its_supervisor_pod":
        "a training on the real node that outlives its launcher's SIGKILL and a deleted supervisor pod, replaced by "
        "its Deployment",
    "tests/test_benches.py::test_bench_smoke[startup.py]":
        "the bench's smoke run: each sync worker count and each input side by side, a TensorFlow cluster each",
    "tests/devtools/k8s/test_image.py::test_make_image_writes_a_loadable_docker_archive":
        "`make image` writes the multi-GB task image archive and containerd loads it",
    "tests/test_benches.py::test_bench_smoke[e2e.py]":
        "the bench's smoke run: the example pipeline as a DAG run beside the direct launch",
    "tests/cluster/k8s/test_training.py::test_team_pipeline_as_a_dag_run[async]":
        "the team's pipeline as a DAG run with its training in real pods (chief, workers, ps)",
    "tests/cluster/k8s/test_training.py::test_cli_training_restarts_a_deleted_worker_on_its_warm_pods_and_is_read_from_the_store_alone":
        "a CLI training on the real node, long enough for its warm pods to wait, through a deleted worker pod and the "
        "restart on them",
    "tests/runtime/test_stopping.py::test_an_older_attempt_never_makes_a_restart_train_again":
        "a training stopped and restarted twice, on real TensorFlow processes",
}


def components_of(fixturenames) -> list[str]:
    """The real components a test with these fixtures (the closure) uses."""
    return sorted({COMPONENTS[name] for name in fixturenames if name in COMPONENTS})


def slow_registry_problems(calls: dict[str, float], registry: dict[str, str]) -> list[str]:
    """What is wrong with ``registry``, given the call durations of the tests that ran: tests over ``SLOW_S``
    with no entry, and entries whose test ran under ``STALE_S``. Entries of tests that did not run are not
    judged (a ``-k`` run, ``make check``)."""
    problems = [f"{nodeid} ran {seconds:.0f} s (over {SLOW_S:.0f} s): make it faster, or name it in "
                f"tests/support/tiers.py SLOW with why it cannot be"
                for nodeid, seconds in sorted(calls.items()) if seconds > SLOW_S and nodeid not in registry]
    problems += [f"{nodeid} ran {calls[nodeid]:.0f} s (under {STALE_S:.0f} s): drop it from SLOW"
                 for nodeid in sorted(registry) if nodeid in calls and calls[nodeid] < STALE_S]
    return problems


def last_full_run(reports: Path = REPORTS) -> tuple[Path | None, dict[str, float]]:
    """The newest `make test` report and its tests' call times by node id (``None, {}`` if there is none)."""
    runs = sorted(reports.glob("test-*.xml"))
    if not runs:
        return None, {}
    calls = {}
    for case in ET.parse(runs[-1]).getroot().iter("testcase"):
        path = case.get("classname", "").replace(".", "/")
        calls[f"{path}.py::{case.get('name')}"] = float(case.get("time", 0))
    return runs[-1], calls


def pytest_addoption(parser):
    parser.addoption("--tier", choices=sorted(BUDGET_S), default="all",
                     help="check: only the tests that start no real component (no JVM, TensorFlow process, "
                          "Airflow service, Kubernetes, object store, built wheel); all: everything (default)")


def pytest_configure(config):
    for component in sorted(set(COMPONENTS.values())):
        config.addinivalue_line("markers", f"{component}: uses the real {component} (set from its fixtures)")
    config.addinivalue_line("markers", f"{REAL}: uses a real component, so not in `make check` (set from fixtures)")
    config.pluginmanager.register(Budget(config), "ignite_tf_budget")


def pytest_collection_modifyitems(config, items):
    for item in items:
        used = components_of(getattr(item, "fixturenames", ()))
        for component in used:
            item.add_marker(component)
        if used:
            item.add_marker(REAL)
    if config.getoption("--tier") == "check":
        dropped = [item for item in items if item.get_closest_marker(REAL)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if not item.get_closest_marker(REAL)]


class Budget:
    """Times the run and each test's body; judges them at the end."""

    def __init__(self, config):
        self.tier, self.started, self.config = config.getoption("--tier"), time.monotonic(), config
        self.calls: dict[str, float] = {}
        self.problems: list[str] = []
        self.built_before = True

    @staticmethod
    def _k8s_built() -> bool:
        from ignite_tf_dev.k8s.layout import Layout

        return Layout().built()

    def pytest_sessionstart(self, session):
        self.built_before = self._k8s_built()

    def pytest_runtest_logreport(self, report):
        if report.when == "call":
            self.calls[report.nodeid] = report.duration
        if report.failed:  # said at once: a run cut short (CI's limit) still names what failed and why
            terminal = self.config.pluginmanager.get_plugin("terminalreporter")
            if terminal is not None:
                lines = [line for line in report.longreprtext.splitlines() if line.startswith("E ")]
                terminal.write_line("")
                terminal.write_line(f"FAILED ({report.when}, {report.duration:.0f} s) {report.nodeid}: "
                                    + " | ".join(lines[:6])[:1500], red=True)

    def pytest_sessionfinish(self, session, exitstatus):
        self.problems = slow_registry_problems(self.calls, SLOW)

    def pytest_terminal_summary(self, terminalreporter):
        took = time.monotonic() - self.started
        cold = not self.built_before and self._k8s_built()
        budget = COLD_BUDGET_S if cold else BUDGET_S[self.tier]
        terminalreporter.section("time budget")
        for problem in self.problems:
            terminalreporter.write_line(f"SLOW registry: {problem} (make check fails until it is)", red=True)
        over = took > budget
        terminalreporter.write_line(
            f"tier {self.tier}{' (local Kubernetes built in this run)' if cold else ''}: {len(self.calls)} "
            f"tests in {took:.0f} s ({took / 60:.1f} min), budget {budget} s ({budget / 60:.0f} min)"
            + (": OVER BUDGET" if over else ""), bold=True, red=over, green=not over)
