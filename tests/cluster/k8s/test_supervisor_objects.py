"""The pod supervisor's objects without a cluster (pure functions): its identity (pinned against
docker/k8s/supervisor-rbac.yaml), its Deployment (owned by the root, secrets by reference only), the bounded
lifetime's settings. On the local Kubernetes: tests/cluster/k8s/test_supervisor_pod.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ignite_tf.cluster.k8s import deploy, objects, supervisor
from ignite_tf.cluster.k8s.settings import KubernetesSettings, SupervisorMode
from ignite_tf.cluster.spec import build_spec
from ignite_tf.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]


def _spec(run_dir="/runs/tf-x1", run_store=None):
    spec = build_spec(cluster_id="tf-x1", cache="c", mode="sync", workers=2, run_dir=run_dir,
                      job={"entry_point": "ignite_tf.models:tabular_classifier", "args": []})
    spec.run_store = run_store
    return spec


def test_the_rbac_file_is_what_the_launcher_creates():
    in_file = list(yaml.safe_load_all((ROOT / deploy.RBAC_FILE).read_text()))
    made = deploy.rbac_manifests("training")
    assert [m["kind"] for m in made] == ["ServiceAccount", "Role", "RoleBinding"]  # nothing cluster-wide
    # The file's subject takes the binding's namespace (`kubectl apply -n NS`); the launcher names it.
    assert made[2]["subjects"][0].pop("namespace") == "training"
    assert in_file == made
    role = next(m for m in made if m["kind"] == "Role")
    assert {g for rule in role["rules"] for g in rule["apiGroups"]} == {""}  # the core group only
    granted: dict[str, set[str]] = {}
    for rule in role["rules"]:
        for resource in rule["resources"]:
            granted.setdefault(resource, set()).update(rule["verbs"])
    # The whole table: a right added or dropped is a change to review. No verb on Secrets at all (`list`
    # returns every Secret's data, `get` would too): the pods take the cluster's by reference.
    assert granted == {
        "pods": {"create", "get", "list", "watch", "delete", "patch"},
        "pods/log": {"get"},
        "services": {"create", "get", "list", "delete"},
        "configmaps": {"create", "get", "list", "delete"},
    }


def test_the_supervisor_deployment_is_owned_by_the_root_and_takes_secrets_by_reference():
    spec = _spec(run_store="s3://b/runs/tf-x1")
    settings = KubernetesSettings(labels={"team": "a"}, node_selector={"k": "v"})
    owner = {"metadata": {"name": "tf-x1", "uid": "u1"}}
    dep = deploy.deployment_manifest(spec, settings, "localhost/task:1", owner)
    assert dep["metadata"]["ownerReferences"] == [objects.owner_ref(owner)]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    pod = dep["spec"]["template"]
    assert pod["metadata"]["labels"][objects.LABEL_SUPERVISOR_OF] == "tf-x1"
    assert objects.LABEL_CLUSTER not in pod["metadata"]["labels"]  # not selected as a task (Service, backend)
    assert pod["metadata"]["labels"]["team"] == "a"
    ps = pod["spec"]
    assert ps["serviceAccountName"] == deploy.SERVICE_ACCOUNT and ps["restartPolicy"] == "Always"
    assert "nodeSelector" not in ps  # the tasks' placement is not the supervisor's
    (c,) = ps["containers"]
    assert c["imagePullPolicy"] == "Never" and c["command"][:3] == ["python", "-m", supervisor.MODULE]
    assert c["envFrom"] == [{"secretRef": {"name": objects.secret_name("tf-x1")}}]
    assert all("value" not in e or e["name"] == "PYTHONUNBUFFERED" for e in c["env"])
    assert {"name": "cluster", "configMap": {"name": "tf-x1"}} in ps["volumes"]
    assert not [v for v in ps["volumes"] if "hostPath" in v]  # a run store: no volume
    local = deploy.deployment_manifest(_spec(), settings, "reg/task:1", owner)["spec"]["template"]["spec"]
    assert {"name": "run", "hostPath": {"path": "/runs/tf-x1", "type": "DirectoryOrCreate"}} in local["volumes"]
    assert "hostNetwork" not in local
    # On the host network the tasks reach Ignite (the state store) at host addresses: so must the supervisor.
    host = KubernetesSettings(host_network=True, dns=False)
    on_host = deploy.deployment_manifest(_spec(), host, "reg/task:1", owner)["spec"]["template"]["spec"]
    assert on_host["hostNetwork"] is True and on_host["dnsPolicy"] == "ClusterFirstWithHostNet"


def test_the_root_holds_what_the_supervisor_pod_needs():
    spec = _spec()
    root = objects.owner_manifest(spec, KubernetesSettings(), {"namespace": "ns", "image": "i", "settings": {}})
    assert json.loads(root["data"][objects.SPEC_KEY])["cluster_id"] == "tf-x1"
    assert json.loads(root["data"][objects.SETTINGS_KEY])["namespace"] == "ns"


def test_supervisor_and_max_runtime_settings_are_checked():
    assert KubernetesSettings.parse(None).supervisor is SupervisorMode.POD
    assert KubernetesSettings.parse({"supervisor": "process", "max_runtime": 60}).to_dict()["supervisor"] == "process"
    with pytest.raises(ConfigError, match="supervisor must be one of"):
        KubernetesSettings.parse({"supervisor": "job"})
    for bad in (0, -5, "1h", True):
        with pytest.raises(ConfigError, match="max_runtime"):
            KubernetesSettings.parse({"max_runtime": bad})
