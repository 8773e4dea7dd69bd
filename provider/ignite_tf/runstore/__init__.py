"""The run store: where a run lives (a local folder, or an object-store URL such as ``s3://bucket/runs``).

- ``layout.py``: ``RunFolder``, the names of a run's files; ``default_run_root``.
- ``store.py``: ``RunStore``, one run's place, read and written through fsspec; ``is_remote``; ``LAYOUT``.
- ``credentials.py``: the store's credentials, from the environment or an Airflow ``aws`` connection.
- ``mirror.py``: ``Mirror``, the supervisor's copier of growing files (task logs) to the store.
- ``sync.py``: ``TaskSync``, a training task's backup, model and TensorBoard events to and from the store.
- ``code.py``: code shipping (``code.zip``): the user's modules to every task.

Readers of a run (``Launcher.output`` for ``attach`` and the Airflow task log, the UI's plan, ``ignite-tf
tensorboard``, ``PublishModelOperator``) open it with ``RunStore(state.run_dir)``: the state's ``run_dir`` is
where the run lives, a folder or the store's URL. See docs/guides/run-store.md.

Importing this package imports neither fsspec nor s3fs.
"""

from ignite_tf.runstore.layout import RunFolder, default_run_root
from ignite_tf.runstore.store import LAYOUT, RunStore, is_remote

__all__ = ["LAYOUT", "RunFolder", "RunStore", "default_run_root", "is_remote"]
