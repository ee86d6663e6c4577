"""Cluster members in their own Linux network namespaces, joined by veth pairs (stdlib only).

The topology (one `Topology`, a triangle of veth pairs):

        root namespace (router; the user's 127.0.0.1)
          | rp                  | rd
    namespace P (prefill)--pd--namespace D (decode)

* rp, rd: /30 links from the root namespace to P and to D: the router (in root, listening on
  `router_host`, the root end of rp) reaches both sides and both sides reach it.
* pd: the prefill <-> decode link that carries the KV hand-off. `shape()` limits its bandwidth
  (tc tbf on both ends) and adds a one-way delay (netem where the kernel has it, else a TCP relay
  in this process, see `DelayRelay`); `partition()` takes it down, `heal()` brings it back.
* Each side has a service address on its loopback (`prefill_host`, `decode_host`), which is what
  its workers advertise: the root namespace routes to it over rp/rd, P routes to D's over pd.
  Decode workers listen on 0.0.0.0 inside D (only root and P can reach D) and advertise
  `decode_host:PORT`, so that a delay relay in P can stand in for D's address there.

Everything is made by the harness and removed by it: namespaces named `baton-<pid>-<hex>-p|d`
(unique per harness; namespaces of a harness whose process is gone are swept at the next start),
veths named `bt<hex>..`, addresses in 10.213.N.0/24 with N chosen under a lock among the slots no
root-namespace address or route uses. `close()` (also via `with`, atexit, SIGTERM and Ctrl-C)
kills the processes left in the namespaces and deletes the namespaces, which deletes the veths.

`unavailable_reason()` says why namespaces cannot be used here (not root, no `ip`, `ip netns add`
fails), or None. `LinkSpec.parse("10gbit,200us")` reads a link shape.

Thread-safety: a Topology is used from one thread; its DelayRelay runs threads of its own.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import fcntl
import heapq
import ipaddress
import os
import re
import secrets
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Optional

IP = shutil.which("ip") or "/usr/sbin/ip"
TC = shutil.which("tc") or "/usr/sbin/tc"
COMMAND_TIMEOUT_S = 10.0       # every ip/tc command
LOCK_PATH = "/run/lock/baton-netns.lock" if os.path.isdir("/run/lock") else "/tmp/baton-netns.lock"
SUBNET_PREFIX = "10.213"       # 10.213.N.0/24, N in [0, 255], one per harness
CLONE_NEWNET = 0x40000000


class HarnessError(RuntimeError):
    """An ip/tc command failed or a setting is malformed; the message says which."""


# --- link shapes ----------------------------------------------------------------------------------

_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
_TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


@dataclass(frozen=True)
class LinkSpec:
    """A link shape: bandwidth in bit/s (None: unlimited) and one-way delay in seconds."""

    rate_bps: Optional[int] = None
    delay_s: float = 0.0
    loss_percent: float = 0.0      # netem only

    @staticmethod
    def parse(text: str, where: str = "--link") -> "LinkSpec":
        """'10gbit', '10gbit,200us', '1gbit,2ms,0.1%', 'none,5ms'. HarnessError naming `where`."""
        parts = [p.strip() for p in text.split(",")]
        if not text.strip() or len(parts) > 3:
            raise HarnessError(f"{where}: '{text}' is not RATE[,DELAY[,LOSS%]] (e.g. 10gbit,200us)")
        rate = None
        if parts[0] not in ("none", "unlimited"):
            m = re.fullmatch(r"(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|tbit)", parts[0].lower())
            if not m or float(m.group(1)) <= 0:
                raise HarnessError(f"{where}: bandwidth '{parts[0]}' is not a positive number with "
                                   f"a unit of bit, kbit, mbit, gbit, tbit (e.g. 10gbit)")
            rate = int(float(m.group(1)) * _RATE_UNITS[m.group(2)])
        delay = 0.0
        if len(parts) > 1:
            m = re.fullmatch(r"(\d+(?:\.\d+)?)(us|ms|s)", parts[1].lower())
            if not m:
                raise HarnessError(f"{where}: delay '{parts[1]}' is not a number with a unit of us, "
                                   f"ms, s (e.g. 200us)")
            delay = float(m.group(1)) * _TIME_UNITS[m.group(2)]
            if delay > 10:
                raise HarnessError(f"{where}: delay '{parts[1]}' is over 10 s")
        loss = 0.0
        if len(parts) > 2:
            m = re.fullmatch(r"(\d+(?:\.\d+)?)%", parts[2])
            if not m or float(m.group(1)) > 100:
                raise HarnessError(f"{where}: loss '{parts[2]}' is not a percentage (e.g. 0.1%)")
            loss = float(m.group(1))
        return LinkSpec(rate, delay, loss)

    def __str__(self) -> str:
        rate = "unlimited" if self.rate_bps is None else f"{self.rate_bps / 1e9:g} Gbit/s"
        text = f"{rate}, one-way delay {self.delay_s * 1e6:g} us"
        return text + (f", loss {self.loss_percent:g}%" if self.loss_percent else "")


# --- running ip / tc ------------------------------------------------------------------------------

def run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    """Runs a command (bounded); HarnessError with its stderr when it fails and `check`."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HarnessError(f"{' '.join(argv)}: {e}") from e
    if check and done.returncode != 0:
        raise HarnessError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done


