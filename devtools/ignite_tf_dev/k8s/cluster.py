"""A real Kubernetes on this machine for development and tests (``make k8s-up``, the test fixtures).

Kubernetes itself (kube-apiserver, kube-scheduler, kube-controller-manager, kubelet, kube-proxy), kubectl and
kwok are built once from the Go module proxy (``k8s/build.sh``) into a cache folder outside the repository
named by version (``k8s-<version>`` in the ignite-tf home, :class:`ignite_tf.home.HomeFolder`); etcd,
containerd, runc and the CNI plugins come from Debian's packages. ``up`` starts etcd, the control plane,
N simulated nodes (kwok) and one real node (kubelet + containerd + kube-proxy), then the add-ons of a
deployment (:mod:`ignite_tf_dev.k8s.addons`: cluster DNS, the object store and, when asked, Ignite pods) and
returns when every node is Ready; ``down`` stops every process by pid, removes the containers and restores
what the start changed on the host (:mod:`ignite_tf_dev.k8s.host`). Images come from
:mod:`ignite_tf_dev.k8s.images`.

Pods go to the real node unless they tolerate the simulated nodes' taint (:data:`SIMULATED_NODE_TAINT`), so
a pod spec written for a real cluster runs for real here; tests that want kwok's pods say so.

    python -m ignite_tf_dev.k8s build        # binaries, kwok, CoreDNS and the images (once)
    python -m ignite_tf_dev.k8s up -n 3      # ends with the export lines (KUBECONFIG, IGNITE_TF_ADDRESSES, ...)
    python -m ignite_tf_dev.k8s status
    python -m ignite_tf_dev.k8s down
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from string import Template

import yaml

from ignite_tf.cluster.procs import kill_and_wait, pid_alive
from ignite_tf.errors import ConfigError, IgniteTFError
from ignite_tf.ports import port_free
from ignite_tf_dev.k8s import addons, host
from ignite_tf_dev.k8s.layout import CONF_DIR, COREDNS_VERSION, K8S_VERSION, KWOK_VERSION, Layout

APISERVER_PORT = 6443
ETCD_PORTS = (2379, 2380, 2381)
POD_CIDR = "10.244.0.0/24"
SERVICE_CIDR = "10.96.0.0/16"
BRIDGE = "ignite-tf0"
# Node labels and the simulated nodes' taint: tests and the launcher place pods with these.
NODE_KIND_LABEL = "ignite-tf.io/node-kind"  # "simulated" or "real"
HOST_LABEL = "ignite-tf.io/host"  # sim-0, sim-1, ... and real-0
# On every kwok node (NoSchedule): only pods that tolerate it are "run" by kwok; all others run for real.
SIMULATED_NODE_TAINT = "ignite-tf.io/simulated"
SIMULATED_TOLERATION = {"key": SIMULATED_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}
# Annotations read by the simulated nodes' stage k8s/kwok/pod-exit.yaml.
EXIT_CODE_ANNOTATION = "ignite-tf.io/exit-code"
RUN_FOR_ANNOTATION = "ignite-tf.io/run-for"
# Start order; down stops them in reverse (containerd after the containers are removed).
COMPONENTS = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "containerd", "kubelet",
              "kube-proxy", "kwok")
STAGE_DELAY_MS = 200  # kwok's stock stages wait 1 s + up to 5 s jitter per step: too slow for tests


def node_ip() -> str:
    """The host's first IPv4 address: the real node's InternalIP (the apiserver reaches the kubelet there)."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    ips = [a for a in out if "." in a]
    if not ips:
        raise IgniteTFError("`hostname -I` shows no IPv4 address for the real node")
    return ips[0]


def node_name() -> str:
    return os.uname().nodename.lower()


# -- build ---------------------------------------------------------------------------------------------
def go_binary() -> str:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        raise IgniteTFError("Go is needed to build Kubernetes and kwok: install Go >= 1.23 "
                            "(https://go.dev/dl) and put `go` on PATH")
    return go


