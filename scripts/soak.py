#!/usr/bin/env python3
"""Soak: a `baton up` cluster (router, 2 prefill and 2 decode workers) under load while faults are
injected at random, bounded in time and count; then the books are checked.

Load: client threads send a fixed set of seeded, sampled requests (temperature 0.8, ignore_eos)
to the OpenAI HTTP API, streaming and not. Each request's fault-free output is recorded first,
one at a time, before any fault.

Faults, one every 2-6 s (seeded), by kind:
  kill       SIGKILL a worker (`baton up` restarts it; at most 3 per worker, its limit is 5)
  stall      SIGSTOP a worker for 2-6 s, then SIGCONT (the router's --stall-timeout is 2 s)
  partition  the link between the prefill and the decode side down for 2-6 s (where network
             namespaces can be made: the cluster then runs with `link:` (baton up --link), prefill
             and decode workers in namespaces of their own joined by a veth pair)
  cancel     a streaming client that goes away after its first chunk
  hostile    a hostile HTTP client: deeply nested JSON, a body that never comes, a bad
             Content-Length, a stop string of 1 MiB; each must get its 4xx at once

The end (the script exits 1 when any fails):
  - no member exited except the ones it killed (counted from `baton up`'s log), and `baton up`
    is still serving;
  - every KV block free on every worker, prefill and decode (baton:kv_cache_blocks_used == 0 on
    each one's /metrics);
  - every request either completed with the output of its fault-free run, or failed with a
    clear status (an HTTP error with an OpenAI error body, or a stream's error event); none lost
    (no answer, or a stream cut without an end) and none with other output (which is how a lost or
    duplicated token would show).

usage: scripts/soak.py [--duration S] [--clients N] [--seed S] [--link auto|off|RATE[,DELAY]]
                       [--baton PATH] [--json OUT]
"""

import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CLUSTER_FILE = """\
host: 127.0.0.1
router:
  port: 0
  http_port: 0
  args: ["--stall-timeout", "2", "--no-worker-timeout", "15", "--request-timeout", "120",
         "--heartbeat-ms", "250"]
prefill:
  - threads: 1
  - threads: 1
decode:
  - threads: 1
    kv_cache_memory: 96M
  - threads: 1
    kv_cache_memory: 96M
"""

PROMPTS = [
    "Once upon a time in a small village,",
    "The three most important things about rivers are",
    "Write a haiku about the sea:",
    "def fibonacci(n):",
    "The capital of France is",
    "A recipe for pancakes: first,",
    "In the year 2050, cities will",
    "Dear diary, today I learned",
]
MAX_TOKENS = 24
REQUEST_TIMEOUT_S = 90  # a client's bound on one request; an answer after it counts as lost


def log(*parts):
    print(time.strftime("%H:%M:%S"), *parts, file=sys.stderr, flush=True)


