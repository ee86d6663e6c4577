#!/usr/bin/env python3
"""Soak: a `baton up` cluster (router, 2 prefill and 2 decode workers) under load while faults are
injected at random, bounded in time and count; then the books are checked.

Load: client threads send a fixed set of seeded, sampled requests (temperature 0.8, ignore_eos)
to the OpenAI HTTP API, streaming and not. Each request's fault-free output is recorded first,
one at a time, before any fault.

Faults, one every 2-6 s, the kinds in seeded rounds (each round every kind the run allows, in a
shuffled order, so that each is injected about as often as the others):
  kill       SIGKILL a worker, prefill and decode in turn (`baton up` restarts it; at most 3 per
             role, its limit is 5)
  stall      SIGSTOP a worker for 2-6 s, then SIGCONT (the router's --stall-timeout is 2 s)
  partition  the link between the prefill and the decode side down for 2-6 s (where network
             namespaces can be made: the cluster then runs with `link:` (baton up --link), prefill
             and decode workers in namespaces of their own joined by a veth pair)
  cancel     a streaming client that goes away after its first chunk
  hostile    a hostile HTTP client: deeply nested JSON, a body that never comes, a bad
             Content-Length, a stop string of 1 MiB; each must get its 4xx at once

The end (the script exits 1 when any fails):
  - every fault kind the run allows was injected at least --min-faults times, and took effect (a
    killed worker is gone and `baton up` logs its exit, a stalled one is stopped, a partitioned
    link is down); worker discovery found workers whenever it looked;
  - decode workers killed mid-stream made requests migrate (the router's
    baton:request_migrations_total above 0);
  - at most --max-failed-share of the requests failed, and at least --min-identical-share
    completed with their fault-free output;
  - no member exited except the ones it killed (counted from `baton up`'s log), and `baton up`
    is still serving;
  - every KV block free on every worker, prefill and decode (baton:kv_cache_blocks_used == 0 on
    each one's /metrics);
  - every request either completed with the output of its fault-free run, or failed with a
    clear status (an HTTP error with an OpenAI error body, or a stream's error event); none lost
    (no answer, or a stream cut without an end) and none with other output (which is how a lost or
    duplicated token would show).

usage: scripts/soak.py [--duration S] [--clients N] [--seed S] [--link auto|off|RATE[,DELAY]]
                       [--faults KIND,...] [--min-faults N] [--max-failed-share X]
                       [--min-identical-share X] [--baton PATH] [--json OUT]
Exits 77 (a skip) when --link names a shape and network namespaces cannot be made here.
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
FAULT_KINDS = ["kill", "stall", "partition", "cancel", "hostile"]
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

    def migrations(self):
        """The router's baton:request_migrations_total; None when it cannot be read."""
        try:
            host, port = self.http.rsplit(":", 1)
            conn = http.client.HTTPConnection(host, int(port), timeout=5)
            conn.request("GET", "/metrics")
            body = conn.getresponse().read().decode()
            conn.close()
        except OSError:
            return None
        m = re.search(r"^baton:request_migrations_total(?:\{[^}]*\})? (\S+)$", body, re.M)
        return float(m.group(1)) if m else 0.0

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