def build(layout: Layout | None = None, jobs: int = 2) -> None:
    """Build the binaries once (about 20 min on a cold Go cache with 2 cores; nothing when done)."""
    layout = layout or Layout()
    if not layout.built():
        layout.home.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "GO": go_binary(), "K8S_BUILD_JOBS": str(jobs)}
        log = layout.home / "build.log"
        print(f"building Kubernetes {K8S_VERSION} and kwok {KWOK_VERSION} into {layout.bin} "
              f"(log {log}; a cold Go cache takes about 20 minutes)", flush=True)
        with open(log, "ab") as out:
            proc = subprocess.run([str(CONF_DIR / "build.sh"), str(layout.home), K8S_VERSION, KWOK_VERSION,
                                   COREDNS_VERSION],
                                  stdout=out, stderr=subprocess.STDOUT, env=env)
        if proc.returncode != 0:
            raise IgniteTFError(f"building Kubernetes failed (exit {proc.returncode}); log {log}:\n"
                                f"{host.tail(log)}")
    from ignite_tf_dev.k8s import images

    images.ensure_image_files(layout)


# -- start ---------------------------------------------------------------------------------------------
def _render(template: str, dest: Path, **values) -> Path:
    text = Template((CONF_DIR / template).read_text()).substitute(values)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text)
    return dest


def _spawn(layout: Layout, name: str, cmd: list[str]) -> int:
    layout.logs.mkdir(parents=True, exist_ok=True)
    layout.pids.mkdir(parents=True, exist_ok=True)
    with open(layout.logs / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(["nice", "-n", "10", *cmd], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, cwd=layout.run)
    (layout.pids / f"{name}.pid").write_text(str(proc.pid))
    return proc.pid


def _wait(layout: Layout, name: str, check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    last = "none"
    while True:
        try:
            if check():
                return
        except Exception as e:  # noqa: BLE001 - not up yet; the last error is reported if it never is
            last = f"{type(e).__name__}: {str(e)[:500]}"
        pid = layout.pid_of(name)
        if pid and not pid_alive(pid):
            raise IgniteTFError(f"{name} exited during start-up; log {layout.logs / name}.log:\n"
                                f"{host.tail(layout.logs / f'{name}.log')}")
        if time.monotonic() > deadline:
            raise IgniteTFError(f"{what} not reached in {timeout:.0f}s (last error: {last}); "
                                f"log {layout.logs / name}.log:\n{host.tail(layout.logs / f'{name}.log')}")
        time.sleep(0.2)


def _https_ok(layout: Layout, path: str) -> bool:
    ctx = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
    ctx.load_cert_chain(str(layout.pki / "admin.crt"), str(layout.pki / "admin.key"))
    with urllib.request.urlopen(f"https://127.0.0.1:{APISERVER_PORT}{path}", context=ctx, timeout=3) as r:
        return r.status == 200


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=3) as r:
        return r.status == 200


def api_client(layout: Layout | None = None):
    """A ``kubernetes`` ApiClient for the local cluster's admin user."""
    from kubernetes import config

    return config.new_client_from_config(config_file=str((layout or Layout()).kubeconfig))


def _kwok_config(layout: Layout) -> Path:
    """kwok's options, its stock stages (with short delays) and the exit-code stage, in one file."""
    docs = [Template((CONF_DIR / "kwok" / "kwok.yaml").read_text()).substitute(pki=layout.pki, run=layout.run)]
    for path in sorted((layout.home / "kwok-stages").glob("*.yaml")):
        stage = yaml.safe_load(path.read_text())
        delay = stage["spec"].get("delay", {})
        if "durationMilliseconds" in delay:
            delay["durationMilliseconds"] = STAGE_DELAY_MS
        delay.pop("jitterDurationMilliseconds", None)
        if stage["metadata"]["name"] == "pod-complete":  # Job pods; ours with an exit code use pod-exit
            stage["spec"]["selector"]["matchExpressions"].append(
                {"key": f'.metadata.annotations["{EXIT_CODE_ANNOTATION}"]', "operator": "DoesNotExist"})
        docs.append(yaml.safe_dump(stage, sort_keys=False))
    docs.append((CONF_DIR / "kwok" / "pod-exit.yaml").read_text())
    (layout.run / "kwok-container.log").write_text(
        time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime()) + " stdout F simulated by kwok\n")
    dest = layout.run / "kwok.yaml"
    dest.write_text("\n---\n".join(docs))
    return dest


