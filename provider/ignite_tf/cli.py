"""``ignite-tf``: TensorFlow clusters over Ignite caches, with the commands of Apache Ignite's TensorFlow tool.

    ignite-tf start [-c CFG] [--mode sync|async] [--workers N] [--ps M] [--max-restarts K] [--detach]
                    [--env NAME[=VALUE]]... [--launcher local|kubernetes [--k8s FILE_OR_JSON] [--namespace NS]
                    [--image IMAGE] [--placement required|preferred|none]] CACHE_NAME JOB_DIR COMMAND [ARGS...]
    ignite-tf stop [-c CFG] CLUSTER_ID
    ignite-tf attach [-c CFG] CLUSTER_ID
    ignite-tf ps [-c CFG] [-a] [CLUSTER_ID]
    ignite-tf tensorboard [-c CFG] [--port P] [--host H] CLUSTER_ID|RUN_DIR...
    ignite-tf load [-c CFG] [--key COLUMN] [--schema FILE] [--column NAME:TYPE ...] CACHE_NAME FILE

``-c`` is a connection file (JSON/YAML with ``addresses``, ``username``, ``password``...) or an Airflow
connection id; without it ``IGNITE_TF_ADDRESSES``, and without that the thin client's default
127.0.0.1:10800, as Ignite's own tools do. Cluster state lives in Ignite (system caches), so any machine
with the connection can list and stop clusters.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ignite_tf import __version__
from ignite_tf.cluster.k8s.settings import DEFAULT_CONN_ID as K8S_CONN_ID
from ignite_tf.cluster.k8s.settings import DEFAULT_PLACEMENT, Placement
from ignite_tf.cluster.launcher import LauncherKind
from ignite_tf.cluster.supervision import RestartPolicy, Supervision
from ignite_tf.connection import DEFAULT_ADDRESS, ENV_ADDRESSES
from ignite_tf.contract import Mode
from ignite_tf.errors import IgniteTFError
from ignite_tf.typecodes import LOADABLE

SUPERVISION = Supervision()  # the defaults the flags show


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-c", "--config",
                        help=f"connection file (JSON/YAML) or Airflow connection id (default: ${ENV_ADDRESSES}, "
                             f"else {DEFAULT_ADDRESS}, the thin client's default)")
    common.add_argument("-V", "--version", action="version", version=f"ignite-tf {__version__}")
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(prog="ignite-tf", parents=[common],
                                     description="Run TensorFlow clusters next to the data of an Apache Ignite cache.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    start = sub.add_parser("start", parents=[common], help="start a TF cluster over a cache and run a job on it")
    start.add_argument("--mode", choices=[m.value for m in Mode], default=Mode.SYNC.value,
                       help="sync: MultiWorkerMirroredStrategy; async: ParameterServerStrategy (default sync)")
    start.add_argument("--workers", type=_positive, help="workers (default: one per Ignite server node)")
    start.add_argument("--ps", type=_positive, default=1, help="parameter servers in async mode (default 1)")
    start.add_argument("--max-restarts", type=_non_negative, default=SUPERVISION.max_restarts,
                       help=f"restarts after failures (default {SUPERVISION.max_restarts})")
    start.add_argument("--startup-deadline", type=float, default=SUPERVISION.startup_deadline_s, metavar="SECONDS",
                       help=f"seconds for all tasks to come up (default {SUPERVISION.startup_deadline_s:.0f})")
    start.add_argument("--restart-policy", choices=[p.value for p in RestartPolicy],
                       default=SUPERVISION.restart_policy.value,
                       help="which failures are restarted: on-failure (all), exit-code (signals, statuses >= 128, "
                            "no progress; not the job's own error), never "
                            f"(default {SUPERVISION.restart_policy.value})")
    start.add_argument("--progress-timeout", type=float, default=SUPERVISION.progress_timeout_s, metavar="SECONDS",
                       help="a task silent this long after its first progress report (steps, ignite_tf.data reads) "
                            f"is a failure; 0 turns the watchdog off (default {SUPERVISION.progress_timeout_s:.0f})")
    start.add_argument("--id", dest="cluster_id",
                       help="cluster id (default: generated); an id that runs is attached to, one that succeeded "
                            "is not trained again, one that failed, stopped or was lost resumes from its checkpoints")
    start.add_argument("--detach", action="store_true", help="print the cluster id and return at once")
    start.add_argument("--env", action="append", default=[], metavar="NAME[=VALUE]",
                       help="give every task this variable (repeatable): NAME passes this shell's value, NAME=VALUE "
                            "sets one (recorded in the run folder: not for secrets); tasks get only the runtime's "
                            "variables otherwise")
    start.add_argument("--launcher", choices=[k.value for k in LauncherKind], default=LauncherKind.LOCAL.value,
                       help="where the tasks run: local processes, or pods on Kubernetes next to the Ignite nodes "
                            f"(connection {K8S_CONN_ID}: kubeconfig or in-cluster) (default {LauncherKind.LOCAL})")
    start.add_argument("--k8s", metavar="FILE_OR_JSON",
                       help="Kubernetes settings, a YAML/JSON file or inline JSON: namespace, image, resources, "
                            "service_account, node_selector, tolerations, volumes, labels, placement, ...")
    start.add_argument("--namespace", help="Kubernetes namespace (with --launcher kubernetes)")
    start.add_argument("--image", help="task image (with --launcher kubernetes; needed unless the source tree's dev "
                                       "tooling is installed)")
    start.add_argument("--placement", choices=[p.value for p in Placement],
                       help="workers next to their Ignite nodes (with --launcher kubernetes; "
                            f"default {DEFAULT_PLACEMENT})")
    start.add_argument("--run-root", metavar="DIR_OR_URL",
                       help="where the run lives: a folder, or an object-store URL such as s3://bucket/runs (its "
                            "credentials from the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
                            "AWS_ENDPOINT_URL...) (default $IGNITE_TF_RUN_ROOT, else ~/.cache/ignite-tf/runs)")
    start.add_argument("--py-module", dest="py_modules", action="append", default=[], metavar="PATH",
                       help="a folder or .py file shipped to every task, first on its PYTHONPATH (repeatable); "
                            "JOB_DIR is shipped too when the run root is an object store")
    start.add_argument("--evaluation", type=float, default=None, metavar="FRACTION",
                       help="share of the rows held out for evaluation by a hash of their key (e.g. 0.1; default "
                            "none): never trained on, the model is evaluated on them after training")
    start.add_argument("--evaluation-seed", type=_non_negative, default=0, metavar="N",
                       help="salt of the held-out rows' key hash (default 0; keep it to compare versions)")
    start.add_argument("cache", metavar="CACHE_NAME")
    start.add_argument("job_dir", metavar="JOB_DIR", help="folder or zip with the job's files")
    # The command (program, then its arguments) is ``command`` of TFClusterOperator and of a YAML spec.
    start.add_argument("program", metavar="COMMAND",
                       help="the command run in JOB_DIR by every worker (sync) or the chief, then its ARGS")
    start.add_argument("program_args", metavar="ARGS", nargs=argparse.REMAINDER)

    stop = sub.add_parser("stop", parents=[common], help="stop a running cluster, from any host (a request in the "
                                                         "state store that its supervisor obeys)")
    stop.add_argument("cluster_id", metavar="CLUSTER_ID")
    attach = sub.add_parser("attach", parents=[common], help="stream a running cluster's output")
    attach.add_argument("cluster_id", metavar="CLUSTER_ID")
    attach.add_argument("--from-start", action="store_true", help="print the output from its beginning")
    ps = sub.add_parser("ps", parents=[common], help="list clusters that have not ended (lost ones: no heartbeat for "
                                                     "a while, on any host), or the tasks of one")
    ps.add_argument("-a", "--all", action="store_true", help="include finished clusters")
    ps.add_argument("cluster_id", metavar="CLUSTER_ID", nargs="?",
                    help="list this cluster's tasks: pid, state, exit, log file, and its run folder")

    tb = sub.add_parser("tensorboard", parents=[common], help="serve the TensorBoard files of runs")
    tb.add_argument("targets", metavar="CLUSTER_ID|RUN_DIR", nargs="+",
                    help="a cluster id, a run folder, or a folder of run folders (every run in it)")
    tb.add_argument("--port", type=_positive, default=6006, help="TensorBoard's port (default 6006)")
    tb.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")

    load = sub.add_parser("load", parents=[common], help="load a CSV or Parquet file into a cache")
    load.add_argument("cache", metavar="CACHE_NAME")
    load.add_argument("file", metavar="FILE")
    load.add_argument("--key", help="key column (default: a hash of each row)")
    load.add_argument("--schema", metavar="FILE",
                      help=f"JSON/YAML mapping of column -> type ({', '.join(LOADABLE)}); "
                           "only the declared columns (and --key) are loaded")
    load.add_argument("--column", metavar="NAME:TYPE", action="append", default=[], type=_column_arg,
                      help="declare one column's type (repeatable; adds to or overrides --schema)")
    return parser


def _column_arg(text: str) -> tuple[str, str]:
    name, sep, ctype = text.rpartition(":")
    if not sep or not name or ctype not in LOADABLE:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME:TYPE with TYPE one of {', '.join(LOADABLE)}")
    return name, ctype


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {text})")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more (got {text})")
    return value


def connection(config: str | None):
    """-c FILE, -c AIRFLOW_CONN_ID, the environment, else the thin client's default address."""
    from ignite_tf.connection import IgniteConnectionConfig

    if config:
        if Path(config).exists():
            return IgniteConnectionConfig.from_file(config)
        if "/" in config or config.endswith((".json", ".yaml", ".yml")):
            raise IgniteTFError(f"connection file {config} not found")
        from ignite_tf.hooks.ignite import IgniteHook

        return IgniteHook(config).get_config()
    return IgniteConnectionConfig.from_env() or IgniteConnectionConfig.default()


