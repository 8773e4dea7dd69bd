"""The start-up's timeline marks: written, read back, and a process's start time from the kernel."""

from __future__ import annotations

import subprocess
import sys
import time

from ignite_tf import timeline


def test_marks_are_read_back_and_a_later_attempt_wins():
    out = "\n".join([timeline.line("tf_imported", 100.5), "[ignite-tf 12:00:00] noise", "timing: broken at x",
                     timeline.line("tf_imported", 200.25), timeline.line("fit_start", 201.0)])
    assert timeline.marks(out) == {"tf_imported": 200.25, "fit_start": 201.0}
    # every attempt's moments, in the output's order (the restart bench takes each deletion's own)
    assert timeline.all_marks(out) == [("tf_imported", 100.5), ("tf_imported", 200.25), ("fit_start", 201.0)]


def test_a_process_start_is_taken_from_the_kernel_not_from_its_first_line():
    """A child that sleeps before asking: its start is before the sleep (what an interpreter's start and
    imports cost a pod before any of our code runs)."""
    before = time.time()
    code = "import time; time.sleep(0.5); from ignite_tf import timeline; print(timeline.process_started())"
    started = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                   check=True).stdout)
    after = time.time()
    assert before - 0.05 <= started <= after - 0.5


def test_moments_carried_by_a_first_process_are_printed_by_the_runtime(capsys):
    env: dict[str, str] = {}
    timeline.carry("process_started", 10.0, environ=env)
    timeline.carry("entry_started", 10.5, environ=env)
    assert capsys.readouterr().out == ""  # the first process prints nothing into a command's output
    assert timeline.replay(show=False, environ=env) == {"process_started": 10.0, "entry_started": 10.5}
    assert capsys.readouterr().out == ""
    timeline.replay(environ=env)
    assert timeline.marks(capsys.readouterr().out) == {"process_started": 10.0, "entry_started": 10.5}