def process_state(pid):
    """The state letter of /proc/PID/stat (R, S, T stopped, Z zombie ...); None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def wait_for_state(pid, wanted, timeout=5.0):
    """Whether PID's state becomes one of `wanted` (None: gone) within `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process_state(pid) in wanted:
            return True
        time.sleep(0.02)
    return process_state(pid) in wanted


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
        self.faults = {kind: 0 for kind in FAULT_KINDS}
        self.decode_kills = 0
        self.hostile_refused = 0
        self.problems = []

    def problem(self, text):
        log("problem:", text)
        with self.lock:
            self.problems.append(text)

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
        books.problem("no P<->D link to partition")
        return
    ns, dev = link
    pause = rng.uniform(2, 6)
    log(f"fault: partition prefill/decode ({ns} {dev} down) for {pause:.1f} s")
    # A link going down takes its routes with it: put back the ones that are not the kernel's.
    routes = subprocess.run(["ip", "-n", ns, "route", "show", "dev", dev], capture_output=True,
                            text=True, check=True).stdout.splitlines()
    routes = [r.split() for r in routes if r.strip() and "proto kernel" not in r]
    subprocess.run(["ip", "-n", ns, "link", "set", dev, "down"], check=True)
    flags = subprocess.run(["ip", "-n", ns, "-o", "link", "show", "dev", dev],
                           capture_output=True, text=True).stdout
    if re.search(r"<[^>]*\bUP\b[^>]*>", flags):
        books.problem(f"partition: {dev} in {ns} is still up after 'link set down'")
    stop.wait(pause)
    subprocess.run(["ip", "-n", ns, "link", "set", dev, "up"], check=True)
    for route in routes:
        subprocess.run(["ip", "-n", ns, "route", "replace", *route, "dev", dev], check=True)
    books.faults["partition"] += 1


def fault_schedule(kinds, rng):
    """Fault kinds forever, in rounds: each round every kind once, in a shuffled order."""
    while True:
        round_ = list(kinds)
        rng.shuffle(round_)
        yield from round_


def kill(books, workers, role, kills_left, rng):
    """SIGKILLs a `role` worker (the other role's when none is left to kill); False when no
    worker may be killed any more."""
    roles = [role, "decode" if role == "prefill" else "prefill"]
    for r in roles:
        candidates = sorted(pid for pid, w in workers.items() if w == r)
        if candidates and kills_left[r] > 0:
            pid = rng.choice(candidates)
            kills_left[r] -= 1
            log(f"fault: kill {r} worker {pid}")
            os.kill(pid, signal.SIGKILL)
            books.faults["kill"] += 1
            books.decode_kills += r == "decode"
            if not wait_for_state(pid, (None, "Z", "X")):
                books.problem(f"kill: {r} worker {pid} still runs 5 s after SIGKILL")
            return True
    return False


def stall(books, workers, stop, rng):
    pid = rng.choice(sorted(workers))
    pause = rng.uniform(2, 6)
    log(f"fault: stall {workers[pid]} worker {pid} for {pause:.1f} s")
    os.kill(pid, signal.SIGSTOP)
    if not wait_for_state(pid, ("T", "t")):
        books.problem(f"stall: {workers[pid]} worker {pid} is not stopped after SIGSTOP")
    stop.wait(pause)
    os.kill(pid, signal.SIGCONT)
    books.faults["stall"] += 1


def fault_loop(cluster, address, books, stop, rng, kinds):
    kills_left = {"prefill": 3, "decode": 3}
    next_kill_role = "decode"  # killed in turn, the decode side first: it makes requests migrate
    schedule = fault_schedule(kinds, rng)
    while not stop.wait(rng.uniform(2, 6)):
        kind = next(schedule)
        if kind == "partition":
            partition(cluster, books, stop, rng)
            continue
        if kind in ("kill", "stall"):
            workers = cluster.workers()
            if not workers:
                books.problem(f"{kind}: discovery found no worker process of baton up "
                              f"(pid {cluster.proc.pid})")
                continue
            if kind == "kill" and kill(books, workers, next_kill_role, kills_left, rng):
                next_kill_role = "prefill" if next_kill_role == "decode" else "decode"
            else:
                stall(books, workers, stop, rng)
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
                books.problem(f"hostile client {what} did not get its 4xx")


