"""A baton cluster across a netns_harness.Topology: the router in the root namespace (gRPC on the
topology's router_host, HTTP on 127.0.0.1), prefill workers in namespace P, decode workers in D,
each advertising its namespace's service address. Stdlib only.

Library: `NetnsCluster(topology, baton, model)`, then start_router(), start_worker("prefill"|
"decode"|"both", ...), wait_healthy(), and close() (also `with`) to stop every process.

Command line (what bench/pd_experiment.sh uses; like `baton up`, it prints `router: HOST:PORT` and
`http: HOST:PORT` once healthy and serves until SIGINT/SIGTERM, then removes everything):

  python3 tests/netns/netns_cluster.py --link 10gbit,200us [--baton PATH] [--model PATH]
      [--prefill-cpus 0] [--decode-cpus 1] [--threads 1] [--kv-cache-memory 256M]
      [--colocated] [-- EXTRA ROUTER FLAGS]

Thread-safety: one thread.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_harness as nh  # noqa: E402

START_TIMEOUT_S = 120.0
PREFILL_PORT, DECODE_PORT, METRICS_PORT = 7100, 7200, 9100  # namespaces are private: fixed ports


class Member:
    """One started process; stdout read for its address lines, then drained by a thread."""

    def __init__(self, name: str, argv: list[str]) -> None:
        self.name = name
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        self._buffer = b""
        self.address = ""

    def wait_for_line(self, prefix: str, timeout_s: float = START_TIMEOUT_S) -> str:
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                text = line.decode(errors="replace")
                if text.startswith(prefix):
                    return text[len(prefix):].strip()
            left = deadline - time.monotonic()
            if left <= 0:
                raise nh.HarnessError(f"{self.name}: no '{prefix}' line in {timeout_s:g} s")
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise nh.HarnessError(f"{self.name} exited (code {self.proc.wait(5)}) before "
                                          f"printing '{prefix}'")
                self._buffer += chunk

    def drain(self) -> None:
        """Keeps reading stdout so that the child never blocks on a full pipe."""
        def loop() -> None:
            with open(self.proc.stdout.fileno(), "rb", closefd=False) as out:
                while out.read1(65536):
                    pass
        threading.Thread(target=loop, daemon=True).start()

    def stop(self, grace_s: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class NetnsCluster:
    def __init__(self, topology: nh.Topology, baton: str, model: Optional[str] = None,
                 common_args: Optional[list[str]] = None) -> None:
        self.t = topology
        self.baton = os.path.abspath(baton)
        self.model = model
        self.common = list(common_args or [])
        self.members: list[Member] = []
        self.router_address = ""
        self.http_address = ""
        self.metrics: dict[str, str] = {}   # worker name -> HOST:PORT of its /metrics
        self._count = {"prefill": 0, "decode": 0, "both": 0}

    def _model_args(self) -> list[str]:
        return ["--model", self.model] if self.model else []

    def start_router(self, extra: Optional[list[str]] = None) -> None:
        m = Member("router", [self.baton, "router", "--host", self.t.router_host, "--port", "0",
                              "--http-host", "127.0.0.1", "--http-port", "0",
                              *self._model_args(), *self.common, *(extra or [])])
        self.members.append(m)
        self.router_address = m.wait_for_line("listening on ")
        self.http_address = m.wait_for_line("http listening on ")
        m.drain()

    def start_worker(self, role: str, cpus: str = "", threads: int = 1,
                     kv_cache_memory: str = "256M", extra: Optional[list[str]] = None) -> str:
        """role: prefill (in P), decode (in D) or both (in P). Returns its advertised address."""
        k = self._count[role]
        self._count[role] += 1
        if role == "decode":
            ns, port, host = self.t.ns_decode, DECODE_PORT + k, self.t.decode_host
            listen = ["--host", "0.0.0.0", "--port", str(port), "--advertise", f"{host}:{port}"]
        else:
            ns, port, host = self.t.ns_prefill, PREFILL_PORT + 50 * (role == "both") + k, \
                self.t.prefill_host
            listen = ["--host", host, "--port", str(port)]
        name = f"{role}[{k}]"
        metrics_port = METRICS_PORT + 10 * ("prefill", "decode", "both").index(role) + k
        argv = [*(["taskset", "-c", cpus] if cpus else []), *self.t.exec_prefix(ns), self.baton,
                "worker", "--role", role, *listen, "--router", self.router_address,
                "--threads", str(threads), "--kv-cache-memory", kv_cache_memory,
                "--metrics-port", str(metrics_port), "--metrics-host", host,
                *self._model_args(), *self.common, *(extra or [])]
        m = Member(name, argv)
        self.members.append(m)
        m.wait_for_line("listening on ")
        m.address = f"{host}:{port}"
        self.metrics[name] = m.wait_for_line("metrics listening on ")
        m.drain()
        if role == "decode":
            self.t.start_relay(port)
        return m.address

    def wait_healthy(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until the router's /health says ok (a prefill- and a decode-capable worker)."""
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://{self.http_address}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except urllib.error.HTTPError as e:
                last = e.read().decode(errors="replace")
            except OSError as e:
                last = str(e)
            time.sleep(0.1)
        raise nh.HarnessError(f"the router was not healthy in {timeout_s:g} s: {last}")

    def metric(self, worker: str, name: str) -> float:
        """One gauge from a worker's /metrics (the sum over its label sets)."""
        with urllib.request.urlopen(f"http://{self.metrics[worker]}/metrics", timeout=5) as r:
            text = r.read().decode()
        values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                  if line.startswith(name + "{") or line.startswith(name + " ")]
        if not values:
            raise nh.HarnessError(f"{worker}: no metric {name}")
        return sum(values)

    def close(self) -> None:
        """Router first (no new requests), then the workers."""
        for m in self.members:
            m.stop()
        self.members.clear()

    def __enter__(self) -> "NetnsCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--link", default="none", help="RATE[,DELAY[,LOSS%%]], e.g. 10gbit,200us")
    parser.add_argument("--baton", default="build/bin/baton")
    parser.add_argument("--model", default=None)
    parser.add_argument("--prefill-cpus", default="0")
    parser.add_argument("--decode-cpus", default="1")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--kv-cache-memory", default="256M")
    parser.add_argument("--colocated", action="store_true",
                        help="one colocated worker (in P, on --prefill-cpus,--decode-cpus) instead")
    parser.add_argument("--check", action="store_true",
                        help="only check --link and that namespaces can be made; exit 0, 1 or 2")
    parser.add_argument("router_args", nargs="*", help="after --: extra router flags")
    args = parser.parse_args(argv)
    try:
        link = nh.LinkSpec.parse(args.link)
    except nh.HarnessError as e:
        print(f"netns_cluster: {e}", file=sys.stderr)
        return 2
    reason = nh.unavailable_reason()
    if reason:
        print(f"netns_cluster: {reason}", file=sys.stderr)
        return 1
    if args.check:
        return 0
    try:
        with nh.Topology.create(link) as t, NetnsCluster(t, args.baton, args.model) as c:
            print(f"netns_cluster: P/D link {link} (delay by {t.delay_mode})", file=sys.stderr)
            c.start_router(args.router_args)
            if args.colocated:
                c.start_worker("both", f"{args.prefill_cpus},{args.decode_cpus}", args.threads * 2,
                               args.kv_cache_memory)
            else:
                c.start_worker("prefill", args.prefill_cpus, args.threads, args.kv_cache_memory)
                c.start_worker("decode", args.decode_cpus, args.threads, args.kv_cache_memory)
            c.wait_healthy()
            print(f"router: {c.router_address}", flush=True)
            print(f"http: {c.http_address}", flush=True)
            for name, address in c.metrics.items():
                print(f"metrics {name}: {address}", flush=True)
            _wait_for_signal()
    except nh.HarnessError as e:
        print(f"netns_cluster: {e}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, SystemExit):
        pass
    return 0


def _wait_for_signal() -> None:
    """Until SIGINT (KeyboardInterrupt) or SIGTERM (SystemExit, from the harness's handler)."""
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
