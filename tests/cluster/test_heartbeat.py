"""The supervisor's heartbeat apart from its loop (``ignite_tf.cluster.supervision.heartbeat``), on a real local
state store: it goes on while the loop waits in a call, stops once the loop has been away longer than the outage
it may wait out, and never writes after a final state. The whole supervisor through a frozen Kubernetes API is in
``tests/cluster/k8s/test_launcher.py::test_an_api_outage_is_waited_out_within_the_budget_and_named_past_it``."""

from __future__ import annotations

import time

from ignite_tf.cluster.supervision.heartbeat import HEARTBEAT_S, Heartbeat
from ignite_tf.state import ClusterState, LocalStateStore, Status
from tests.support.polling import wait_for


def test_the_heartbeat_goes_on_while_the_loop_waits_and_stops_once_it_is_stuck(tmp_path):
    store = LocalStateStore(tmp_path / "state")
    state = ClusterState(cluster_id="beats", cache="c", mode="sync", run_dir=str(tmp_path / "run"))
    stall_s = 2 * HEARTBEAT_S
    beat = Heartbeat(store, stall_s=stall_s)
    beat.record(state, force=True)
    last_loop = time.time()
    beat.start()
    try:
        # The loop hands nothing over from here on: as if it waited in an API call.
        wait_for(lambda: store.get("beats").heartbeat > last_loop + HEARTBEAT_S, 5 * HEARTBEAT_S,
                 "a heartbeat written while the loop was away")
        wait_for(lambda: time.time() > last_loop + stall_s + 2 * HEARTBEAT_S, 4 * stall_s,
                 "the loop away for longer than stall_s", poll=0.5)
        stopped_at = store.get("beats").heartbeat
        assert stopped_at <= last_loop + stall_s + HEARTBEAT_S, "beats went on for a loop stuck past stall_s"
        wait_for(lambda: time.time() > stopped_at + 2 * HEARTBEAT_S, 4 * HEARTBEAT_S, "two more beats' time",
                 poll=0.5)
        assert store.get("beats").heartbeat == stopped_at

        # The loop comes round again: the beats resume; a final state is written once, by the loop.
        beat.record(state)
        wait_for(lambda: store.get("beats").heartbeat > stopped_at, 5 * HEARTBEAT_S, "the beats resuming")
        state.status = Status.SUCCEEDED
        beat.record(state, force=True)
        final = store.get("beats")
        assert final.status is Status.SUCCEEDED
        wait_for(lambda: time.time() > final.heartbeat + 2 * HEARTBEAT_S, 4 * HEARTBEAT_S, "two beats' time",
                 poll=0.5)
        assert store.get("beats").heartbeat == final.heartbeat, "a beat rewrote the final state"
    finally:
        beat.stop()
