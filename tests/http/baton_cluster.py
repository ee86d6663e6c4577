"""A `baton up` cluster for the pytest modules here: started from a cluster file's text, its
HTTP API's base URL yielded once it prints "http: HOST:PORT", stopped with SIGTERM (then killed
after 60 s). BATON_BINARY names the `baton` to run (default: build/bin/baton)."""

import contextlib
import json
import os
import pathlib
import queue
import signal
import subprocess
import tempfile
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY = os.environ.get("BATON_BINARY", str(ROOT / "build" / "bin" / "baton"))
START_TIMEOUT_S = 180


def small_cluster_yaml(decode_args=()):
    """The router (gRPC and HTTP on free ports), one prefill and one decode worker of one thread
    each on 127.0.0.1, serving the default model; `decode_args` go to the decode worker."""
    args = f"    args: {json.dumps(list(decode_args))}\n" if decode_args else ""
    return ("host: 127.0.0.1\nrouter:\n  port: 0\n  http_port: 0\nprefill:\n  - threads: 1\n"
            "decode:\n  - threads: 1\n    kv_cache_memory: 128M\n" + args)


@contextlib.contextmanager
def running_cluster(cluster_yaml, metrics=None):
    """Yields the cluster's OpenAI base URL, http://HOST:PORT/v1. A `metrics` dict gets each
    worker's Prometheus address by name ("decode[0]": "HOST:PORT"), as `baton up` prints them
    after the http line."""
    with tempfile.TemporaryDirectory() as tmp:
        config = pathlib.Path(tmp) / "cluster.yaml"
        config.write_text(cluster_yaml)
        proc = subprocess.Popen(
            [BINARY, "up", "--config", str(config)], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        lines = queue.Queue()

        def read():
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        http = None
        try:
            while http is None:
                try:
                    line = lines.get(timeout=START_TIMEOUT_S)
                except queue.Empty:
                    pytest.fail(f"`baton up` printed no 'http:' line in {START_TIMEOUT_S} s")
                if line is None:
                    pytest.fail(f"`baton up` exited with code {proc.wait()} before serving")
                if line.startswith("http: "):
                    http = line.split()[1]
            while metrics is not None:
                try:
                    line = lines.get(timeout=5)
                except queue.Empty:
                    break
                if line is None or not line.startswith("metrics "):
                    break
                name, address = line[len("metrics "):].split(": ")
                metrics[name] = address.strip()
            yield f"http://{http}/v1"
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
