"""The run folder's layout, now part of the run store (``ignite_tf.runstore.layout``); kept here so that the
names' old home keeps working."""

from ignite_tf.runstore.layout import ENV_RUN_ROOT, RunFolder, default_run_root, staging_dir

__all__ = ["ENV_RUN_ROOT", "RunFolder", "default_run_root", "staging_dir"]
