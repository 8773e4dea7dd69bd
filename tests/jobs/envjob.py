"""A user job for environment tests: writes what it sees (interpreter, PATH, environment) to OUT/<task>.json,
then listens on its TF_CONFIG port for SECONDS (so the supervisor sees it up) and exits 0.

usage: envjob.py OUT SECONDS
"""

import importlib.util
import json
import os
import socket
import sys
import time
from pathlib import Path

out, seconds = Path(sys.argv[1]), float(sys.argv[2])
cfg = json.loads(os.environ["TF_CONFIG"])
role, index = cfg["task"]["type"], cfg["task"]["index"]
host, port = cfg["cluster"][role][index].rsplit(":", 1)
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((host, int(port)))
server.listen()
seen = {"executable": sys.executable, "path": os.environ.get("PATH", "").split(os.pathsep),
        "has_ignite_tf": importlib.util.find_spec("ignite_tf") is not None, "environ": dict(os.environ)}
out.mkdir(parents=True, exist_ok=True)
tmp = out / f".{role}-{index}.json"
tmp.write_text(json.dumps(seen))
tmp.replace(out / f"{role}-{index}.json")
print(f"{role}-{index} wrote {out}", flush=True)
time.sleep(seconds)
