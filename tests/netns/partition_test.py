"""A partition between prefill and decode (ctest netns_partition_test).

Router in the root namespace, a prefill worker in namespace P, a decode worker in D, the real
model. A request is served; the P<->D link goes down; a request now fails with HTTP 503 naming the
decode worker within a bounded time (not a hang), and the decode worker ends with every KV block
free; the link comes back; requests are served again, with the same text as before.

usage: partition_test.py BATON_BINARY. Exit 77 (ctest SKIP_RETURN_CODE) with the reason when this
machine cannot make network namespaces.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_cluster as nc  # noqa: E402
import netns_harness as nh  # noqa: E402

SKIP = 77
NO_WORKER_TIMEOUT_S = 3
FAIL_BOUND_S = 30       # keepalive (~10 s) + --no-worker-timeout, with room
PROMPT = {"prompt": "Hello, my name is", "max_tokens": 8, "temperature": 0}


def complete(http: str, timeout_s: float = 60) -> tuple[int, dict, float]:
    """POST /v1/completions: (HTTP status, JSON body, seconds)."""
    request = urllib.request.Request(f"http://{http}/v1/completions",
                                     data=json.dumps(PROMPT).encode(),
                                     headers={"Content-Type": "application/json"})
    start = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as r:
            return r.status, json.load(r), time.monotonic() - start
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}"), time.monotonic() - start


def wait_blocks_free(cluster: nc.NetnsCluster, worker: str, timeout_s: float = 20) -> float:
    """Polls the worker's baton:kv_cache_blocks_used until 0; returns the last value."""
    deadline = time.monotonic() + timeout_s
    used = cluster.metric(worker, "baton:kv_cache_blocks_used")
    while used != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
        used = cluster.metric(worker, "baton:kv_cache_blocks_used")
    return used


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    reason = nh.unavailable_reason()
    if reason:
        print(f"SKIPPED: {reason}")
        return SKIP
    with nh.Topology.create() as t, nc.NetnsCluster(t, sys.argv[1]) as cluster:
        cluster.start_router(["--no-worker-timeout", str(NO_WORKER_TIMEOUT_S)])
        cluster.start_worker("prefill")
        decode = cluster.start_worker("decode")
        cluster.wait_healthy()

        status, body, _ = complete(cluster.http_address)
        check(status == 200, f"before the partition: HTTP {status} {body}")
        text = body["choices"][0]["text"]
        check(body["usage"]["completion_tokens"] == PROMPT["max_tokens"], f"{body}")

        t.partition()
        status, body, seconds = complete(cluster.http_address, timeout_s=FAIL_BOUND_S + 30)
        print(f"partitioned: HTTP {status} in {seconds:.1f} s: {body}")
        check(status == 503, f"partitioned: expected 503, got {status} {body}")
        check(seconds < FAIL_BOUND_S, f"partitioned: the failure took {seconds:.1f} s")
        message = body.get("error", {}).get("message", "")
        check(decode in message, f"the error does not name the decode worker {decode}: {message}")
        for worker in ("decode[0]", "prefill[0]"):  # both sides of the failed hand-off
            used = wait_blocks_free(cluster, worker)
            check(used == 0, f"{worker} still holds {used} KV blocks after the failed request")

        t.heal()
        deadline = time.monotonic() + 30
        while True:
            status, body, _ = complete(cluster.http_address)
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        check(status == 200, f"after healing: HTTP {status} {body}")
        check(body["choices"][0]["text"] == text, f"after healing: {body} != '{text}'")
        for worker in ("decode[0]", "prefill[0]"):
            check(wait_blocks_free(cluster, worker) == 0, f"{worker} holds blocks after healing")
    leftover = [ns for ns in nh.run([nh.IP, "netns", "list"]).stdout.split()
                if ns in (t.ns_prefill, t.ns_decode)]
    check(not leftover, f"namespaces left behind: {leftover}")
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
