"""The tasks' shared bytecode cache (ignite_tf.cluster.bytecode): on by default, kept off when asked, and a
task's Python really writes and then reads its bytecode there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ignite_tf.cluster.bytecode import pycache_dir, with_bytecode_cache


def test_tasks_write_bytecode_to_one_cache_folder_by_default(tmp_path):
    env = with_bytecode_cache({"PYTHONDONTWRITEBYTECODE": "1", "IGNITE_TF_HOME": str(tmp_path), "PATH": "/bin"})
    assert env == {"PYTHONPYCACHEPREFIX": str(tmp_path / "pycache"), "IGNITE_TF_HOME": str(tmp_path),
                   "PATH": "/bin"}
    assert pycache_dir({"IGNITE_TF_PYCACHE": "/elsewhere"}) == "/elsewhere"


def test_the_callers_choice_is_kept():
    off = {"IGNITE_TF_PYCACHE": "", "PYTHONDONTWRITEBYTECODE": "1"}
    assert with_bytecode_cache(dict(off)) == off
    own = {"PYTHONPYCACHEPREFIX": "/mine", "PYTHONDONTWRITEBYTECODE": "1"}
    assert with_bytecode_cache(dict(own)) == own


def test_a_task_python_fills_the_cache_and_reads_it(tmp_path):
    module = tmp_path / "src" / "bytecode_probe.py"
    module.parent.mkdir()
    module.write_text("VALUE = 42\n")
    env = with_bytecode_cache({"PYTHONDONTWRITEBYTECODE": "1", "IGNITE_TF_PYCACHE": str(tmp_path / "cache"),
                               "PYTHONPATH": str(module.parent)})
    code = "import bytecode_probe, sys; print(bytecode_probe.__cached__, bytecode_probe.VALUE)"
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                             timeout=60).stdout.split()
        assert out[1] == "42" and Path(out[0]).is_relative_to(tmp_path / "cache")
    assert Path(out[0]).exists() and not (module.parent / "__pycache__").exists()
