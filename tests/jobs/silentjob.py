"""A task that reports progress for a second, then hangs without exiting (listens on its TF_CONFIG port)."""

import json
import os
import socket
import time

from ignite_tf.runtime import progress

cfg = json.loads(os.environ["TF_CONFIG"])
host, port = cfg["cluster"][cfg["task"]["type"]][cfg["task"]["index"]].rsplit(":", 1)
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((host, int(port)))
server.listen()
for step in range(10):
    progress.report(f"step {step}", force=True)
    time.sleep(0.1)
print("now hanging", flush=True)
while True:
    time.sleep(60)
