"""A user job that prints numbered lines at a steady rate, for tests of how its output reaches a task log.

usage: linejob.py LINES INTERVAL_S [EXIT_STATUS] [--hold FILE]

Each task listens on its TF_CONFIG port like a TF server would, prints ``<task> line <i>/<LINES>`` every
INTERVAL_S seconds, then exits with EXIT_STATUS (default 0). With ``--hold FILE`` it exits only once FILE
exists: a test that needs the job running until it has checked something creates FILE then, rather than
guessing how many lines last long enough.
"""

import argparse
import json
import os
import socket
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("lines", type=int)
parser.add_argument("interval", type=float)
parser.add_argument("status", type=int, nargs="?", default=0)
parser.add_argument("--hold", default="")
args = parser.parse_args()

cfg = json.loads(os.environ["TF_CONFIG"])
role, index = cfg["task"]["type"], cfg["task"]["index"]
name = f"{role}-{index}"
host, port = cfg["cluster"][role][index].rsplit(":", 1)
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((host, int(port)))
server.listen()
for i in range(1, args.lines + 1):
    print(f"{name} line {i:04d}/{args.lines}", flush=True)
    time.sleep(args.interval)
while args.hold and not os.path.exists(args.hold):
    time.sleep(0.1)
if args.status:
    print(f"{name} failing on purpose", flush=True)
sys.exit(args.status)
