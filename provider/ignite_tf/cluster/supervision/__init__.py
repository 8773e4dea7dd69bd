"""Supervision of a TensorFlow cluster: one supervisor process per cluster, parent (or owner) of every task.

- ``settings.py``: ``Supervision``, the five settings (restarts, restart policy, start-up deadline, progress
  watchdog, grace period), one value from every edge;
- ``policy.py``: the rules — restart what, when to give up — as a pure function of what the tasks did;
- ``loop.py``: ``Supervisor``, the loop that observes the tasks through a backend, asks the policy and carries
  its decisions out, recording everything in the state store;
- ``backend.py``: ``Backend``, what the loop drives, and ``SupervisorHost``, what a backend may ask of the loop;
- ``locality.py``: the final report of the data locality the workers measured;
- ``processes.py``: the backend of local processes (``python -m ignite_tf.cluster.supervision.processes``);
  ``ignite_tf.cluster.k8s.pods`` is the backend of pods.
"""

from ignite_tf.cluster.supervision.settings import RestartPolicy, Supervision

__all__ = ["RestartPolicy", "Supervision"]