def check_books(books, cluster, kinds, args):
    """The end's checks on what was injected and what came of it, into books.problems; returns
    (member exits logged, requests migrated)."""
    for kind in kinds:
        if books.faults[kind] < args.min_faults:
            books.problem(f"fault kind '{kind}' injected {books.faults[kind]} times, fewer than "
                          f"--min-faults {args.min_faults}")
    deadline = time.time() + 10  # a kill just before the end: baton up logs the exit shortly
    exits = cluster.exits_logged()
    while exits < books.faults["kill"] and time.time() < deadline:
        time.sleep(0.2)
        exits = cluster.exits_logged()
    if exits > books.faults["kill"]:
        books.problem(f"{exits - books.faults['kill']} member exits not caused by a kill")
    elif exits < books.faults["kill"]:
        books.problem(f"{books.faults['kill'] - exits} kills that no member exit in baton up's "
                      f"log shows")
    migrations = cluster.migrations()
    if books.decode_kills and not migrations:
        books.problem(f"{books.decode_kills} decode workers killed mid-stream, and no request "
                      f"migrated (baton:request_migrations_total {migrations})")
    counts = books.counts
    finished = counts["completed_identical"] + counts["completed_different"] + \
        counts["failed_cleanly"] + counts["lost"]
    if finished == 0:
        books.problem("no request finished")
        return exits, migrations
    if counts["failed_cleanly"] > args.max_failed_share * finished:
        books.problem(f"{counts['failed_cleanly']} of {finished} requests failed, more than "
                      f"--max-failed-share {args.max_failed_share}")
    if counts["completed_identical"] < args.min_identical_share * finished:
        books.problem(f"{counts['completed_identical']} of {finished} requests completed with "
                      f"their fault-free output, fewer than --min-identical-share "
                      f"{args.min_identical_share}")
    return exits, migrations


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=600, help="seconds of faults (600)")
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--baton", default=os.path.join(ROOT, "build", "bin", "baton"))
    parser.add_argument("--link", default="auto",
                        help="the P<->D link (baton up --link), which partitions take down: "
                             "auto (10gbit where network namespaces can be made), off, or a shape")
    parser.add_argument("--faults", default=",".join(FAULT_KINDS),
                        help="the fault kinds to inject (default all; partition only with a link)")
    parser.add_argument("--min-faults", type=int, default=2,
                        help="each fault kind injected at least this often (2)")
    parser.add_argument("--max-failed-share", type=float, default=0.1,
                        help="at most this share of the requests may fail cleanly (0.1)")
    parser.add_argument("--min-identical-share", type=float, default=0.85,
                        help="at least this share completes with its fault-free output (0.85)")
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()

    kinds = [k for k in args.faults.split(",") if k]
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown:
        parser.error(f"--faults: {unknown} not among {FAULT_KINDS}")
    link = args.link
    if link == "auto":
        link = "10gbit" if namespaces_available() else ""
        if not link:
            log("no network namespaces here (needs root and `ip netns`): no partitions")
    elif link == "off":
        link = ""
    elif not namespaces_available():
        log(f"SKIPPED: --link {link} needs network namespaces (root and `ip netns`)")
        return 77
    if not link and "partition" in kinds:
        kinds.remove("partition")
    log(f"fault kinds: {', '.join(kinds)}")
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
        faults = threading.Thread(target=fault_loop,
                                  args=(cluster, cluster.http, books, stop,
                                        random.Random(args.seed), kinds))
        faults.start()
        time.sleep(args.duration)
        stop.set()
        faults.join()
        for t in clients:
            t.join(timeout=REQUEST_TIMEOUT_S + 30)
        hung = sum(t.is_alive() for t in clients)
        if hung:
            books.problem(f"{hung} client threads still waiting after the bound")

        # The books: blocks (allow the leases and restarts a moment), crashes.
        deadline = time.time() + 60
        used = cluster.blocks_used()
        while time.time() < deadline and any(v != 0 for v in used.values()):
            time.sleep(1)
            used = cluster.blocks_used()
        leaked = {k: v for k, v in used.items() if v != 0}
        if leaked:
            books.problem(f"KV blocks still held (or metrics unreadable): {leaked}")
        exits, migrations = check_books(books, cluster, kinds, args)
        if not cluster.alive():
            books.problem("baton up is no longer running")
        if books.counts["lost"] or books.counts["completed_different"]:
            books.problem("requests lost or completed with other output")
        figures = {
            "duration_s": args.duration,
            "link": link or None,
            "requests": books.counts,
            "fault_kinds": kinds,
            "faults": books.faults,
            "decode_kills": books.decode_kills,
            "migrations": migrations,
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
