"""The end of a training task: nothing of TensorFlow's left running once the work is done.

Three things used to hold a sync (MultiWorkerMirroredStrategy) cluster 10-60 s after its last epoch:

- TensorFlow wraps each worker's dataset in a MultiDeviceIterator whose per-device datasets are built with
  default ``tf.data.Options``: tf.data autotuning runs there whatever the worker's dataset says, and deleting
  the iterator at the end of ``fit`` waits for the tuner's next tick (its period doubles up to 60 s).
  ``quiet_device_datasets`` turns autotuning off in those wrappers too.
- Saving is collective, so every worker traced and saved the model, on the same cores. ``save_once`` has
  the chief alone save a copy (``save_options``: without per-layer traces where none are needed) while the
  other workers wait at a barrier.
- ``fit`` returned, the model saved and the result reported, Python's exit still joins TensorFlow's threads
  and runs its exit handlers (the coordination service's shutdown barrier among them). ``exit_now`` (the
  contract's end of a task, ``ignite_tf.contract``) flushes
  what the task wrote and ends the process at once.

TensorFlow is passed in or imported inside functions only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ignite_tf import contract
from ignite_tf.contract import Mode, exit_now

if TYPE_CHECKING:
    from ignite_tf.runtime.task import TaskInfo

__all__ = ["exit_now", "quiet_device_datasets", "save_once", "save_options", "untuned_options"]

BARRIER_TIMEOUT_S = 3600.0  # the chief's save of a large model; a lost chief ends the wait sooner


def quiet_device_datasets() -> bool:
    """Build TensorFlow's per-device datasets (MultiDeviceIterator) with tf.data autotuning off.

    TensorFlow 2.21 makes them with ``_create_device_dataset`` in ``multi_device_iterator_ops`` and no
    options of ours reach them. The wrapper keeps TF's own dataset and only adds options; it is applied
    once per process. Returns False (and changes nothing) when this TensorFlow has no such function.
    """
    from tensorflow.python.data.ops import multi_device_iterator_ops as mdi

    original = getattr(mdi, "_create_device_dataset", None)
    if original is None:
        return False
    if getattr(original, "_ignite_tf_quiet", False):
        return True

    def create_device_dataset(*args, **kwargs):
        return original(*args, **kwargs).with_options(untuned_options())

    create_device_dataset._ignite_tf_quiet = True  # type: ignore[attr-defined]
    mdi._create_device_dataset = create_device_dataset
    return True


def untuned_options():
    """``tf.data.Options`` without autotuning (no tuning thread that outlives an iterator)."""
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    return options


def save_once(model, *, rebuild, save, info: TaskInfo, log=print):
    """Save the trained model from the chief alone, then let the sync workers part together.

    Under MultiWorkerMirroredStrategy ``model.save`` is collective (reading sync-on-read variables, such as
    metrics and batch norm statistics, all-reduces them), so every worker used to save, the others into a
    temporary directory they then deleted: twice the tracing on the same cores. Instead every worker
    reads the weights (the same collectives on all), the chief puts them into a copy built outside the
    strategy (``rebuild``: the model function called again, compiled with the trained model's resolved metrics)
    and saves that copy, and the other workers wait at a coordination-service barrier, so none of them leaves
    while the chief still needs the cluster. The copy's optimizer starts fresh: resuming uses the backups, not
    the saved model.

    Falls back to every worker saving ``model`` (as before) when the copy's weights do not match or its
    metrics cannot be copied.
    :returns: what ``save`` returns on the chief, None elsewhere.
    """
    if info.type is None or info.mode is not Mode.SYNC:
        return save(model)  # one process, or the async chief: nothing collective to avoid
    copy = _plain_copy(model, rebuild, log)
    if copy is None:
        result = save(model)
    else:
        result = save(copy) if info.is_chief else None
    if not info.is_chief:
        contract.report("waiting for the chief to save the model", force=True)
    _barrier("ignite_tf_model_saved", info, log)
    return result


def _plain_copy(model, rebuild, log):
    try:
        weights = model.get_weights()  # collective for sync-on-read variables: every worker reads
        copy = rebuild()
        if [w.shape for w in copy.get_weights()] != [w.shape for w in weights]:
            log("warning: the model function's new model does not match the trained one's weights; "
                "every worker saves the trained model instead")
            return None
        copy.set_weights(weights)
        _compile_like(copy, model)
        return copy
    except Exception as exc:  # noqa: BLE001 - saving the trained model is the fallback
        log(f"warning: could not copy the trained model out of the strategy ({exc!r}); every worker saves "
            f"the trained model instead")
        return None


def _compile_like(copy, model) -> None:
    """Compile ``copy`` with ``model``'s metrics as fit resolved them, in new objects outside the strategy.

    tf_keras resolves a metric named by the task's shapes ("accuracy": binary, categorical or sparse
    categorical) only at its first use. A copy saved before any use keeps the bare name, and the reloaded
    metric compares labels with class probabilities: evaluate() on the published model said 0.30 where the
    trained model had 0.87 on the same rows. A model whose metrics fit never built has nothing to copy.
    """
    metrics = getattr(model, "compiled_metrics", None)
    if metrics is None or not getattr(metrics, "_built", False):
        return
    import tensorflow as tf
    import tf_keras

    def fresh(given):
        if given is None:
            return None
        return tf.nest.map_structure(lambda m: tf_keras.metrics.deserialize(tf_keras.metrics.serialize(m)), given)

    resolved = model._get_compile_args(user_metrics=False)
    args = copy._get_compile_args()
    copy.compile(**{**args, "metrics": fresh(resolved["metrics"]),
                    "weighted_metrics": fresh(resolved["weighted_metrics"])})


def _barrier(name: str, info: TaskInfo, log, timeout_s: float = BARRIER_TIMEOUT_S) -> None:
    """Wait until every sync worker got here. A peer already gone is fine: this task's work is done."""
    from tensorflow.python.eager import context

    try:
        context.context().wait_at_barrier(name, int(timeout_s * 1000))
    except Exception as exc:  # noqa: BLE001 - the chief may end the moment the barrier opens
        if info.is_chief:
            log(f"warning: the workers did not all reach the end of training ({exc})")


def save_options(model) -> dict:
    """``model.save`` arguments that skip tracing every layer's call when nothing needs those traces.

    A model made of tf_keras' own classes only (Sequential or functional, built-in layers) reloads from its
    config alone, so ``save_traces=False`` is safe; its serving signature is still traced, once, so
    ``tf.saved_model.load`` and TF Serving see the same ``serving_default``. That halves the chief's save
    (0.16 against 0.33-0.78 CPU-s for the tabular classifier). A model with a class of its own keeps every trace:
    it must load without its code.
    """
    classes = [type(model)] + [type(layer) for layer in model._flatten_layers(include_self=False)]
    if not all(c.__module__.startswith("tf_keras.") for c in classes):
        return {}
    try:
        from tf_keras.src.saving.legacy import saving_utils

        serving = saving_utils.trace_model_call(model)
    except Exception:  # noqa: BLE001 - another tf_keras, a model it cannot trace: the full save
        return {}
    return {"save_traces": False, "signatures": serving} if serving is not None else {}
