"""``python -m ignite_tf.cluster.k8s.entry CWD -- ARGV...``: a task pod's first process.

Does in the pod what the local supervisor does for a child process: the task's working folder, the
contract's ``taskboot`` first on ``PYTHONPATH`` (an uncaught exception ends the task at once), the job
folder importable, then ``exec`` of the task's command (the container's main process, so its exit status
and signals are the pod's).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ignite_tf.contract import ENV_JOB_DIR, ENV_PROGRESS_FILE, TASKBOOT_DIR


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--":
        sys.exit("usage: python -m ignite_tf.cluster.k8s.entry CWD -- COMMAND [ARGS...]")
    cwd, command = argv[0], argv[2:]
    Path(cwd).mkdir(parents=True, exist_ok=True)
    os.chdir(cwd)
    if os.environ.get(ENV_PROGRESS_FILE):
        Path(os.environ[ENV_PROGRESS_FILE]).parent.mkdir(parents=True, exist_ok=True)
    job_dir = os.environ.get(ENV_JOB_DIR)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [TASKBOOT_DIR, job_dir, os.environ.get("PYTHONPATH")]))
    sys.stdout.flush()
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
