"""The pipeline schema (``resources/pipeline.schema.json``) and the dataclasses its sections become hold the same
settings: a field documented on a dataclass but missing from the schema (``kubernetes.warm_pool`` once was) or
a schema key no dataclass reads fails here. A field kept out of YAML on purpose is named below with why."""

from __future__ import annotations

from dataclasses import fields

from ignite_tf.cluster.job import TrainingJob
from ignite_tf.cluster.k8s.settings import REMOVED, KubernetesSettings
from ignite_tf.cluster.supervision.settings import Supervision
from ignite_tf.pipeline.schema import schema
from ignite_tf.pipeline.spec import SUPERVISION_KEYS, TrainingConfig
from ignite_tf.pipeline.task_policy import TASK_POLICY_KEYS, TaskPolicy

# Fields of the YAML-facing dataclasses that no spec key sets, each with the reason.
NOT_IN_YAML = {
    TrainingJob: {
        "serve_command": "an async command's own server program: Python API only; a spec's servers run the "
                         "runtime's TF server",
        "steps_per_epoch": "a runtime flag a spec does not offer: an epoch is the largest shard over the batch",
        "features": "a runtime flag a spec does not offer: the model reads every numeric column but the label",
        "shuffle_buffer": "a runtime flag a spec does not offer: its default",
        "checkpoint_every_steps": "a runtime flag a spec does not offer: a backup at each epoch's end",
        "extra_args": "the operator's extra_args (Python only): a spec's settings each have their own key",
    },
    Supervision: {"grace_period_s": "a spec keeps its default (spec.SUPERVISION_KEYS)",
                  "outage_budget_s": "a spec keeps its default (spec.SUPERVISION_KEYS)"},
    TrainingConfig: {"supervision": "its fields are keys of the training section itself (SUPERVISION_KEYS)",
                     "job": "made from the other fields (TrainingConfig.job), not a key"},
}


def training_keys() -> set[str]:
    return set(schema()["properties"]["training"]["properties"])


def names(cls) -> set[str]:
    return {f.name for f in fields(cls)} - set(NOT_IN_YAML.get(cls, {}))


def test_every_training_key_is_a_field_and_every_field_a_key():
    """The training section is ``TrainingConfig`` with its ``Supervision`` flat and the stage's ``TaskPolicy``."""
    assert set(TASK_POLICY_KEYS) == {f.name for f in fields(TaskPolicy)}
    assert set(SUPERVISION_KEYS) == names(Supervision)
    assert training_keys() == names(TrainingConfig) | set(SUPERVISION_KEYS) | set(TASK_POLICY_KEYS)


def test_every_training_job_field_is_a_training_key_or_excluded_with_a_reason():
    missing = names(TrainingJob) - training_keys()
    assert not missing, f"TrainingJob fields missing from the schema's training section: {sorted(missing)}"
    assert set(NOT_IN_YAML[TrainingJob]) <= {f.name for f in fields(TrainingJob)}  # no stale exclusion
    excluded_but_there = set(NOT_IN_YAML[TrainingJob]) & training_keys()
    assert not excluded_but_there, f"in the schema now: drop them from NOT_IN_YAML: {sorted(excluded_but_there)}"
    # What the training section holds beyond the job is the launch's, not the job's.
    assert names(TrainingConfig) - names(TrainingJob) == {"launcher", "env", "kubernetes", "deferrable",
                                                          "on_data_change"}


def test_kubernetes_settings_are_the_kubernetes_keys():
    keys = set(schema()["properties"]["training"]["properties"]["kubernetes"]["properties"])
    assert keys == names(KubernetesSettings), (sorted(keys ^ names(KubernetesSettings)))
    assert not set(REMOVED) & keys  # a removed setting is refused, not documented


def test_every_exclusion_names_a_field_and_a_reason():
    for cls, excluded in NOT_IN_YAML.items():
        for name, why in excluded.items():
            assert name in {f.name for f in fields(cls)}, (cls.__name__, name)
            assert len(why) > 20, (cls.__name__, name)