class Cluster:
    """`baton up` in a temporary directory; its addresses and its members' PIDs."""

    def __init__(self, baton, link):
        self.dir = tempfile.mkdtemp(prefix="baton-soak-")
        config = os.path.join(self.dir, "cluster.yaml")
        with open(config, "w") as f:
            f.write(CLUSTER_FILE)
            if link:
                f.write(f"link: {link}\n")
        self.log_path = os.path.join(self.dir, "up.log")
        self.log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen([baton, "up", "--config", config], stdout=subprocess.PIPE,
                                     stderr=self.log_file, text=True, cwd=ROOT)
        self.http = None
        self.metrics = {}
        deadline = time.time() + 180
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("http: "):
                self.http = line.split(" ", 1)[1]
            m = re.match(r"metrics (\S+): (\S+)", line)
            if m:
                self.metrics[m.group(1)] = m.group(2)
            if self.http and len(self.metrics) == 4:
                break
            if time.time() > deadline:
                break
        if not self.http or len(self.metrics) != 4:
            self.stop()
            raise RuntimeError(f"baton up did not start; see {self.log_path}")
        # Keep reading stdout so that baton up never blocks on it.
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()

    def workers(self):
        """{pid: 'prefill'|'decode'} of the worker processes `baton up` runs now."""
        found = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                if ppid != self.proc.pid:
                    continue
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except (OSError, ValueError, IndexError):
                continue
            if len(argv) > 1 and argv[1] in (b"prefill", b"decode"):
                found[int(entry)] = argv[1].decode()
        return found

    def pd_link(self):
        """(namespace, device) of the prefill side's end of the P<->D veth; None without one."""
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for line in listed.splitlines():
            ns = line.split()[0] if line.split() else ""
            if re.fullmatch(rf"baton-{self.proc.pid}-[0-9a-f]+-p", ns):
                links = subprocess.run(["ip", "-n", ns, "-o", "link", "show"],
                                       capture_output=True, text=True).stdout
                m = re.search(r"^\d+: (bt\w*pP)[@:]", links, re.M)
                if m:
                    return ns, m.group(1)
        return None

    def alive(self):
        return self.proc.poll() is None

    def exits_logged(self):
        with open(self.log_path) as f:
            return len(re.findall(r"exited with code", f.read()))

    def blocks_used(self):
        """{member: blocks used} from every worker's /metrics; None where it cannot be read."""
        used = {}
        for name, address in self.metrics.items():
            try:
                host, port = address.rsplit(":", 1)
                conn = http.client.HTTPConnection(host, int(port), timeout=5)
                conn.request("GET", "/metrics")
                body = conn.getresponse().read().decode()
                conn.close()
                m = re.search(r"^baton:kv_cache_blocks_used(?:\{[^}]*\})? (\S+)$", body, re.M)
                used[name] = float(m.group(1)) if m else None
            except OSError:
                used[name] = None
        return used

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log_file.close()


def namespaces_available():
    if os.geteuid() != 0:
        return False
    probe = f"baton-soak-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode == 0
    if made:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return made


def completion_body(index, stream):
    return {
        "prompt": PROMPTS[index],
        "max_tokens": MAX_TOKENS,
        "temperature": 0.8,
        "top_p": 0.95,
        "seed": 1000 + index,
        "ignore_eos": True,
        "stream": stream,
    }


def post(address, body, timeout=REQUEST_TIMEOUT_S):
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    conn.request("POST", "/v1/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    return conn, conn.getresponse()


def run_request(address, index, stream, cancel_after_first=False):
    """One request's outcome: ('completed', text) | ('failed', message) | ('lost', why) |
    ('cancelled', '')."""
    try:
        conn, response = post(address, completion_body(index, stream))
    except (OSError, http.client.HTTPException) as e:
        return "lost", f"no answer: {e!r}"
    try:
        if response.status != 200:
            body = response.read().decode(errors="replace")
            try:
                message = json.loads(body)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                return "lost", f"HTTP {response.status} without an error body: {body[:200]}"
            return "failed", f"HTTP {response.status}: {message}"
        if not stream:
            return "completed", json.loads(response.read())["choices"][0]["text"]
        text = ""
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                return "completed", text
            event = json.loads(data)
            if "error" in event:
                return "failed", f"stream error: {event['error'].get('message')}"
            if event.get("choices"):
                text += event["choices"][0].get("text", "")
            if cancel_after_first:
                return "cancelled", ""
        return "lost", "stream ended without [DONE] or an error"
    except (OSError, http.client.HTTPException, ValueError) as e:
        return "lost", f"answer broke off: {e!r}"
    finally:
        conn.close()


def hostile(address, kind):
    """Sends one hostile request; True when it got the expected 4xx."""
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    try:
        if kind == "deep-json":
            body = b'{"prompt":' + b"[" * 70000 + b"]" * 70000 + b"}"
            head = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                    f"\r\nContent-Length: {len(body)}\r\n\r\n").encode()
            sock.sendall(head + body)
            expect = b" 400 "
        elif kind == "bad-length":
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n")
            expect = b" 400 "
        elif kind == "huge-stop":
            body = json.dumps({"prompt": "x", "max_tokens": 1, "stop": "s" * (1 << 20)}).encode()
            head = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                    f"\r\nContent-Length: {len(body)}\r\n\r\n").encode()
            sock.sendall(head + body)
            expect = b" 4"
        else:  # "slow-body": headers promise a body that never comes; the router's body timeout
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            expect = b" 408 "
        answer = sock.recv(4096)
        return expect in answer.split(b"\r\n", 1)[0] + b" "
    except OSError:
        return False
    finally:
        sock.close()


