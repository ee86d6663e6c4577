"""netns_harness itself (ctest netns_harness_test): link specs, and with namespaces: reachability,
bandwidth shaping, the delay relay, partitions, and that nothing is left behind (also when the
harness's process gets SIGTERM). Exit 77 (ctest SKIP) when namespaces cannot be made here, after
the tests that need none have passed.
"""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_harness as nh  # noqa: E402

REASON = nh.unavailable_reason()
SKIP = 77


def netns_list() -> list[str]:
    return nh.run([nh.IP, "netns", "list"]).stdout.split()


class LinkSpecTest(unittest.TestCase):
    def test_parses_rate_delay_loss(self):
        self.assertEqual(nh.LinkSpec.parse("10gbit"), nh.LinkSpec(10 * 10**9, 0.0))
        spec = nh.LinkSpec.parse("1.5gbit,200us")
        self.assertEqual(spec.rate_bps, 1_500_000_000)
        self.assertAlmostEqual(spec.delay_s, 200e-6)
        self.assertEqual(nh.LinkSpec.parse("100mbit,2ms,0.5%"), nh.LinkSpec(10**8, 2e-3, 0.5))
        self.assertEqual(nh.LinkSpec.parse("none,1ms"), nh.LinkSpec(None, 1e-3))

    def test_malformed_names_the_part_and_the_flag(self):
        for text, part in (("10gb", "bandwidth '10gb'"), ("10gbit,5", "delay '5'"),
                           ("", "''"), ("0gbit", "bandwidth '0gbit'"),
                           ("1gbit,1ms,x", "loss 'x'"), ("1gbit,1ms,1%,4", "RATE")):
            with self.assertRaises(nh.HarnessError) as e:
                nh.LinkSpec.parse(text, where="cluster.yaml link")
            self.assertIn("cluster.yaml link", str(e.exception))
            self.assertIn(part, str(e.exception))


def serve_in(namespace: str, port: int, handler) -> threading.Thread:
    """A one-connection TCP server in `namespace` on 0.0.0.0:port, running handler(conn)."""
    ready = threading.Event()

    def run() -> None:
        nh._enter_namespace(namespace)
        with socket.create_server(("0.0.0.0", port), reuse_port=False) as server:
            ready.set()
            server.settimeout(20)
            conn, _ = server.accept()
            with conn:
                handler(conn)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(5)
    return thread


def connect_from(namespace: str, address: tuple[str, int], timeout: float = 5) -> socket.socket:
    """A socket made in `namespace` (by a helper thread) and connected to `address`."""
    out: list = []

    def run() -> None:
        try:
            nh._enter_namespace(namespace)
            out.append(socket.create_connection(address, timeout=timeout))
        except OSError as e:
            out.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout + 1)
    if isinstance(out[0], OSError):
        raise out[0]
    return out[0]


def sink(conn: socket.socket) -> None:
    while conn.recv(1 << 20):
        pass
    conn.sendall(b"done")


def echo(conn: socket.socket) -> None:
    while data := conn.recv(65536):
        conn.sendall(data)


@unittest.skipIf(REASON, REASON or "")
class TopologyTest(unittest.TestCase):
    def test_reachability_partition_and_cleanup(self):
        with nh.Topology.create() as t:
            self.assertIn(t.ns_prefill, netns_list())
            serve_in(t.ns_decode, 7201, echo)
            # P -> D over pd, to D's service address.
            s = connect_from(t.ns_prefill, (t.decode_host, 7201))
            s.sendall(b"ping")
            self.assertEqual(s.recv(4), b"ping")
            s.close()
            # The root namespace reaches D's service address (over rd) ...
            serve_in(t.ns_decode, 7202, echo)
            with socket.create_connection((t.decode_host, 7202), timeout=5) as r:
                r.sendall(b"root")
                self.assertEqual(r.recv(4), b"root")
            # ... and keeps reaching it while pd is down; P does not.
            t.partition()
            serve_in(t.ns_decode, 7203, echo)
            with socket.create_connection((t.decode_host, 7203), timeout=5):
                pass
            with self.assertRaises(OSError):
                connect_from(t.ns_prefill, (t.decode_host, 7203), timeout=2)
            t.heal()
            serve_in(t.ns_decode, 7206, echo)
            connect_from(t.ns_prefill, (t.decode_host, 7206)).close()
        self.assertNotIn(t.ns_prefill, netns_list())
        self.assertNotIn(t.ns_decode, netns_list())
        links = nh.run([nh.IP, "-o", "link"]).stdout
        self.assertNotIn(t.veth["rp"], links)
        self.assertNotIn(t.veth["rd"], links)

    def test_bandwidth_is_shaped(self):
        size = 25 * 10**6  # 200 Mbit: 2 s at 100 Mbit/s
        with nh.Topology.create(nh.LinkSpec.parse("100mbit")) as t:
            serve_in(t.ns_decode, 7204, sink)
            s = connect_from(t.ns_prefill, (t.decode_host, 7204))
            start = time.monotonic()
            s.sendall(b"\0" * size)
            s.shutdown(socket.SHUT_WR)
            s.settimeout(30)
            self.assertEqual(s.recv(4), b"done")
            seconds = time.monotonic() - start
            s.close()
        rate = size * 8 / seconds
        self.assertLess(rate, 1.15e8, f"{rate / 1e6:.0f} Mbit/s through a 100 Mbit/s link")
        self.assertGreater(rate, 0.5e8, f"{rate / 1e6:.0f} Mbit/s through a 100 Mbit/s link")

    def test_delay_by_netem_or_relay(self):
        delay = 0.05
        with nh.Topology.create(nh.LinkSpec.parse("1gbit,50ms")) as t:
            self.assertIn(t.delay_mode, ("netem", "relay"))
            serve_in(t.ns_decode, 7205, echo)
            t.start_relay(7205)
            s = connect_from(t.ns_prefill, (t.decode_host, 7205))
            s.settimeout(5)
            rtts = []
            for _ in range(3):
                start = time.monotonic()
                s.sendall(b"x")
                self.assertEqual(s.recv(1), b"x")
                rtts.append(time.monotonic() - start)
            s.close()
        self.assertGreaterEqual(min(rtts), 2 * delay * 0.95, rtts)
        self.assertLess(min(rtts), 2 * delay + 0.1, rtts)

    def test_sigterm_removes_everything(self):
        code = ("import sys, time; sys.path.insert(0, %r); import netns_harness as nh; "
                "t = nh.Topology.create(); print(t.ns_prefill, t.ns_decode, flush=True); "
                "time.sleep(60)") % os.path.dirname(os.path.abspath(__file__))
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        names = child.stdout.readline().split()
        self.assertEqual(len(names), 2)
        self.assertIn(names[0], netns_list())
        child.send_signal(signal.SIGTERM)
        child.wait(20)
        child.stdout.close()
        for name in names:
            self.assertNotIn(name, netns_list())

    def test_sweeps_namespaces_of_a_killed_harness(self):
        code = ("import sys, time; sys.path.insert(0, %r); import netns_harness as nh; "
                "t = nh.Topology.create(); print(t.ns_prefill, flush=True); "
                "time.sleep(60)") % os.path.dirname(os.path.abspath(__file__))
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        name = child.stdout.readline().strip()
        child.kill()
        child.wait(10)
        child.stdout.close()
        self.assertIn(name, netns_list())
        nh.Topology.create().close()  # the next harness sweeps it
        self.assertNotIn(name, netns_list())


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    if not result.wasSuccessful():
        sys.exit(1)
    if REASON:
        print(f"SKIPPED (namespace tests): {REASON}")
        sys.exit(SKIP)