def _launcher(conn, args=None):
    from ignite_tf.cluster.api import make_launcher

    if args is None or LauncherKind.parse(getattr(args, "launcher", None)) is LauncherKind.LOCAL:
        if args is not None and (args.k8s or args.namespace or args.image or args.placement):
            raise IgniteTFError("--k8s, --namespace, --image and --placement go with --launcher kubernetes")
        return make_launcher(conn)
    return make_launcher(conn, kind=LauncherKind.KUBERNETES, kubernetes=_k8s_settings(args))


def _k8s_settings(args) -> dict:
    import json

    import yaml

    settings: dict = {}
    if args.k8s:
        text = Path(args.k8s).read_text() if Path(args.k8s).is_file() else args.k8s
        try:
            settings = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise IgniteTFError(f"--k8s: neither a file nor YAML/JSON: {exc}") from None
        if not isinstance(settings, dict):
            raise IgniteTFError(f"--k8s: expected a mapping of settings, got {json.dumps(settings)[:80]}")
    for name in ("namespace", "image", "placement"):
        if getattr(args, name):
            settings[name] = getattr(args, name)
    return settings


def cmd_start(args, conn) -> int:
    from ignite_tf.cluster.api import start_cluster
    from ignite_tf.cluster.job import TrainingJob
    from ignite_tf.state import ExitCode

    launcher = _launcher(conn, args)
    job = TrainingJob(command=(args.program, *args.program_args), job_dir=args.job_dir, mode=args.mode,
                      workers=args.workers, ps=args.ps, py_modules=tuple(str(m) for m in args.py_modules or ()))
    state = start_cluster(args.cache, job, conn=conn, cluster_id=args.cluster_id, launcher=launcher, env=args.env,
                          supervision=supervision_of(args), run_root=args.run_root,
                          evaluation=args.evaluation, evaluation_seed=args.evaluation_seed)
    print(state.cluster_id, flush=True)
    if args.detach:
        return 0
    try:
        final = launcher.wait(state.cluster_id, on_output=lambda text: print(text, end="", flush=True))
    except KeyboardInterrupt:
        print(f"\ninterrupted: stopping cluster {state.cluster_id}", file=sys.stderr)
        launcher.stop(state.cluster_id)
        return int(ExitCode.STOPPED)
    return int(final.exit_code if final.exit_code is not None else ExitCode.INTERNAL_ERROR)