def unavailable_reason() -> Optional[str]:
    """Why network namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (the harness runs ip netns add / ip link / tc)"
    if not os.path.exists(IP) or not os.path.exists(TC):
        return "the ip and tc commands (iproute2) are not installed"
    probe = f"baton-probe-{os.getpid()}-{secrets.token_hex(3)}"
    done = run([IP, "netns", "add", probe], check=False)
    if done.returncode != 0:
        return f"ip netns add fails here: {done.stderr.strip()}"
    run([IP, "netns", "del", probe], check=False)
    return None


def _netem_available(device: str, namespace: str) -> bool:
    done = run([IP, "netns", "exec", namespace, TC, "qdisc", "add", "dev", device, "root",
                "netem", "delay", "1ms"], check=False)
    if done.returncode == 0:
        run([IP, "netns", "exec", namespace, TC, "qdisc", "del", "dev", device, "root"], check=False)
    return done.returncode == 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_stale_namespaces() -> None:
    """Deletes baton-<pid>-* namespaces whose harness process is gone (killed with SIGKILL)."""
    done = run([IP, "netns", "list"], check=False)
    for line in done.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.fullmatch(r"baton-(\d+)-[0-9a-f]+-[pd]", name)
        if m and not _pid_alive(int(m.group(1))):
            _kill_namespace_processes(name)
            run([IP, "netns", "del", name], check=False)


def _kill_namespace_processes(namespace: str) -> None:
    done = run([IP, "netns", "pids", namespace], check=False)
    for pid in done.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def _used_slots() -> set[int]:
    """10.213.N.0/24 slots that a root-namespace address or route of /16 or longer overlaps
    (broader routes, e.g. 10.0.0.0/8, lose to the harness's more specific ones)."""
    text = run([IP, "-4", "-o", "addr", "show"]).stdout + run([IP, "-4", "route", "show"]).stdout
    used = set()
    for n in range(256):
        slot = ipaddress.ip_network(f"{SUBNET_PREFIX}.{n}.0/24")
        for token in re.findall(r"\d+\.\d+\.\d+\.\d+(?:/\d+)?", text):
            with contextlib.suppress(ValueError):
                net = ipaddress.ip_network(token, strict=False)
                if net.prefixlen >= 16 and net.overlaps(slot):
                    used.add(n)
                    break
    return used


# --- the topology ---------------------------------------------------------------------------------

class Topology:
    """The triangle above. Make it with `Topology.create(link)`; `close()` removes it."""

    def __init__(self) -> None:
        self.tag = secrets.token_hex(3)
        self.ns_prefill = f"baton-{os.getpid()}-{self.tag}-p"
        self.ns_decode = f"baton-{os.getpid()}-{self.tag}-d"
        self.veth = {k: f"bt{self.tag}{k}" for k in ("rp", "rP", "rd", "rD", "pP", "pD")}
        self.slot = -1
        self.link = LinkSpec()
        self.delay_mode = "none"        # "netem", "relay" or "none"
        self._relays: list[DelayRelay] = []
        self._closed = False
        self._created: list[str] = []

    # Addresses (valid once created).
    def _addr(self, host: int) -> str:
        return f"{SUBNET_PREFIX}.{self.slot}.{host}"

    @property
    def router_host(self) -> str:
        """Where the router listens (root end of rp); both sides route to it."""
        return self._addr(1)

    @property
    def prefill_host(self) -> str:
        return self._addr(17)

    @property
    def decode_host(self) -> str:
        return self._addr(18)

    @property
    def decode_link_host(self) -> str:
        """D's end of pd (what a delay relay in P dials)."""
        return self._addr(10)

    @classmethod
    def create(cls, link: Optional[LinkSpec] = None) -> "Topology":
        """Makes the namespaces, links, addresses and routes, then shapes pd with `link`.
        Removes whatever it made and raises HarnessError if any step fails."""
        t = cls()
        _install_cleanup(t)
        try:
            with open(LOCK_PATH, "a+") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # until the addresses exist: slots stay unique
                _sweep_stale_namespaces()
                free = sorted(set(range(256)) - _used_slots())
                if not free:
                    raise HarnessError(f"no free {SUBNET_PREFIX}.N.0/24 slot in the root namespace")
                t.slot = free[secrets.randbelow(len(free))]
                t._build()
            if link is not None:
                t.shape(link)
        except BaseException:
            t.close()
            raise
        return t

    def _ns(self, namespace: str, *argv: str) -> None:
        run([IP, "-n", namespace, *argv])

    def _build(self) -> None:
        v, p, d = self.veth, self.ns_prefill, self.ns_decode
        for ns in (p, d):
            run([IP, "netns", "add", ns])
            self._created.append(ns)
            self._ns(ns, "link", "set", "lo", "up")
        run([IP, "link", "add", v["rp"], "type", "veth", "peer", "name", v["rP"], "netns", p])
        run([IP, "link", "add", v["rd"], "type", "veth", "peer", "name", v["rD"], "netns", d])
        self._ns(p, "link", "add", v["pP"], "type", "veth", "peer", "name", v["pD"], "netns", d)
        a = self._addr
        run([IP, "addr", "add", f"{a(1)}/30", "dev", v["rp"]])
        run([IP, "addr", "add", f"{a(5)}/30", "dev", v["rd"]])
        self._ns(p, "addr", "add", f"{a(2)}/30", "dev", v["rP"])
        self._ns(d, "addr", "add", f"{a(6)}/30", "dev", v["rD"])
        self._ns(p, "addr", "add", f"{a(9)}/30", "dev", v["pP"])
        self._ns(d, "addr", "add", f"{a(10)}/30", "dev", v["pD"])
        self._ns(p, "addr", "add", f"{self.prefill_host}/32", "dev", "lo")
        self._ns(d, "addr", "add", f"{self.decode_host}/32", "dev", "lo")
        for dev in (v["rp"], v["rd"]):
            run([IP, "link", "set", dev, "up"])
        for ns, devs in ((p, (v["rP"], v["pP"])), (d, (v["rD"], v["pD"]))):
            for dev in devs:
                self._ns(ns, "link", "set", dev, "up")
        run([IP, "route", "add", f"{self.prefill_host}/32", "via", a(2), "dev", v["rp"]])
        run([IP, "route", "add", f"{self.decode_host}/32", "via", a(6), "dev", v["rd"]])
        self._ns(d, "route", "add", f"{self.router_host}/32", "via", a(5), "dev", v["rD"])
        self._route_prefill_to_decode()

    def _route_prefill_to_decode(self) -> None:
        """P reaches D's service address over pd (unless a relay in P stands in for it)."""
        if self.delay_mode != "relay":
            self._ns(self.ns_prefill, "route", "replace", f"{self.decode_host}/32",
                     "via", self._addr(10), "dev", self.veth["pP"])

    # Shaping and partitions.
    def shape(self, link: LinkSpec) -> None:
        """Shapes pd in both directions: tbf at link.rate_bps; delay/loss by netem when the kernel
        has it, else delay by a DelayRelay (start_relay() per decode port), loss not at all."""
        if link.delay_s > 0 or link.loss_percent > 0:
            if _netem_available(self.veth["pP"], self.ns_prefill):
                self.delay_mode = "netem"
            elif link.loss_percent > 0:
                raise HarnessError("--link: packet loss needs the kernel's netem qdisc, which this "
                                   "kernel does not have (sch_netem)")
            else:
                self.delay_mode = "relay"
                self._ns(self.ns_prefill, "route", "del", f"{self.decode_host}/32")
                self._ns(self.ns_prefill, "addr", "add", f"{self.decode_host}/32", "dev", "lo")
        self.link = link
        for ns, dev in ((self.ns_prefill, self.veth["pP"]), (self.ns_decode, self.veth["pD"])):
            self._shape_device(ns, dev, link)

    def _shape_device(self, ns: str, dev: str, link: LinkSpec) -> None:
        tc = [IP, "netns", "exec", ns, TC, "qdisc"]
        parent = ["root"]
        if link.rate_bps is not None:
            # Burst: 1 ms at the rate, at least a few 64 KiB GSO packets.
            burst = max(link.rate_bps // 8 // 1000, 4 * 65536)
            run(tc + ["add", "dev", dev, "root", "handle", "1:", "tbf", "rate",
                      str(link.rate_bps), "burst", str(burst), "latency", "100ms"])
            parent = ["parent", "1:1"]
        if self.delay_mode == "netem":
            netem = ["netem", "delay", f"{int(link.delay_s * 1e6)}us", "limit", "100000"]
            if link.loss_percent:
                netem += ["loss", f"{link.loss_percent}%"]
            run(tc + ["add", "dev", dev, *parent, "handle", "10:", *netem])

    def start_relay(self, port: int) -> None:
        """In relay mode: P's connections to decode_host:port go through a relay in P that delays
        each chunk by the link's one-way delay, to D's end of pd. No-op in other modes."""
        if self.delay_mode != "relay":
            return
        relay = DelayRelay(self.ns_prefill, (self.decode_host, port),
                           (self.decode_link_host, port), self.link.delay_s)
        self._relays.append(relay)

    def partition(self) -> None:
        """Takes pd down at both ends: P and D cannot reach each other; both reach the router."""
        self._ns(self.ns_prefill, "link", "set", self.veth["pP"], "down")
        self._ns(self.ns_decode, "link", "set", self.veth["pD"], "down")

    def heal(self) -> None:
        """Brings pd back up (and P's route to D, which went with it)."""
        self._ns(self.ns_prefill, "link", "set", self.veth["pP"], "up")
        self._ns(self.ns_decode, "link", "set", self.veth["pD"], "up")
        self._route_prefill_to_decode()

    def exec_prefix(self, namespace: str) -> list[str]:
        """argv prefix that runs a command in `namespace` (ip netns exec execs it: same pid)."""
        return [IP, "netns", "exec", namespace]

    def close(self) -> None:
        """Stops relays, kills what is left in the namespaces, deletes them (and so the veths)."""
        if self._closed:
            return
        self._closed = True
        for relay in self._relays:
            relay.close()
        for ns in self._created:
            _kill_namespace_processes(ns)
        for ns in self._created:
            run([IP, "netns", "del", ns], check=False)
        run([IP, "link", "del", self.veth["rp"]], check=False)  # gone with P unless P failed
        run([IP, "link", "del", self.veth["rd"]], check=False)
        _topologies.discard(self)

    def __enter__(self) -> "Topology":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_topologies: set[Topology] = set()
_handlers_installed = False


def _close_all() -> None:
    for t in list(_topologies):
        t.close()


def _install_cleanup(t: Topology) -> None:
    """atexit, and SIGTERM/SIGHUP as SystemExit (Ctrl-C is KeyboardInterrupt already), so that
    `with` blocks and atexit run on every ordinary way out."""
    global _handlers_installed
    _topologies.add(t)
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(_close_all)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, lambda s, f: (_ for _ in ()).throw(SystemExit(128 + s)))


# --- the delay relay ------------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)


def _enter_namespace(namespace: str) -> None:
    """Moves the calling thread (only) into `namespace`; sockets it creates live there."""
    fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise HarnessError(f"setns({namespace}): {os.strerror(e)}")
    finally:
        os.close(fd)


class DelayRelay:
    """A TCP relay inside `namespace`: listens on `listen`, dials `target` for each connection,
    and delivers every chunk, both ways, `delay_s` after it arrived (a one-way delay; order kept;
    bandwidth is left to tc on the link). Threads: one acceptor, two pumps per connection."""

    CHUNK = 256 * 1024

    def __init__(self, namespace: str, listen: tuple[str, int], target: tuple[str, int],
                 delay_s: float) -> None:
        self.namespace, self.target, self.delay_s = namespace, target, delay_s
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        ready: list[object] = []
        self._acceptor = threading.Thread(target=self._accept_loop, args=(listen, ready),
                                          daemon=True, name=f"relay-{listen[1]}")
        self._acceptor.start()
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        while not ready and time.monotonic() < deadline:
            time.sleep(0.01)
        if not ready or isinstance(ready[0], BaseException):
            raise HarnessError(f"delay relay on {listen}: {ready[0] if ready else 'no start'}")

    def _track(self, s: socket.socket) -> socket.socket:
        with self._lock:
            self._sockets.append(s)
        return s

    def _accept_loop(self, listen: tuple[str, int], ready: list) -> None:
        try:
            _enter_namespace(self.namespace)
            server = self._track(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(listen)
            server.listen(128)
            server.settimeout(0.2)
        except BaseException as e:  # noqa: BLE001 - reported to the constructor
            ready.append(e)
            return
        ready.append(True)
        while not self._stop.is_set():
            try:
                client, _ = server.accept()
            except (socket.timeout, OSError):
                continue
            client.settimeout(None)
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()  # the target is unreachable: so is the relay
                continue
            for s in (client, upstream):
                self._track(s).setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._pump(client, upstream)
            self._pump(upstream, client)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        """Reader: stamps chunks; writer: sends each at stamp + delay."""
        queue: list[tuple[float, int, bytes]] = []
        cond = threading.Condition()
        seq = [0]

        def reader() -> None:
            while True:
                try:
                    data = src.recv(self.CHUNK)
                except OSError:
                    data = b""
                with cond:
                    heapq.heappush(queue, (time.monotonic() + self.delay_s, seq[0], data))
                    seq[0] += 1
                    cond.notify()
                if not data:
                    return

        def writer() -> None:
            while True:
                with cond:
                    while not queue:
                        cond.wait()
                    due, _, data = queue[0]
                    wait = due - time.monotonic()
                    if wait > 0:
                        cond.wait(timeout=wait)
                        continue
                    heapq.heappop(queue)
                try:
                    if not data:
                        dst.shutdown(socket.SHUT_WR)
                        return
                    dst.sendall(data)
                except OSError:
                    with contextlib.suppress(OSError):
                        src.shutdown(socket.SHUT_RDWR)
                    return

        threading.Thread(target=reader, daemon=True).start()
        threading.Thread(target=writer, daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()
        self._acceptor.join(timeout=2)