class Books:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {"sent": 0, "completed_identical": 0, "completed_different": 0,
                       "failed_cleanly": 0, "lost": 0, "cancelled": 0}
        self.faults = {"kill": 0, "stall": 0, "partition": 0, "cancel": 0, "hostile": 0}
        self.hostile_refused = 0
        self.problems = []

    def add(self, key, problem=None):
        with self.lock:
            self.counts[key] += 1
            if problem:
                self.problems.append(problem)


def client_loop(address, references, books, stop, rng_seed):
    rng = random.Random(rng_seed)
    while not stop.is_set():
        index = rng.randrange(len(PROMPTS))
        stream = rng.random() < 0.5
        books.add("sent")
        outcome, detail = run_request(address, index, stream)
        if outcome == "completed":
            if detail == references[index]:
                books.add("completed_identical")
            else:
                books.add("completed_different",
                          f"request {index} (stream={stream}): {detail!r} != {references[index]!r}")
        elif outcome == "failed":
            books.add("failed_cleanly")
            log("failed cleanly:", detail[:160])
        else:
            books.add("lost", f"request {index} (stream={stream}): {detail}")


def partition(cluster, books, stop, rng):
    link = cluster.pd_link()
    if link is None:
        books.problems.append("no P<->D link to partition")
        return
    ns, dev = link
    pause = rng.uniform(2, 6)
    log(f"fault: partition prefill/decode ({ns} {dev} down) for {pause:.1f} s")
    # A link going down takes its routes with it: put back the ones that are not the kernel's.
    routes = subprocess.run(["ip", "-n", ns, "route", "show", "dev", dev], capture_output=True,
                            text=True, check=True).stdout.splitlines()
    routes = [r.split() for r in routes if r.strip() and "proto kernel" not in r]
    subprocess.run(["ip", "-n", ns, "link", "set", dev, "down"], check=True)
    stop.wait(pause)
    subprocess.run(["ip", "-n", ns, "link", "set", dev, "up"], check=True)
    for route in routes:
        subprocess.run(["ip", "-n", ns, "route", "replace", *route, "dev", dev], check=True)
    books.faults["partition"] += 1