def supervision_of(args) -> Supervision:
    """The ``start`` flags' ``Supervision`` (the grace period has no flag: its default)."""
    return Supervision(max_restarts=args.max_restarts, restart_policy=args.restart_policy,
                       startup_deadline_s=args.startup_deadline, progress_timeout_s=args.progress_timeout)


def cmd_stop(args, conn) -> int:
    launcher = _launcher(conn)
    final = launcher.stop(args.cluster_id)
    print(f"{final.cluster_id} {final.status.value}")
    return 0


def cmd_attach(args, conn) -> int:
    launcher = _launcher(conn)
    state = launcher.status(args.cluster_id)
    try:
        for text in launcher.stream(args.cluster_id, from_start=args.from_start):
            print(text, end="", flush=True)
    except KeyboardInterrupt:
        return 0  # detaching leaves the cluster running
    state = launcher.status(args.cluster_id)
    return int(state.exit_code or 0)


def cmd_ps(args, conn) -> int:
    launcher = _launcher(conn)
    if args.cluster_id:
        return _ps_tasks(launcher, launcher.status(args.cluster_id))
    rows = []
    for s in launcher.store.list():
        alive = _observe(launcher, s)
        if not args.all and s.status.final:
            continue  # a lost cluster is listed: it has not ended as far as its state says
        running = sum(1 for t in s.tasks if t.live)
        rows.append((s.cluster_id, s.cache, s.mode, f"{running}/{len(s.tasks)}", _status(s, alive), str(s.restarts),
                     _age(s.age_s), _heartbeat(s)))
    _table(("CLUSTER ID", "CACHE", "MODE", "TASKS", "STATE", "RESTARTS", "AGE", "HEARTBEAT"), rows)
    return 0


