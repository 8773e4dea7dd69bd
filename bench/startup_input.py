"""Part 3 of ``bench/startup.py``: steps/s of a model fed from Ignite vs from memory, and the data path alone.

Imported by ``bench/startup.py`` (which documents the measurements); the functions take the connection and
the Ignite node pids of the cluster that script starts.
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import time
from pathlib import Path

STEPS_CACHE = "startup_steps_bench"
BATCH = 256


def say(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def step_rates(conn, frame, steps: int, *, node_pids: list[int], repeat: int = 3, quiet: bool = False,
               profile: bool = False) -> dict:
    """Best-of-``repeat`` steps/s of one model fed from Ignite and from memory, interleaved, same process.

    With ``profile``, a third path feeds the same NumPy batches through ``from_generator`` (no Ignite): it
    shows what the generator mechanism alone costs the training loop.
    """
    import numpy as np
    import tensorflow as tf

    import ignite_tf.data as itd
    from ignite_tf.models import tabular_classifier

    features = [c for c in frame.columns if c not in ("id", "label")]
    x = frame[features].to_numpy(np.float32)
    y = frame["label"].to_numpy(np.int32)
    model = tabular_classifier(n_features=len(features), n_classes=int(y.max()) + 1)

    def ignite_ds(epoch: int):
        return itd.dataset(batch_size=BATCH, epoch=epoch, label_column="label", stack=True, cache=STEPS_CACHE,
                           conn=conn)

    def memory_ds(_epoch: int):
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)

    def generator_ds(_epoch: int):
        def numpy_batches():
            for i in range(0, len(y), BATCH):
                yield x[i:i + BATCH], y[i:i + BATCH]
        signature = (tf.TensorSpec([None, len(features)], tf.float32), tf.TensorSpec([None], tf.int32))
        return tf.data.Dataset.from_generator(numpy_batches, output_signature=signature).prefetch(tf.data.AUTOTUNE)

    cpu: dict[str, list[tuple[float, float, float]]] = {}
    spans: list[tuple[str, float, float]] = []  # (path, wall clock at its start, at its end): for host-side samplers
    teardown: dict[str, list[float]] = {}
    end = _train_end_callback()

    def timed(make, epoch: int, name: str | None = None) -> float:
        ds = make(epoch)
        own, jvm = _own_cpu_s(), cpu_s(node_pids)
        started, started_wall = time.perf_counter(), time.time()
        model.fit(ds, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[end])
        wall = end.at - started
        if name:
            spans.append((name, started_wall, started_wall + wall))
            cpu.setdefault(name, []).append((wall, _own_cpu_s() - own, cpu_s(node_pids) - jvm))
            teardown.setdefault(name, []).append(time.perf_counter() - end.at)
        return steps / wall

    paths = {"ignite": ignite_ds, "memory": memory_ds}
    if profile:
        paths["numpy_generator"] = generator_ds
    for make in paths.values():
        timed(make, 0)  # warm-up: traces the train function, opens the first reader
    rates: dict[str, list[float]] = {name: [] for name in paths}
    for r in range(repeat):
        order = list(paths) if r % 2 == 0 else list(paths)[::-1]
        for name in order:
            rates[name].append(timed(paths[name], r + 1, name))
        say(f"  round {r + 1} (load {os.getloadavg()[0]:.1f}): "
            + ", ".join(f"{n} {rates[n][-1]:.0f} steps/s" for n in paths), quiet)
    # CPU of each path's fastest run: (wall s, this process's CPU-s, the Ignite nodes' CPU-s).
    best_cpu = {name: min(runs) for name, runs in cpu.items()}
    ratios = [i / m for i, m in zip(rates["ignite"], rates["memory"], strict=True)]
    return {"steps_s_ignite": max(rates["ignite"]), "steps_s_memory": max(rates["memory"]), "_rates": rates,
            "_cpu": best_cpu, "input_ratio_median": statistics.median(ratios), "_teardown": teardown,
            "_spans": spans}


def _train_end_callback():
    """A Keras callback that notes when the last step of ``fit`` is done (``on_train_end``)."""
    import tf_keras

    class TrainEnd(tf_keras.callbacks.Callback):
        at = 0.0

        def on_train_end(self, logs=None):
            self.at = time.perf_counter()

    return TrainEnd()


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of other processes (the Ignite JVMs), from /proc."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def profile_data_path(conn, repeat: int = 3) -> dict:
    """The Ignite data path alone (no training), best of ``repeat``.

    ``reader_open_s``: opening a PartitionReader (connections, metadata); ``reader_rows_s``: its batches of
    every partition (features stacked as decoded, as the dataset reads them), open excluded, and
    ``reader_ms_per_partition`` = that time / partitions; ``blocks_rows_s``: ``ignite_tf.data.blocks`` (adds
    the plan's routes and the shuffle), and ``blocks_cpu_us_per_row`` this process's CPU for it per row (what the
    reader takes from the training's cores); ``batches_rows_s``: ``ignite_tf.data.batches`` (blocks cut into
    NumPy batches); ``dataset_rows_s``: ``ignite_tf.data.dataset(stack=True)`` iterated eagerly (adds
    ``from_generator`` and ``rebatch``); ``dataset_build_s``: building that dataset with ``cache=``
    (discovery each time).
    """
    import ignite_tf.data as itd
    from ignite_tf.defaults import DEFAULT_SHUFFLE_BUFFER
    from ignite_tf.reader.partition import PartitionReader

    plan = itd.load_plan(cache=STEPS_CACHE, conn=conn)
    best: dict[str, float] = {}

    def keep(name: str, value: float, better=min) -> None:
        best[name] = value if name not in best else better(best[name], value)

    for _ in range(repeat):
        started = time.perf_counter()
        with PartitionReader(conn, STEPS_CACHE, batch_size=10_000) as reader:
            keep("reader_open_s", time.perf_counter() - started)
            features = [c for c in reader.schema if c not in (reader.key_column, "label")]
        with PartitionReader(conn, STEPS_CACHE, batch_size=10_000, stack=features) as reader:
            started = time.perf_counter()
            n = sum(len(b[reader.key_column]) for b in reader.batches(range(reader.partitions)))
            seconds = time.perf_counter() - started
            keep("reader_rows_s", n / seconds, max)
            keep("reader_ms_per_partition", seconds / reader.partitions * 1e3)
        started, own = time.perf_counter(), _own_cpu_s()
        n = sum(len(b["label"]) for b in itd.blocks(0, batch_size=BATCH, plan=plan, conn=conn, stack=features,
                                                     columns=[*features, "label"],
                                                     shuffle_buffer=DEFAULT_SHUFFLE_BUFFER))
        keep("blocks_rows_s", n / (time.perf_counter() - started), max)
        keep("blocks_cpu_us_per_row", (_own_cpu_s() - own) / n * 1e6)
        started = time.perf_counter()
        n = sum(len(b["label"]) for b in itd.batches(0, batch_size=BATCH, plan=plan, conn=conn,
                                                      shuffle_buffer=DEFAULT_SHUFFLE_BUFFER))
        keep("batches_rows_s", n / (time.perf_counter() - started), max)
        started = time.perf_counter()
        ds = itd.dataset(BATCH, 0, label_column="label", stack=True, cache=STEPS_CACHE, conn=conn)
        keep("dataset_build_s", time.perf_counter() - started)
        started = time.perf_counter()
        n = sum(int(y.shape[0]) for _x, y in ds)
        keep("dataset_rows_s", n / (time.perf_counter() - started), max)
    best["partitions"] = plan.partition_map.partitions
    return best


def warm_nodes(conn, passes: int, node_pids: list[int], cache: str = STEPS_CACHE,
               discover: bool = False) -> list[float]:
    """Read ``cache`` (the steps cache) ``passes`` times, untimed, so the Ignite JVMs run their scan code
    compiled; with ``discover``, partition discovery's queries too.

    Nodes in service have run it for hours; fresh JVMs spend about 3x the CPU per row in their first passes
    (measured on this machine: 1.65 CPU-s for the first pass of 512,000 rows, 0.3 from the 25th on), and
    that CPU competes with the training measured right after. Returns the nodes' CPU-s of each pass.
    """
    from ignite_tf.plan.partitions import PartitionMap
    from ignite_tf.reader.partition import PartitionReader

    spent = []
    with PartitionReader(conn, cache, batch_size=10_000) as reader:
        for _ in range(passes):
            before = cpu_s(node_pids)
            for _batch in reader.batches(range(reader.partitions)):
                pass
            if discover:
                PartitionMap.discover(conn, cache)
            spent.append(cpu_s(node_pids) - before)
    return spent