def _start_control_plane(layout: Layout, ip: str) -> None:
    p, b = layout.pki, layout.bin
    _spawn(layout, "etcd", [
        "etcd", "--name", "ignite-tf", "--data-dir", str(layout.run / "etcd"),
        "--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
        "--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
        "--initial-cluster", "ignite-tf=http://127.0.0.1:2380", "--listen-metrics-urls", "http://127.0.0.1:2381",
        "--experimental-watch-progress-notify-interval=5s"])
    _wait(layout, "etcd", lambda: _http_ok("http://127.0.0.1:2379/health"), 60, "etcd health")
    _spawn(layout, "kube-apiserver", [
        str(b / "kube-apiserver"), "--etcd-servers=http://127.0.0.1:2379", "--bind-address=0.0.0.0",
        f"--secure-port={APISERVER_PORT}", f"--advertise-address={ip}",
        f"--tls-cert-file={p}/apiserver.crt", f"--tls-private-key-file={p}/apiserver.key",
        f"--client-ca-file={p}/ca.crt", f"--service-account-key-file={p}/sa.pub",
        f"--service-account-signing-key-file={p}/sa.key",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-cluster-ip-range={SERVICE_CIDR}", "--authorization-mode=Node,RBAC", "--allow-privileged=true",
        f"--kubelet-client-certificate={p}/apiserver-kubelet-client.crt",
        f"--kubelet-client-key={p}/apiserver-kubelet-client.key",
        # else `kubectl logs` on the real node dials the node name, which resolves to 127.0.0.1
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        "--enable-priority-and-fairness=false", "--profiling=false"])
    _wait(layout, "kube-apiserver", lambda: _https_ok(layout, "/readyz"), 180, "apiserver /readyz")
    for name, kubeconfig, extra in (
        ("kube-scheduler", "scheduler", []),
        ("kube-controller-manager", "controller-manager", [
            "--use-service-account-credentials=true", f"--service-account-private-key-file={p}/sa.key",
            f"--root-ca-file={p}/ca.crt", f"--cluster-signing-cert-file={p}/ca.crt",
            f"--cluster-signing-key-file={p}/ca.key", "--controllers=*"]),
    ):
        kc = f"{p}/{kubeconfig}.kubeconfig"
        _spawn(layout, name, [str(b / name), f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
                              f"--authorization-kubeconfig={kc}", "--bind-address=127.0.0.1",
                              "--leader-elect=false", *extra])


def _start_real_node(layout: Layout, ip: str) -> None:
    from ignite_tf_dev.k8s import images

    run, p = layout.run, layout.pki
    cfg = _render("containerd.toml", run / "containerd.toml", home=layout.home, run=run,
                  pause_image=images.pause_image_ref())
    _render("cni.conflist", run / "cni-conf" / "10-ignite-tf.conflist", bridge=BRIDGE, pod_cidr=POD_CIDR, run=run)
    _spawn(layout, "containerd", ["containerd", "--config", str(cfg)])
    _wait(layout, "containerd", lambda: host.ctr(layout.containerd_sock, "version").returncode == 0, 60,
          "containerd socket")
    images.import_images(layout)
    kubelet_cfg = _render("kubelet.yaml", run / "kubelet.yaml", node_ip=ip, pki=p, run=run,
                          dns_ip=addons.CLUSTER_DNS_IP, domain=addons.CLUSTER_DOMAIN)
    _spawn(layout, "kubelet", [
        str(layout.bin / "kubelet"), f"--config={kubelet_cfg}", f"--kubeconfig={p}/kubelet.kubeconfig",
        f"--root-dir={run}/kubelet", f"--cert-dir={run}/kubelet/pki", f"--hostname-override={node_name()}",
        f"--node-ip={ip}", f"--node-labels={NODE_KIND_LABEL}=real,{HOST_LABEL}=real-0", "--v=1"])
    _spawn(layout, "kube-proxy", [
        str(layout.bin / "kube-proxy"), f"--kubeconfig={p}/kube-proxy.kubeconfig",
        f"--hostname-override={node_name()}", "--proxy-mode=iptables", "--iptables-localhost-nodeports=false",
        f"--cluster-cidr={POD_CIDR}", "--metrics-bind-address=127.0.0.1:10249",
        "--healthz-bind-address=127.0.0.1:10256", "--conntrack-max-per-core=0",
        # 0: leave the host's conntrack timeouts alone
        "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0"])
    _wait(layout, "kube-proxy", lambda: _http_ok("http://127.0.0.1:10256/healthz"), 60, "kube-proxy health")