def _ps_tasks(launcher, state) -> int:
    """One cluster: a header, then a row per task; the chief's row carries the last reported epoch."""
    alive = _observe(launcher, state)
    where = (f"pid {state.supervisor_pid} on {state.supervisor_host}, heartbeat {_heartbeat(state)}"
             if state.supervisor_pid else "not recorded")
    print(f"cluster {state.cluster_id}: {_status(state, alive)}, {state.mode} mode, cache {state.cache}, "
          f"restarts {state.restarts}, age {_age(state.age_s)}")
    if state.reason:
        print(f"reason: {state.reason}")
    print(f"run folder: {state.run_dir}")
    print(f"supervisor: {where}")
    if state.labels.get("dag_id"):
        print("started by: Airflow " + " / ".join(state.labels.get(k, "?") for k in ("dag_id", "run_id", "task_id")))
    last = state.last_epoch
    rows = []
    for t in state.tasks:
        is_chief = t.log == state.chief_log  # the chief alone reports epochs
        epoch = f"{last['epoch']}/{last.get('epochs', '?')}" if last and is_chief else "-"
        rows.append((t.role, str(t.index), t.host, str(t.pid or "-"), t.state, str(t.restarts), t.exit_text, epoch,
                     t.log))
    _table(("ROLE", "INDEX", "HOST", "PID", "STATE", "RESTARTS", "EXIT", "EPOCH", "LOG"), rows)
    return 0


def _observe(launcher, state) -> bool:
    """Whether the cluster runs; a cluster whose supervisor was lost shows its tasks as gone."""
    alive = launcher.is_alive(state)
    if not alive and not state.status.final:
        state.mark_lost()
    return alive


def _heartbeat(state) -> str:
    """How long ago the supervisor last recorded the state (``-`` once the cluster ended)."""
    return "-" if state.status.final else f"{_age(max(time.time() - state.heartbeat, 0))} ago"


def _status(state, alive: bool) -> str:
    return state.status.value if (alive or state.status.final) else "lost"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def cmd_tensorboard(args, conn) -> int:
    from ignite_tf.ui.tensorboard import logdirs, serve

    folders = [t for t in args.targets if "://" in t or Path(t).expanduser().is_dir()]
    store = None if len(folders) == len(args.targets) else _launcher(conn).store
    serve(logdirs(args.targets, store), port=args.port, host=args.host)
    return 0


def cmd_load(args, conn) -> int:
    from ignite_tf.etl.loader import COLUMN_TYPES, load, read_schema

    schema = read_schema(args.schema) if args.schema else {}
    declared = [name.lower() for name, _ in args.column]
    twice = sorted({n for n in declared if declared.count(n) > 1})
    if twice:
        raise IgniteTFError(f"--column declares {', '.join(map(repr, twice))} more than once: keep one")
    schema = {k.lower(): v for k, v in schema.items()} | {name.lower(): ctype for name, ctype in args.column}
    report = load(conn, args.cache, args.file, key=args.key, schema=schema or None)
    print(f"loaded {report.rows_written} rows into cache '{report.cache}' in {report.seconds:.1f}s; "
          f"{report.rows_in_cache} rows in the cache")
    print("columns: " + ", ".join(f"{c} {COLUMN_TYPES[t]}" + (" (key)" if c == report.key_column else "")
                                  for c, t in report.columns.items()))
    if report.columns_ignored:
        print(f"not loaded (not in the schema): {', '.join(report.columns_ignored)}")
    return 0


def _age(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


COMMANDS = {"start": cmd_start, "stop": cmd_stop, "attach": cmd_attach, "ps": cmd_ps, "load": cmd_load,
            "tensorboard": cmd_tensorboard}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    try:
        conn = connection(args.config)
        return COMMANDS[args.command](args, conn)
    except IgniteTFError as exc:
        print(f"ignite-tf {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


if __name__ == "__main__":
    sys.exit(main())