def fault_loop(cluster, address, books, stop, rng, kills_left, partitions):
    kinds = ["kill", "stall", "cancel", "hostile"] + (["partition"] if partitions else [])
    while not stop.wait(rng.uniform(2, 6)):
        kind = rng.choice(kinds)
        if kind == "partition":
            partition(cluster, books, stop, rng)
            continue
        workers = cluster.workers()
        if kind == "kill":
            candidates = [pid for pid, role in workers.items() if kills_left[role] > 0]
            if not candidates:
                kind = "stall"
            else:
                pid = rng.choice(candidates)
                kills_left[workers[pid]] -= 1
                log(f"fault: kill {workers[pid]} worker {pid}")
                os.kill(pid, signal.SIGKILL)
                books.faults["kill"] += 1
                continue
        if kind == "stall" and workers:
            pid = rng.choice(sorted(workers))
            pause = rng.uniform(2, 6)
            log(f"fault: stall {workers[pid]} worker {pid} for {pause:.1f} s")
            os.kill(pid, signal.SIGSTOP)
            stop.wait(pause)
            os.kill(pid, signal.SIGCONT)
            books.faults["stall"] += 1
        elif kind == "cancel":
            log("fault: a client goes away mid-stream")
            outcome, detail = run_request(address, rng.randrange(len(PROMPTS)), True, True)
            books.faults["cancel"] += 1
            books.add("cancelled" if outcome in ("cancelled", "completed") else "failed_cleanly")
        elif kind == "hostile":
            what = rng.choice(["deep-json", "bad-length", "huge-stop", "slow-body"])
            log(f"fault: hostile client ({what})")
            books.faults["hostile"] += 1
            if hostile(address, what):
                books.hostile_refused += 1
            else:
                books.problems.append(f"hostile client {what} did not get its 4xx")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=600, help="seconds of faults (600)")
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--baton", default=os.path.join(ROOT, "build", "bin", "baton"))
    parser.add_argument("--link", default="auto",
                        help="the P<->D link (baton up --link), which partitions take down: "
                             "auto (10gbit where network namespaces can be made), off, or a shape")
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()

    link = args.link
    if link == "auto":
        link = "10gbit" if namespaces_available() else ""
        if not link:
            log("no network namespaces here (needs root and `ip netns`): no partitions")
    elif link == "off":
        link = ""
    cluster = Cluster(args.baton, link)
    log(f"cluster up: http {cluster.http}, workers {cluster.metrics}")
    books = Books()
    try:
        references = []
        for i in range(len(PROMPTS)):
            outcome, text = run_request(cluster.http, i, False)
            if outcome != "completed":
                raise RuntimeError(f"fault-free request {i} did not complete: {text}")
            references.append(text)
        log("fault-free outputs recorded")

        stop = threading.Event()
        clients = [threading.Thread(target=client_loop,
                                    args=(cluster.http, references, books, stop, args.seed * 100 + c))
                   for c in range(args.clients)]
        for t in clients:
            t.start()
        kills_left = {"prefill": 3, "decode": 3}
        faults = threading.Thread(target=fault_loop,
                                  args=(cluster, cluster.http, books, stop,
                                        random.Random(args.seed), kills_left, bool(link)))
        faults.start()
        time.sleep(args.duration)
        stop.set()
        faults.join()
        for t in clients:
            t.join(timeout=REQUEST_TIMEOUT_S + 30)
        hung = sum(t.is_alive() for t in clients)
        if hung:
            books.problems.append(f"{hung} client threads still waiting after the bound")

        # The books: blocks (allow the leases and restarts a moment), crashes.
        deadline = time.time() + 60
        used = cluster.blocks_used()
        while time.time() < deadline and any(v != 0 for v in used.values()):
            time.sleep(1)
            used = cluster.blocks_used()
        leaked = {k: v for k, v in used.items() if v != 0}
        if leaked:
            books.problems.append(f"KV blocks still held (or metrics unreadable): {leaked}")
        exits = cluster.exits_logged()
        unexpected_exits = exits - books.faults["kill"]
        if unexpected_exits > 0:
            books.problems.append(f"{unexpected_exits} member exits not caused by a kill")
        if not cluster.alive():
            books.problems.append("baton up is no longer running")
        if books.counts["lost"] or books.counts["completed_different"]:
            books.problems.append("requests lost or completed with other output")
        figures = {
            "duration_s": args.duration,
            "link": link or None,
            "requests": books.counts,
            "faults": books.faults,
            "hostile_refused": books.hostile_refused,
            "member_exits": exits,
            "blocks_leaked": sum(v for v in leaked.values() if v) if leaked else 0,
            "problems": books.problems,
        }
    finally:
        cluster.stop()
    if books.problems:
        log(f"cluster log kept: {cluster.log_path}")
    else:
        shutil.rmtree(cluster.dir, ignore_errors=True)
    print(json.dumps(figures, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    return 1 if books.problems else 0


if __name__ == "__main__":
    sys.exit(main())