def _start_simulated_nodes(layout: Layout, n: int) -> None:
    from kubernetes import client

    _spawn(layout, "kwok", [str(layout.bin / "kwok"), f"--kubeconfig={layout.pki}/kwok.kubeconfig",
                            f"--config={_kwok_config(layout)}"])
    core = client.CoreV1Api(api_client(layout))

    def create(name: str) -> bool:
        try:
            core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": name, "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {NODE_KIND_LABEL: "simulated", HOST_LABEL: name, "kubernetes.io/hostname": name,
                           "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok"}},
                "spec": {"taints": [{"key": SIMULATED_NODE_TAINT, "value": "true", "effect": "NoSchedule"}]}})
        except client.ApiException as e:
            if e.status != 409:  # an earlier try that timed out on the client may have created it
                raise
        return True

    for i in range(n):
        # retried: a CI run once had this create answered with an error right after /readyz
        _wait(layout, "kube-apiserver", lambda name=f"sim-{i}": create(name), 60, f"simulated node sim-{i} created")


def _ready_nodes(layout: Layout) -> list[str]:
    from kubernetes import client

    nodes = client.CoreV1Api(api_client(layout)).list_node().items
    return [x.metadata.name for x in nodes
            if any(c.type == "Ready" and c.status == "True" for c in (x.status.conditions or []))]


def running(layout: Layout | None = None) -> dict[str, int]:
    """Live components and their pids."""
    layout = layout or Layout()
    return {n: layout.pid_of(n) for n in COMPONENTS if layout.pid_of(n) and pid_alive(layout.pid_of(n))}


def up(n: int = 3, layout: Layout | None = None, timeout: float = 300, ignite: bool = False) -> Path:
    """Start the cluster (building first if needed) and return the admin kubeconfig once every node is Ready,
    cluster DNS answers and the object store listens; ``ignite``: also Ignite's pods (about 30 s more).

    A cluster already fully up is left as it is (a missing add-on is added); what any other start left is
    stopped and the host restored first.
    """
    if n < 0:
        raise ConfigError(f"the number of simulated nodes must be 0 or more (got {n})")
    layout = layout or Layout()
    if os.geteuid() != 0:
        raise IgniteTFError("a local Kubernetes needs root (its real node runs containerd, runc, iptables "
                            "and sysctls): run `make k8s-up` / the k8s tests as root")
    live = running(layout)
    if len(live) == len(COMPONENTS):
        want = n + 1
        if len(_ready_nodes(layout)) >= want:
            _start_addons(layout, node_ip(), ignite)
            return layout.kubeconfig
    down(layout)  # what an earlier start left: half-started, or killed before its down (the host's settings)
    host.ensure_packages()
    build(layout)
    busy = [p for p in (APISERVER_PORT, *ETCD_PORTS, 10250, 10247, 10256) if not port_free(p)]
    if busy:
        raise IgniteTFError(f"ports {busy} are in use on this host: another Kubernetes is running here "
                            f"(stop it, or `make k8s-down`)")
    ip = node_ip()
    pki = subprocess.run([str(CONF_DIR / "pki.sh"), str(layout.pki), node_name(), ip,
                          f"https://127.0.0.1:{APISERVER_PORT}"], capture_output=True, text=True)
    if pki.returncode != 0:
        raise IgniteTFError(f"making the cluster's certificates failed:\n{pki.stderr[-2000:]}")
    layout.run.mkdir(parents=True, exist_ok=True)
    host.save_host_state(layout.host_state)
    try:
        _start_control_plane(layout, ip)
        _start_real_node(layout, ip)
        _start_simulated_nodes(layout, n)
        from kubernetes import client

        core = client.CoreV1Api(api_client(layout))
        _wait(layout, "kube-controller-manager", lambda: core.read_namespaced_service_account("default", "default"),
              120, "the default service account (controller-manager)")
        _wait(layout, "kubelet", lambda: len(_ready_nodes(layout)) >= n + 1, timeout, f"{n + 1} Ready nodes")
        _start_addons(layout, ip, ignite)
    except BaseException:
        down(layout)
        raise
    return layout.kubeconfig


def _start_addons(layout: Layout, ip: str, ignite: bool) -> None:
    """Idempotent: each add-on already there is left as it is."""
    addons.start_object_store(layout, ip)
    addons.start_dns(layout)
    if ignite:
        addons.deploy_ignite(layout)


# -- stop ----------------------------------------------------------------------------------------------
def _stop(layout: Layout, name: str, wait: float = 20) -> int:
    pid = layout.pid_of(name)
    if pid and pid_alive(pid):
        kill_and_wait(pid, signal.SIGTERM, wait)
    (layout.pids / f"{name}.pid").unlink(missing_ok=True)
    return pid if pid else 0


