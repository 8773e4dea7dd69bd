"""The task of ``bench/k8s/deployed.py``'s input part, run in a pod: steps/s fed from Ignite vs from memory.

    python input_task.py STEPS[,SHORT_STEPS] REPEAT

Reads the cache ``startup_input.STEPS_CACHE`` whole into memory through ``ignite_tf.data`` (the Ignite
connection from the task's ``IGNITE_TF_*`` environment, as the launcher sets it), then runs
``startup_input.step_rates``: the same model trained from ``ignite_tf.data.dataset`` (the Ignite pods, over
the pod network) and from those rows in memory, interleaved; with ``SHORT_STEPS``, again with fits of that
many steps (``short``: the reader's first block, read before a fit's first step, weighs more in a short fit).
Prints ``BENCH_INPUT {...}``.
"""

from __future__ import annotations

import json
import os
import sys

MARK = "BENCH_INPUT"


def main(argv: list[str]) -> int:
    steps, *short = (int(n) for n in argv[0].split(","))
    repeat = int(argv[1])
    from ignite_tf.runtime.start import import_tf

    import_tf()
    import pandas as pd
    from startup_input import STEPS_CACHE, step_rates

    import ignite_tf.data as itd
    from ignite_tf.connection import IgniteConnectionConfig

    conn = IgniteConnectionConfig.from_env()
    parts = list(itd.batches(batch_size=65_536, cache=STEPS_CACHE, conn=conn, worker=0))
    frame = pd.concat([pd.DataFrame(p) for p in parts], ignore_index=True)
    result = step_rates(conn, frame, steps, node_pids=[], repeat=repeat, quiet=True)
    out = {"rows": len(frame), "steps_s_ignite": result["steps_s_ignite"], "steps_s_memory": result["steps_s_memory"],
           "input_ratio_median": result["input_ratio_median"], "rates": result["_rates"], "cpu": result["_cpu"],
           "spans": result["_spans"], "steps": steps}
    if short:
        r = step_rates(conn, frame, short[0], node_pids=[], repeat=repeat, quiet=True)
        out["short"] = {"steps": short[0], "steps_s_ignite": r["steps_s_ignite"], "steps_s_memory": r["steps_s_memory"],
                        "input_ratio": r["steps_s_ignite"] / r["steps_s_memory"],
                        "input_ratio_median": r["input_ratio_median"]}
    print(f"{MARK} {json.dumps(out)}", flush=True)
    sys.stdout.flush()
    os._exit(0)  # as the runtime ends: TensorFlow's exit handlers wait on a shutdown barrier


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
