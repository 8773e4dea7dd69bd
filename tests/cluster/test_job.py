"""``TrainingJob``: one value from every edge to the launch; rendered to the runtime's flags and read back in one
place; a bad setting names its field. Plain Python: no cluster, no TensorFlow."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ignite_tf.cluster.job import RUNTIME_FLAGS, JobError, TrainingJob
from ignite_tf.contract import Mode
from ignite_tf.errors import ConfigError

ENTRY = "ignite_tf.models:tabular_classifier"
FULL = TrainingJob(entry_point=ENTRY, py_modules=("shared",), mode="async", workers=3, ps=2, epochs=4,
                   batch_size=16, steps_per_epoch=7, learning_rate=0.01, label_column="y", features=("a", "b"),
                   shuffle_buffer=100, checkpoint_every_steps=5, model_args={"hidden": 8, "name": "x"},
                   extra_args=("--serve",))


def test_a_job_renders_to_the_runtimes_flags_and_reads_back_equal():
    job = FULL
    assert job.mode is Mode.ASYNC and job.model_args == {"hidden": 8, "name": "x"}
    wire = job.to_job()
    assert wire["entry_point"] == ENTRY and wire["py_modules"] == ["shared"]
    assert wire["args"][:6] == ["--epochs", "4", "--batch-size", "16", "--label-column", "y"]
    assert ["--model-arg", 'name="x"'] == wire["args"][-3:-1] and wire["args"][-1] == "--serve"
    # mode, workers and ps travel in the cluster's spec, not in the job dict: given beside it.
    assert TrainingJob.from_job(wire, mode="async", workers=3, ps=2) == job
    assert TrainingJob.from_dict(json.loads(json.dumps(job.to_dict()))) == job
    assert TrainingJob.parse(job.to_dict()) == TrainingJob.parse(job) == job
    # The runtime's own parser reads the rendered flags as the job holds them.
    from ignite_tf.runtime.train import build_parser

    parsed = build_parser().parse_args(wire["args"])
    assert (parsed.epochs, parsed.batch_size, parsed.label_column, parsed.features, parsed.steps_per_epoch,
            parsed.shuffle_buffer, dict(parsed.model_arg), parsed.serve) == (
        4, 16, "y", "a,b", 7, 100, {"hidden": 8, "name": "x"}, True)


def test_an_old_job_dict_and_templated_strings_become_typed_fields():
    old = {"entry_point": ENTRY, "args": ["--epochs", "20", "--batch-size=64", "--label", "z", "--model-arg",
                                          "hidden=3", "--steps-per-epoch", "5", "--unknown", "1"]}
    job = TrainingJob.from_job(old)
    assert (job.epochs, job.batch_size, job.label_column, job.model_args, job.steps_per_epoch, job.extra_args) == (
        20, 64, "z", {"hidden": 3}, 5, ("--unknown", "1"))
    assert TrainingJob.from_job(job.to_job()) == job
    assert TrainingJob.from_job({"entry_point": ENTRY}).epochs is None  # not given: the runtime asks for it
    templated = TrainingJob(entry_point=ENTRY).build(epochs="3", batch_size="8", learning_rate="", workers=None,
                                                     model_args='{"hidden": 4}', mode="sync")
    assert (templated.epochs, templated.batch_size, templated.learning_rate, templated.model_args) == (
        3, 8, None, {"hidden": 4})
    more = templated.with_flags(["--features", "a,b", "--model-arg", "depth=2", "--verbose"])
    assert more.features == ("a", "b") and more.model_args == {"hidden": 4, "depth": 2}
    assert more.extra_args == ("--verbose",)


def test_a_commands_settings_are_its_own_flags():
    command = ["python", "-m", "ignite_tf.runtime", "--entry-point", "team:model", "--batch-size", "7",
               "--model-arg", "hidden=3", "--epochs", "{{ params.epochs }}"]
    job = TrainingJob.from_job({"command": command, "job_dir": "/tmp"})
    assert job.to_job() == {"command": command, "job_dir": "/tmp"}  # run unchanged
    assert (job.batch_size, job.model_args, job.model_entry_point) == (7, {"hidden": 3}, "team:model")
    assert job.epochs is None  # a template not rendered yet: not known
    assert TrainingJob.from_job(job.to_job()) == job == replace(job, mode="sync")
    with pytest.raises(JobError, match="^batch_size goes with entry_point") as raised:
        TrainingJob(command=command, batch_size=128)
    assert raised.value.field == "batch_size"


@pytest.mark.parametrize("kwargs, field, words", [
    ({"entry_point": ENTRY, "command": ["x"]}, "entry_point", "exactly one of entry_point"),
    ({}, "entry_point", "exactly one of entry_point"),
    ({"entry_point": ENTRY, "mode": "lazy"}, "mode", "one of ['sync', 'async']"),
    ({"entry_point": ENTRY, "batch_size": -1}, "batch_size", "at least 1"),
    ({"entry_point": ENTRY, "epochs": "many"}, "epochs", "an integer"),
    ({"entry_point": ENTRY, "learning_rate": 0}, "learning_rate", "> 0"),
    ({"entry_point": ENTRY, "mode": "async", "ps": 0}, "ps", "async mode"),
    ({"entry_point": ENTRY, "job_dir": "/tmp"}, "job_dir", "goes with command"),
    ({"entry_point": ENTRY, "model_args": "[1, 2]"}, "model_args", "mapping"),
    ({"command": ["train.py"], "extra_args": ["--x"]}, "extra_args", "goes with entry_point"),
])
def test_a_bad_setting_is_a_config_error_naming_its_field(kwargs, field, words):
    with pytest.raises(JobError, match=f"^{field} ") as raised:
        TrainingJob(**kwargs)
    assert raised.value.field == field and words in str(raised.value)
    assert isinstance(raised.value, ConfigError)


def test_an_old_job_dict_with_an_unknown_key_or_a_bad_flag_is_refused():
    with pytest.raises(JobError, match="unknown keys"):
        TrainingJob.from_job({"entry_point": ENTRY, "argz": []})
    with pytest.raises(JobError, match="^batch_size must be an integer"):
        TrainingJob.from_job({"entry_point": ENTRY, "args": ["--batch-size", "lots"]})
    with pytest.raises(ConfigError, match="unknown training job settings"):
        FULL.build(colour="red")


def test_the_flag_table_is_the_runtimes_parser():
    """Every option of ``python -m ignite_tf.runtime`` but ``--serve`` (a task's role) is a field of the job."""
    from ignite_tf.runtime.train import build_parser

    options = {o for action in build_parser()._actions for o in action.option_strings} - {"-h", "--help", "--serve"}
    assert options == set(RUNTIME_FLAGS)


def test_the_memory_estimate_reads_the_jobs_fields():
    """``estimate`` takes the TrainingJob (or its dict): batch size, shuffle buffer and model arguments from it."""
    from ignite_tf.cluster.k8s.memory import RowWidth, estimate

    row = RowWidth(72, 80, "given")
    job = TrainingJob(entry_point=ENTRY, batch_size=48, shuffle_buffer=0, model_args={"hidden": 64})
    est = estimate(job, row=row)
    assert (est.batch_size, est.shuffle_buffer, est.params) == (48, 0, (16 + 1) * 64 + 65 * 64 + 65 * 2)
    assert estimate(job.to_job(), row=row).to_dict() == est.to_dict()
