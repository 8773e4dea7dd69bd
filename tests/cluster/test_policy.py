"""The supervision policy's decisions, fast: no process, no pod, no Ignite.

``Policy.decide`` is a pure function of plain data (the recorded state, one Observation per task, the clock),
so these tests give it plain data; the loop is driven by ``PlainTasks``, a backend made of plain data. What
real processes and pods do (exit statuses, ports, signals, pod phases) is tested with real processes in
test_cluster.py / test_supervision.py and with pods in tests/cluster/k8s/; here only the rules are.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from dataclasses import dataclass

import pytest

from ignite_tf.cluster.spec import build_spec
from ignite_tf.cluster.supervision.backend import Backend
from ignite_tf.cluster.supervision.loop import Supervisor
from ignite_tf.cluster.supervision.policy import AllUp, Finish, GoOn, Observation, Policy, Restart
from ignite_tf.contract import DATA_EXIT_CODE, UNAVAILABLE_EXIT_CODE
from ignite_tf.state import ClusterState, ExitCode, LocalStateStore, Status, TaskState, TaskStatus

SIGKILL = -9


def ports():
    """Port numbers for a spec whose tasks never listen."""
    numbers = itertools.count(20000)
    return lambda host: next(numbers)


@dataclass
class Run:
    """What one start of a task does: up at once, then ``exit_code`` after ``polls`` polls (None: it runs
    until it is stopped)."""

    exit_code: int | None = None
    polls: int = 1
    up: bool = True


class PlainTasks(Backend):
    """A backend made of plain data: each start of a task follows the next ``Run`` of its list (the last
    repeats). A stand-in for processes and pods, which the policy never sees: it decides from observations
    only, and these are observations."""

    poll_s = 0.0

    def __init__(self, spec, runs: dict[str, list[Run]]):
        super().__init__(spec)
        self.runs = runs
        self.starts: list[str] = []
        self.current: dict[str, tuple[Run, int]] = {}  # task -> (its run, polls since its start)
        self.stopped: set[str] = set()
        self.pids: dict[str, int] = {}

    def start(self, task, attempt):
        runs = self.runs.get(task.name, [Run()])
        n = self.starts.count(task.name)
        self.starts.append(task.name)
        self.current[task.name] = (runs[min(n, len(runs) - 1)], 0)
        self.stopped.discard(task.name)
        self.pids[task.name] = 1000 + len(self.starts)
        return self.pids[task.name]

    def observe(self, task, *, starting):
        run, polls = self.current[task.name]
        self.current[task.name] = (run, polls + 1)
        if task.name in self.stopped:
            code = -15
        elif run.exit_code is not None and polls + 1 >= run.polls:
            code = run.exit_code
        else:
            code = None
        return Observation(task.name, code, up=starting and run.up, pid=self.pids[task.name])

    def stop(self, tasks, grace):
        self.stopped.update(t.name for t in tasks)
        return {}


def supervise(tmp_path, mode, runs, **settings):
    spec = build_spec(cluster_id="plain", cache="c", mode=mode, workers=2, ps=1, run_dir=str(tmp_path / "run"),
                      job={"entry_point": "m:f"}, port_for=ports(), **settings)
    backend = PlainTasks(spec, runs)
    supervisor = Supervisor(spec, LocalStateStore(tmp_path / "state"), backend)
    code = supervisor.run()
    return code, supervisor.state, backend


# -- the async server that ends before the chief (it used to bypass the policy) --------------------------
def test_async_server_ending_early_is_not_restarted_under_never(tmp_path):
    code, state, backend = supervise(tmp_path, "async", {"chief-0": [Run(0, polls=50)], "ps-0": [Run(0, polls=2)]},
                                     restart_policy="never", max_restarts=2)
    assert code is ExitCode.USER_CODE_FAILED and state.status is Status.FAILED
    assert state.restarts == 0 and backend.starts.count("ps-0") == 1
    assert "ps-0 (pid 1004) exited with status 0 before the chief finished" in state.reason
    assert "restart_policy 'never' restarts nothing" in state.reason
    assert state.failures[-1]["kind"] == "ended before the chief" and state.failures[-1]["action"].startswith(
        "not restarted")


def test_async_server_ending_early_is_restarted_alone_by_default(tmp_path):
    code, state, backend = supervise(tmp_path, "async",
                                     {"chief-0": [Run(0, polls=8)], "ps-0": [Run(0, polls=2), Run()]})
    assert code is ExitCode.SUCCEEDED, state.reason
    assert state.restarts == 1 and backend.starts.count("ps-0") == 2 and backend.starts.count("chief-0") == 1
    assert state.failures[0]["action"] == "restarted ps-0 alone" and state.failures[0]["retryable"] is True


def test_async_server_ending_early_again_and_again_exhausts_the_restarts(tmp_path):
    code, state, _ = supervise(tmp_path, "async", {"chief-0": [Run(0, polls=100)], "worker-1": [Run(0, polls=2)]},
                               max_restarts=2)
    assert code is ExitCode.RESTARTS_EXHAUSTED and state.restarts == 2
    assert "worker-1" in state.reason and "before the chief finished; restarts exhausted (2/2)" in state.reason


# -- scope of a restart -------------------------------------------------------------------------------------
def test_sync_failure_restarts_every_task_and_then_succeeds(tmp_path):
    runs = {"worker-0": [Run(0, polls=5)], "worker-1": [Run(SIGKILL, polls=2), Run(0, polls=5)]}
    code, state, backend = supervise(tmp_path, "sync", runs)
    assert code is ExitCode.SUCCEEDED and state.restarts == 1
    assert [t.restarts for t in state.tasks] == [1, 1] and backend.starts.count("worker-0") == 2
    assert state.failures[0]["action"] == "restarted the cluster" and state.failures[0]["signal"] == "SIGKILL"


def test_async_worker_alone_ps_the_whole_cluster(tmp_path):
    runs = {"chief-0": [Run(0, polls=10)], "worker-1": [Run(SIGKILL, polls=2), Run()]}
    code, state, backend = supervise(tmp_path, "async", runs)
    assert code is ExitCode.SUCCEEDED and backend.starts.count("worker-0") == 1
    assert {t.name: t.restarts for t in state.tasks} == {"chief-0": 0, "worker-0": 0, "worker-1": 1, "ps-0": 0}
    runs = {"chief-0": [Run(0, polls=10)], "ps-0": [Run(SIGKILL, polls=2), Run()]}
    code, state, backend = supervise(tmp_path / "another", "async", runs)  # not a resume of the first cluster
    assert code is ExitCode.SUCCEEDED and backend.starts.count("worker-0") == 2
    assert state.failures[0]["action"] == "restarted the cluster"


# -- what is retryable ----------------------------------------------------------------------------------------
def spec_and_state(mode="sync", status=Status.RUNNING, restarts=0, **settings):
    spec = build_spec(cluster_id="p", cache="c", mode=mode, workers=2, ps=1, run_dir="/r", job={},
                      port_for=ports(), **settings)
    state = ClusterState(cluster_id="p", cache="c", mode=mode, run_dir="/r", status=status, restarts=restarts,
                         tasks=[TaskState(t.role.value, t.index, t.host, t.port, state=TaskStatus.RUNNING)
                                for t in spec.tasks])
    return Policy(spec), state


def ended(state, **codes):
    """Record the ends of this poll as the loop does; the observations of every task."""
    for t in state.tasks:
        if t.name in codes:
            t.exit_code = codes[t.name]
            t.state = TaskStatus.EXITED if codes[t.name] == 0 else TaskStatus.FAILED
    return {t.name: Observation(t.name, codes.get(t.name), pid=7) for t in state.tasks}, list(codes)


@pytest.mark.parametrize("policy, code, restarted", [
    ("exit-code", 1, False), ("exit-code", 137, True), ("exit-code", SIGKILL, True),
    ("exit-code", UNAVAILABLE_EXIT_CODE, True), ("exit-code", 74, False),
    ("on-failure", 1, True), ("never", SIGKILL, False), ("never", UNAVAILABLE_EXIT_CODE, False),
    ("on-failure", DATA_EXIT_CODE, False), ("exit-code", DATA_EXIT_CODE, False),
])
def test_the_restart_policy_decides_what_is_restarted(policy, code, restarted):
    rules, state = spec_and_state(restart_policy=policy)
    seen, names = ended(state, **{"worker-1": code})
    decision = rules.decide(state, seen, names, now=0.0, since_start=1.0)
    if restarted:
        assert isinstance(decision, Restart) and decision.task is None
        if code == UNAVAILABLE_EXIT_CODE:
            assert decision.failure["kind"] == "infrastructure unavailable (exit status 75)", decision.failure
    elif code == DATA_EXIT_CODE:  # never restarted, whatever the policy: the same rows fail again
        assert isinstance(decision, Finish) and decision.code is ExitCode.DATA_INVALID
        assert "the data cannot be trained on: never restarted, whatever the restart policy" in decision.reason
    else:
        assert isinstance(decision, Finish) and decision.code is ExitCode.USER_CODE_FAILED
        assert ("'never'" if policy == "never" else "not retryable") in decision.reason


def test_a_data_failure_is_the_cause_when_its_peers_fail_with_it():
    """The worker that found the rows changed exits 65; its peer fails in the collective it waited in (1)."""
    rules, state = spec_and_state(restart_policy="on-failure")
    seen, names = ended(state, **{"worker-0": 1, "worker-1": DATA_EXIT_CODE})
    decision = rules.decide(state, seen, names, now=0.0, since_start=1.0)
    assert isinstance(decision, Finish) and decision.code is ExitCode.DATA_INVALID
    assert decision.reason.startswith("worker-1"), decision.reason


def test_tasks_ending_together_are_judged_by_the_retryable_one():
    """A killed sync worker makes its peer fail in a collective with an ordinary error, in the same poll."""
    rules, state = spec_and_state()
    seen, names = ended(state, **{"worker-0": 1, "worker-1": SIGKILL})
    decision = rules.decide(state, seen, names, now=0.0, since_start=1.0)
    assert isinstance(decision, Restart) and decision.failure["task"] == "worker-1"
    assert len(decision.notes) == 2


def test_restarts_exhausted_and_sync_success_needs_every_worker():
    rules, state = spec_and_state(restarts=2)
    seen, names = ended(state, **{"worker-1": SIGKILL})
    decision = rules.decide(state, seen, names, now=0.0, since_start=1.0)
    assert isinstance(decision, Finish) and decision.code is ExitCode.RESTARTS_EXHAUSTED
    assert decision.reason.endswith("restarts exhausted (2/2)")
    rules, state = spec_and_state()
    seen, names = ended(state, **{"worker-0": 0})
    assert isinstance(rules.decide(state, seen, names, now=0.0, since_start=1.0), GoOn)
    seen, names = ended(state, **{"worker-1": 0})
    assert rules.decide(state, seen, names, now=0.0, since_start=1.0).status is Status.SUCCEEDED


# -- the watchdog and the start-up deadline ----------------------------------------------------------------
def test_silent_tasks_are_one_failure_without_a_pid():
    rules, state = spec_and_state(progress_timeout_s=30, max_restarts=0)
    seen = {t.name: Observation(t.name, progress={"time": 100.0, "what": "step 3", "watch": True})
            for t in state.tasks}
    assert isinstance(rules.decide(state, seen, [], now=120.0, since_start=50.0), GoOn)
    decision = rules.decide(state, seen, [], now=140.0, since_start=70.0)
    assert isinstance(decision, Finish) and decision.code is ExitCode.NO_PROGRESS
    assert decision.reason.startswith("worker-0, worker-1 made no progress for 40s")
    assert decision.notes[0].startswith("no progress from worker-0 (last: step 3 at")
    serving = {n: Observation(n, progress={"time": 0.0, "what": "serving", "watch": False}) for n in seen}
    assert isinstance(rules.decide(state, serving, [], now=140.0, since_start=70.0), GoOn)
    rules, state = spec_and_state(progress_timeout_s=0)
    assert isinstance(rules.decide(state, seen, [], now=1e9, since_start=70.0), GoOn)


def test_start_up_deadline_names_what_is_not_up_and_why():
    rules, state = spec_and_state(status=Status.STARTING, startup_deadline_s=10)
    state.tasks[1].state = TaskStatus.STARTING
    seen = {t.name: Observation(t.name) for t in state.tasks}
    seen["worker-1"] = Observation("worker-1", waiting="ImagePullBackOff: no such image")
    assert isinstance(rules.decide(state, seen, [], now=0.0, since_start=9.0), GoOn)
    decision = rules.decide(state, seen, [], now=0.0, since_start=11.0)
    assert decision.code is ExitCode.STARTUP_DEADLINE
    assert "not up: worker-1 (ImagePullBackOff: no such image)" in decision.reason
    state.tasks[1].state = TaskStatus.RUNNING
    assert isinstance(rules.decide(state, seen, [], now=0.0, since_start=11.0), AllUp)


def test_a_stop_request_stops_the_plain_cluster(tmp_path):
    spec = build_spec(cluster_id="stopped", cache="c", mode="sync", workers=1, run_dir=str(tmp_path / "run"),
                      job={}, port_for=ports())
    store = LocalStateStore(tmp_path / "state")
    store.request_stop("stopped")
    supervisor = Supervisor(spec, store, PlainTasks(spec, {}))
    assert supervisor.run() is ExitCode.STOPPED
    final = store.get("stopped")
    assert final.status is Status.STOPPED and final.tasks[0].state == "killed"


def test_a_second_supervisor_resumes_an_ended_cluster_and_refuses_a_live_one(tmp_path):
    """The same cluster id and store twice: the second supervisor goes on from the first one's state (attempts
    above its last, its failures kept); beside a supervisor that still heartbeats it starts nothing."""
    runs = {"worker-0": [Run(0, polls=5)], "worker-1": [Run(SIGKILL, polls=2), Run(0, polls=5)]}
    _, first, _ = supervise(tmp_path, "sync", runs)
    assert first.attempt == 1 and first.resumes == 0 and len(first.failures) == 1
    code, second, backend = supervise(tmp_path, "sync", {"worker-0": [Run(0, polls=3)], "worker-1": [Run(0, polls=3)]})
    assert code is ExitCode.SUCCEEDED and second.resumes == 1 and second.attempt == 2
    assert len(second.failures) == 1 and second.started_at == first.started_at
    store = LocalStateStore(tmp_path / "state")
    live = store.get("plain")
    live.status, live.heartbeat = Status.RUNNING, time.time()
    store.put(live)
    code, _, backend = supervise(tmp_path, "sync", {"worker-0": [Run(0)], "worker-1": [Run(0)]})
    assert code is ExitCode.INTERNAL_ERROR and backend.starts == []


# -- a replaced pod supervisor (SIGTERM while its tasks live on) -------------------------------------------------
class SurvivingTasks(PlainTasks):
    """``PlainTasks`` whose tasks outlive the supervisor, as pods under a pod supervisor do."""

    survives_supervisor = True

    def __init__(self, spec, runs):
        super().__init__(spec, runs)
        self.handed_over = False

    def hand_over(self):
        self.handed_over = True


class TermDuringPut(LocalStateStore):
    """A state store whose ``put`` number ``at`` gets this process's SIGTERM while it writes: the moment a
    pod deletion may come. The write then fails, as one may; the supervisor reports it and goes on."""

    def __init__(self, root, at: int):
        super().__init__(root)
        self.at, self.puts = at, 0

    def put(self, state):
        self.puts += 1
        if self.puts == self.at:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler runs here, inside the write
            raise OSError("the store went away")
        super().put(state)


def test_a_sigterm_during_a_state_write_still_hands_over(tmp_path):
    """The SIGTERM that replaces a pod supervisor may arrive inside a state write, which reports its errors and
    goes on: the hand-over must not be lost there (it was: the old supervisor then supervised the cluster to its
    end beside its successor and recorded the end as its own). It leaves at the next poll, tasks running, the
    handler it replaced restored."""
    spec = build_spec(cluster_id="replaced", cache="c", mode="sync", workers=2, run_dir=str(tmp_path / "run"),
                      job={}, port_for=ports())
    backend = SurvivingTasks(spec, {"worker-0": [Run(0, polls=400)], "worker-1": [Run(0, polls=400)]})
    store = TermDuringPut(tmp_path / "state", at=2)
    before = signal.getsignal(signal.SIGTERM)
    code = Supervisor(spec, store, backend).run()
    assert signal.getsignal(signal.SIGTERM) is before
    assert code is ExitCode.STOPPED and backend.handed_over
    assert not backend.stopped and backend.starts == ["worker-0", "worker-1"]
    recorded = store.get("replaced")
    assert not recorded.status.final, recorded.status  # the successor goes on from a running cluster
    assert max(run[1] for run in backend.current.values()) < 400  # left long before the tasks' end


class RecordingStore(LocalStateStore):
    """A state store that keeps the status of every state written to it, in order."""

    def __init__(self, root):
        super().__init__(root)
        self.written: list[Status] = []

    def put(self, state):
        self.written.append(state.status)
        super().put(state)


@pytest.mark.parametrize("ending", ["succeeded", "stopped"])
def test_nothing_is_written_after_the_final_state(tmp_path, ending):
    """Whoever sees a cluster's final state (a stop returning, a retry) may start its next supervisor at once:
    the ended supervisor must write nothing after that record (a second write of it, from its clean-up, once
    overwrote the next supervisor's state and ended a resumed training as 'stopped')."""
    spec = build_spec(cluster_id="ends", cache="c", mode="sync", workers=2, run_dir=str(tmp_path / "run"),
                      job={}, port_for=ports())
    store = RecordingStore(tmp_path / "state")
    if ending == "stopped":
        store.request_stop("ends")
    code = Supervisor(spec, store,
                      PlainTasks(spec, {"worker-0": [Run(0, polls=3)], "worker-1": [Run(0, polls=3)]})).run()
    assert code is (ExitCode.STOPPED if ending == "stopped" else ExitCode.SUCCEEDED)
    finals = [i for i, status in enumerate(store.written) if status.final]
    assert finals == [len(store.written) - 1], store.written


# -- what a backend may ask of its supervisor ------------------------------------------------------------
def test_the_supervisor_is_the_host_its_backends_talk_to(tmp_path):
    """Backends reach the loop through ``SupervisorHost`` only: the ``Supervisor`` is one, with every method it
    declares, each used by a backend of the package and none other; what a backend reads and records through it
    is the cluster's recorded state, seen here from a plain backend during a real run."""
    import inspect
    import re
    from pathlib import Path

    from ignite_tf.cluster.supervision.backend import SupervisorHost

    declared = {n for n, v in vars(SupervisorHost).items() if inspect.isfunction(v) and not n.startswith("_")}
    assert declared == {"event", "mark", "save", "beat", "cluster_attempt", "restart_count", "started_at",
                        "record_launcher", "epochs"}
    for name in declared:
        mine = inspect.signature(getattr(Supervisor, name))
        assert list(mine.parameters) == list(inspect.signature(getattr(SupervisorHost, name)).parameters), name
    cluster = Path(__file__).resolve().parents[2] / "provider" / "ignite_tf" / "cluster"
    used = {m for path in cluster.rglob("*.py") for m in re.findall(r"(?:self|b)\.host\.(\w+)", path.read_text())}
    assert used == declared

    seen: dict[str, object] = {}

    class Asking(PlainTasks):
        def refresh(self):
            assert isinstance(self.host, SupervisorHost)
            seen.update(attempt=self.host.cluster_attempt(), restarts=self.host.restart_count(),
                        started=self.host.started_at(), epochs=self.host.epochs())
            self.host.record_launcher("asked", True)

    spec = build_spec(cluster_id="asking", cache="c", mode="sync", workers=1, run_dir=str(tmp_path / "run"),
                      job={"entry_point": "m:f"}, port_for=ports())
    backend = Asking(spec, {spec.chief.name: [Run(0, polls=3)]})
    supervisor = Supervisor(spec, LocalStateStore(tmp_path / "state"), backend)
    assert backend.host is supervisor
    assert supervisor.run() is ExitCode.SUCCEEDED
    assert seen == {"attempt": 0, "restarts": 0, "started": supervisor.state.started_at, "epochs": []}
    assert supervisor.state.launcher["asked"] is True
