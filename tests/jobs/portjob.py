"""A minimal user job for launcher tests: listens on its TF_CONFIG port like a TF server would, prints, exits.

usage: portjob.py SECONDS [--fail-task NAME] [--no-listen NAME] [--fail-attempt K]
"""

import argparse
import json
import os
import socket
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("seconds", type=float)
parser.add_argument("--fail-task", default="")
parser.add_argument("--fail-attempt", type=int, default=-1)
parser.add_argument("--no-listen", default="")
args = parser.parse_args()

cfg = json.loads(os.environ["TF_CONFIG"])
role, index = cfg["task"]["type"], cfg["task"]["index"]
name = f"{role}-{index}"
attempt = int(os.environ.get("IGNITE_TF_ATTEMPT", "0"))
host, port = cfg["cluster"][role][index].rsplit(":", 1)
if name != args.no_listen:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, int(port)))
    server.listen()
print(f"{name} attempt {attempt} up on {port}", flush=True)
steps = int(args.seconds / 0.1)
for step in range(steps):
    time.sleep(0.1)
    if step == steps // 2:
        print(f"{name} halfway", flush=True)
        if name == args.fail_task and (args.fail_attempt < 0 or attempt == args.fail_attempt):
            print(f"{name} failing on purpose", flush=True)
            sys.exit(3)
print(f"{name} done", flush=True)