def down(layout: Layout | None = None) -> list[str]:
    """Stop everything by pid, remove containers, restore host settings, wipe the run folder. Idempotent."""
    layout = layout or Layout()
    stopped = []
    for name in ("kube-proxy", "kubelet", "kwok", "kube-controller-manager", "kube-scheduler", "kube-apiserver",
                 "etcd"):
        if _stop(layout, name):
            stopped.append(name)
    if "kube-proxy" in stopped:
        subprocess.run([str(layout.bin / "kube-proxy"), "--cleanup"], capture_output=True)
    host.remove_containers(layout.containerd_sock, layout.pid_of("containerd"))
    if _stop(layout, "containerd"):
        stopped.append("containerd")
    host.kill_shims(layout.containerd_sock)
    if addons.stop_object_store(layout):
        stopped.append("object store")
    # What a killed run left without a pid file (a session SIGKILLed mid-`up`): any process naming this folder.
    stray = [pid for pid, cmd in host.leftover_processes(layout.home) if str(layout.home) in cmd]
    for pid in stray:
        kill_and_wait(pid, wait=10)
    if stray:
        stopped.append(f"{len(stray)} stray process(es)")
    # The bridge only if this folder's real node made it: a `down` of another folder (a test's) must not cut
    # off a running cluster's pods.
    host.restore_host(layout.host_state, layout.home, BRIDGE if (layout.run / "cni-conf").exists() else None)
    shutil.rmtree(layout.run, ignore_errors=True)
    return stopped


def status(layout: Layout | None = None) -> dict:
    layout = layout or Layout()
    live = running(layout)
    out = {"home": str(layout.home), "built": layout.built(), "components": live,
           "kubeconfig": str(layout.kubeconfig), "nodes": []}
    if "kube-apiserver" in live:
        try:
            out["nodes"] = _ready_nodes(layout)
        except Exception as exc:  # noqa: BLE001 - report, do not fail status
            out["nodes_error"] = str(exc)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ignite_tf_dev.k8s",
                                     description="A local Kubernetes: control plane, kwok nodes, one real node.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help=f"build Kubernetes {K8S_VERSION}, kwok and the images (once)")
    p_up = sub.add_parser("up", help="start everything; returns when every node is Ready")
    p_up.add_argument("-n", "--nodes", type=int, default=3, help="simulated (kwok) nodes (default 3)")
    p_up.add_argument("--no-ignite", dest="ignite", action="store_false",
                      help=f"do not start Ignite's pods (namespace {addons.IGNITE_NAMESPACE})")
    sub.add_parser("down", help="stop everything and restore the host's settings")
    p_image = sub.add_parser("image", help="write the task image as a docker-archive file (docker load / skopeo)")
    p_image.add_argument("--out", default="dist/ignite-tf-task.tar", help="the archive's path")
    p_image.add_argument("--tag", help="its name inside (default ignite-tf-task:<lock and provider digest>)")
    sub.add_parser("status", help="what runs, and the Ready nodes")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            host.ensure_packages()
            build()
        elif args.command == "up":
            started = time.monotonic()
            up(args.nodes, ignite=args.ignite)
            print(f"Kubernetes {K8S_VERSION}: {args.nodes} simulated node(s) + 1 real node Ready, cluster DNS, "
                  f"object store{', Ignite pods' if args.ignite else ''} "
                  f"({time.monotonic() - started:.1f}s); logs in {Layout().logs}")
            for key, value in addons.exports(Layout()).items():
                print(f"export {key}={value}")
        elif args.command == "image":
            from ignite_tf_dev.k8s import images

            host.ensure_packages()
            out = images.write_image_archive(Path(args.out), args.tag)
            print(f"wrote {out} ({out.stat().st_size / 2**30:.1f} GiB): docker load -i {out}, or "
                  f"skopeo copy docker-archive:{out} docker://REGISTRY/ignite-tf-task:TAG")
        elif args.command == "down":
            started = time.monotonic()
            stopped = down()
            print(f"stopped {', '.join(stopped) or 'nothing (nothing was running)'}; host settings restored "
                  f"({time.monotonic() - started:.1f}s)")
        else:
            print(json.dumps(status(), indent=2))
    except IgniteTFError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0

