"""The Kubernetes launcher's settings, manifests and memory estimate, without a cluster (pure functions), and
the settings' way from YAML and the CLI. The launcher itself runs on the local Kubernetes in
test_launcher.py (simulated nodes) and test_training.py (the real node)."""

from __future__ import annotations

import json

import pytest
import yaml

from ignite_tf.cluster.k8s import objects
from ignite_tf.cluster.k8s.settings import KubernetesSettings, Placement
from ignite_tf.cluster.spec import build_spec
from ignite_tf.errors import ConfigError
from tests.pipeline.test_factory import base_spec


def _spec(mode="async"):
    return build_spec(cluster_id="tf-x1", cache="c", mode=mode, workers=2, run_dir="/runs/tf-x1",
                      job={"entry_point": "ignite_tf.models:tabular_classifier",
                           "args": ["--batch-size", "32", "--model-arg", "hidden=64"]})


def test_settings_are_checked_with_the_field_named():
    assert KubernetesSettings.parse(None).placement is Placement.PREFERRED
    with pytest.raises(ConfigError, match="placement must be one of"):
        KubernetesSettings.parse({"placement": "nearby"})
    with pytest.raises(ConfigError, match="unknown setting.*'namespcae'"):
        KubernetesSettings.parse({"namespcae": "x"})
    with pytest.raises(ConfigError, match="dns: false needs host_network"):
        KubernetesSettings.parse({"dns": False})


def test_the_removed_warm_pool_is_refused_saying_why_but_an_old_clusters_zero_is_read():
    with pytest.raises(ConfigError, match=r"kubernetes.warm_pool was removed in 0.2.0: .*run code"):
        KubernetesSettings.parse({"namespace": "ml", "warm_pool": 300})
    # What a cluster started before the removal recorded (to_dict wrote warm_pool: 0): its supervisor reads it.
    assert KubernetesSettings.parse({"namespace": "ml", "warm_pool": 0}).namespace == "ml"
    assert "warm_pool" not in KubernetesSettings.parse({}).to_dict()


def test_the_yaml_schema_holds_every_kubernetes_setting_and_nothing_else():
    """``training.kubernetes`` of the pipeline schema against the settings' dataclass: a setting documented
    but missing from the schema could not be set from a spec (``warm_pool`` was), and a key in the schema that
    the dataclass lacks would be refused when the DAG runs."""
    from dataclasses import fields
    from importlib import resources

    schema = json.loads((resources.files("ignite_tf") / "resources" / "pipeline.schema.json").read_text())
    kubernetes = schema["properties"]["training"]["properties"]["kubernetes"]
    assert kubernetes["additionalProperties"] is False
    assert set(kubernetes["properties"]) == {f.name for f in fields(KubernetesSettings)}


def test_tf_config_uses_the_headless_service_dns_names_and_pods_are_owned():
    spec = objects.with_pod_addresses(_spec(), "ns1", KubernetesSettings())
    assert spec.cluster_dict()["worker"] == ["worker-0.tf-x1.ns1.svc:2222", "worker-1.tf-x1.ns1.svc:2222"]
    owner = {"metadata": {"name": "tf-x1", "uid": "u1"}}
    settings = KubernetesSettings(placement="required", labels={"team": "a"}, tolerations=[{"key": "k"}],
                                  resources={"requests": {"cpu": "1"}})
    pod = objects.pod_manifest(spec, spec.tasks[1], 3, namespace="ns1", settings=settings, image="img:1",
                               owner=owner, argv=["python", "x.py"], cwd="/runs/tf-x1/job", env={"A": "1"},
                               node="node-7", memory="900Mi")
    assert pod["metadata"]["name"] == "tf-x1-worker-0-3" and pod["metadata"]["labels"]["team"] == "a"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert pod["spec"]["restartPolicy"] == "Never" and pod["spec"]["subdomain"] == "tf-x1"
    c = pod["spec"]["containers"][0]
    assert c["resources"] == {"requests": {"cpu": "1", "memory": "900Mi"}, "limits": {"memory": "900Mi"}}
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["node-7"]
    assert {"name": "run", "mountPath": "/runs/tf-x1"} in c["volumeMounts"]
    svc = objects.service_manifest(spec, settings, owner)
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["ports"] == [
        {"name": "tf-2222", "port": 2222, "targetPort": 2222}]


def test_task_pods_get_a_cpu_request_unless_the_user_sets_cpu():
    # Without a CPU request a pod gets the minimum CPU weight and yields to everything else on a busy node.
    assert objects.resources(KubernetesSettings(), "900Mi") == {
        "requests": {"cpu": objects.CPU_REQUEST, "memory": "900Mi"}, "limits": {"memory": "900Mi"}}
    limited = objects.resources(KubernetesSettings(resources={"limits": {"cpu": "2"}}), "900Mi")
    assert limited == {"requests": {"memory": "900Mi"}, "limits": {"cpu": "2", "memory": "900Mi"}}
    asked = objects.resources(KubernetesSettings(resources={"requests": {"cpu": "3"}}), "900Mi")
    assert asked["requests"]["cpu"] == "3"


def test_task_pods_get_no_api_token_unless_given_a_service_account():
    # A task never calls the Kubernetes API: without a service account of the user's, the kubelet neither
    # requests a token for the namespace's default account nor mounts one (a round trip at every pod start).
    spec = objects.with_pod_addresses(_spec(), "ns1", KubernetesSettings())
    owner = {"metadata": {"name": "tf-x1", "uid": "u1"}}

    def pod(settings):
        return objects.pod_manifest(spec, spec.tasks[1], 0, namespace="ns1", settings=settings, image="img:1",
                                    owner=owner, argv=["python", "x.py"], cwd="/runs/tf-x1/job", env={},
                                    node=None, memory="900Mi")["spec"]

    plain = pod(KubernetesSettings())
    assert plain["automountServiceAccountToken"] is False and "serviceAccountName" not in plain
    # The user's account (workload identity for a bucket, their own API calls) gets its token as usual.
    own = pod(KubernetesSettings(service_account="team-trainer"))
    assert own["serviceAccountName"] == "team-trainer" and "automountServiceAccountToken" not in own


def test_yaml_launcher_kubernetes_reaches_the_train_task(tmp_path):
    from ignite_tf.pipeline.factory import build_dag, render
    from ignite_tf.pipeline.spec import SpecError, parse_spec

    spec = base_spec(tmp_path)
    spec["training"].update(launcher="kubernetes", kubernetes={"namespace": "training", "placement": "required"})
    path = tmp_path / "k8s.yaml"
    path.write_text(yaml.safe_dump(spec))
    train = build_dag(render(parse_spec(path))[0]).get_task("train")
    assert train.launcher == "kubernetes" and train.kubernetes["placement"] == "required"
    spec["training"]["kubernetes"]["placement"] = "nearby"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError, match="training.kubernetes.placement"):
        parse_spec(path)
    spec["training"].update(launcher="local", kubernetes={"namespace": "x"})
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError, match="launcher: kubernetes"):
        parse_spec(path)


def test_cli_kubernetes_settings(capsys):
    from ignite_tf.cli import _k8s_settings, build_parser, main

    args = build_parser().parse_args(["start", "--launcher", "kubernetes", "--k8s", json.dumps({"image": "a"}),
                                      "--namespace", "ns", "--placement", "none", "c", ".", "python"])
    assert _k8s_settings(args) == {"image": "a", "namespace": "ns", "placement": "none"}
    assert main(["start", "--namespace", "ns", "c", ".", "python"]) == 1
    assert "--launcher kubernetes" in capsys.readouterr().err
