"""Hosts on an emulated network: Linux network namespaces, each linked to a
router namespace by a link whose delay, jitter, loss, reordering, rate and
partitions are set while traffic flows. Needs root, iproute2 and /dev/net/tun.

    lab = Lab(["learner", "actors0", "actors1"])
    lab.up()
    lab.shape("actors0", delay_ms=10, jitter_ms=2.5)  # each direction
    lab.partition("actors1")       # nothing in or out
    lab.heal("actors1")
    lab.down()

Host i is a namespace with one interface `wan0` (10.201.i.2/24, default
route via the router's 10.201.i.1). Linux's netem qdisc would be the usual
tool, but kernels built without it (CONFIG_NET_SCH_NETEM unset, as on the
machine these figures come from) are common in VMs, so each link is a pair of
TUN devices, one in the host and one in the router, and one process
(`python netlab.py links ...`, started by `up`) moves every IP packet
between them. It applies netem's model per direction: a packet is dropped
with probability `loss`; otherwise it leaves after `delay` plus normal
jitter (so jitter reorders, as netem's does), after the packets ahead of it
at `rate`, or at once with probability `reorder` (netem's reordering). A
partition drops every packet: sockets stay open and TCP sees silence. The
kernels' TCP stacks, gRPC and TLS are the real ones; only the wire is
emulated, and its own cost (tens of microseconds per packet) is far below
the faults it applies.
"""

from __future__ import annotations

import fcntl
import heapq
import json
import os
import random
import select
import shutil
import struct
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

_TUNSETIFF, _IFF_TUN, _IFF_NO_PI = 0x400454CA, 0x0001, 0x1000
QUEUE_LIMIT = 1000  # packets waiting per direction (netem's default limit)


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
  return subprocess.run(
    ["ip", *args], capture_output=True, text=True, check=check, timeout=30
  )


def netns_unavailable() -> Optional[str]:
  """Why network namespaces joined by veth pairs cannot be used here, or
  None (tried for real)."""
  for tool in ("ip", "openssl"):
    if shutil.which(tool) is None:
      return f"the `{tool}` command is not installed (iproute2, openssl)"
  if os.geteuid() != 0:
    return "needs root to create network namespaces (`ip netns add`)"
  probe = f"seedrl-probe-{os.getpid()}"
  out = ip("netns", "add", probe, check=False)
  if out.returncode != 0:
    return f"`ip netns add` is not permitted here: {out.stderr.strip()}"
  try:
    for what, args in (
      ("ip netns exec", ["netns", "exec", probe, "true"]),
      ("a veth pair", ["-n", probe, "link", "add", "p0", "type", "veth",
                       "peer", "p1"]),
    ):  # fmt: skip
      out = ip(*args, check=False)
      if out.returncode != 0:
        return f"{what} is not permitted here: {out.stderr.strip()}"
  finally:
    ip("netns", "del", probe, check=False)
  return None


def unavailable() -> Optional[str]:
  """Why a Lab cannot be built here, or None (tried for real)."""
  why = netns_unavailable()
  if why:
    return why
  if not os.path.exists("/dev/net/tun"):
    return "/dev/net/tun is missing (TUN devices link the hosts)"
  probe, name = f"seedrl-probe-{os.getpid()}", f"srprobe{os.getpid() % 10000}"
  ip("netns", "add", probe)
  try:
    fd = _tun(name)
    try:
      out = ip("link", "set", name, "netns", probe, check=False)
      if out.returncode != 0:
        return f"moving a TUN device is not permitted: {out.stderr.strip()}"
    finally:
      os.close(fd)
  except OSError as e:
    return f"cannot open a TUN device: {e}"
  finally:
    ip("netns", "del", probe, check=False)
  return None


def _tun(name: str) -> int:
  fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
  fcntl.ioctl(
    fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TUN | _IFF_NO_PI)
  )
  return fd


class Lab:
  """Named hosts (namespaces) behind one router; `address(name)` is a
  host's IP."""

  def __init__(self, hosts: Sequence[str]):
    tag = f"{os.getpid() % 100000}"
    self.hosts = list(hosts)
    self.router = f"seedrl-rt-{tag}"
    self.ns = {h: f"seedrl-{h}-{tag}" for h in hosts}
    # Interface names have at most 15 characters.
    self.tun = {
      h: (f"sr{tag}h{i}", f"sr{tag}r{i}") for i, h in enumerate(hosts)
    }
    self.net = {h: f"10.201.{i + 1}" for i, h in enumerate(hosts)}
    self._links: Optional[subprocess.Popen] = None

  def address(self, host: str) -> str:
    return f"{self.net[host]}.2"

  def prefix(self, host: str) -> List[str]:
    """Prepended to a command to run it on `host`."""
    return ["ip", "netns", "exec", self.ns[host]]

  def up(self) -> None:
    ip("netns", "add", self.router)
    # /proc/sys/net is the namespace's own (no sysctl binary needed).
    ip("netns", "exec", self.router, "sh", "-c",
       "echo 1 > /proc/sys/net/ipv4/ip_forward")  # fmt: skip
    ip("-n", self.router, "link", "set", "lo", "up")
    for ns in self.ns.values():
      ip("netns", "add", ns)
    pairs = [f"{self.tun[h][0]}:{self.tun[h][1]}" for h in self.hosts]
    self._links = subprocess.Popen(
      [sys.executable, os.path.abspath(__file__), "links", *pairs],
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      text=True,
    )
    assert self._links.stdout is not None
    if self._links.stdout.readline().strip() != "ready":
      raise RuntimeError("the link emulator did not start")
    for h in self.hosts:
      host_if, router_if = self.tun[h]
      ip("link", "set", host_if, "netns", self.ns[h])
      ip("link", "set", router_if, "netns", self.router)
      ip("-n", self.ns[h], "link", "set", host_if, "name", "wan0")
      ip("-n", self.ns[h], "addr", "add", f"{self.net[h]}.2/24", "dev", "wan0")
      ip("-n", self.ns[h], "link", "set", "wan0", "up")
      ip("-n", self.ns[h], "link", "set", "lo", "up")
      ip("-n", self.ns[h], "route", "add", "default", "via", f"{self.net[h]}.1")
      ip("-n", self.router, "addr", "add", f"{self.net[h]}.1/24", "dev",
         router_if)  # fmt: skip
      ip("-n", self.router, "link", "set", router_if, "up")

  def down(self) -> None:
    if self._links is not None:
      self._links.kill()
      self._links.wait(timeout=10)
    for ns in list(self.ns.values()) + [self.router]:
      ip("netns", "del", ns, check=False)

  def _set(self, host: str, **settings) -> None:
    assert self._links is not None and self._links.stdin is not None
    index = self.hosts.index(host)
    self._links.stdin.write(json.dumps({"link": index, **settings}) + "\n")
    self._links.stdin.flush()

  def shape(
    self,
    host: str,
    delay_ms: float = 0.0,
    jitter_ms: float = 0.0,
    loss_pct: float = 0.0,
    reorder_pct: float = 0.0,
    rate_mbit: Optional[float] = None,
  ) -> None:
    """Both directions of `host`'s link (replaces what was set before)."""
    self._set(
      host,
      delay_ms=delay_ms,
      jitter_ms=jitter_ms,
      loss_pct=loss_pct,
      reorder_pct=reorder_pct,
      rate_mbit=rate_mbit,
      partition=False,
    )

  def partition(self, host: str) -> None:
    """Every packet to and from `host` is dropped (its sockets stay open)."""
    self._set(host, partition=True)

  def heal(self, host: str) -> None:
    """A clean link again."""
    self.shape(host)


class _Direction:
  """One direction of a link: packets read from `src`, written to `dst`."""

  def __init__(self, src: int, dst: int):
    self.src, self.dst = src, dst
    self.queue: List[Tuple[float, int, bytes]] = []
    self.free_at = 0.0  # when the rate-limited wire is free again
    self.settings: Dict = {}

  def receive(self, packet: bytes, now: float, seq: int) -> None:
    s = self.settings
    if s.get("partition") or random.random() * 100 < s.get("loss_pct", 0):
      return
    if len(self.queue) >= QUEUE_LIMIT:
      return
    if random.random() * 100 < s.get("reorder_pct", 0):
      heapq.heappush(self.queue, (now, seq, packet))
      return
    start = now
    if s.get("rate_mbit"):
      self.free_at = max(self.free_at, now) + len(packet) * 8 / (
        s["rate_mbit"] * 1e6
      )
      start = self.free_at
    delay = s.get("delay_ms", 0) + random.gauss(
      0, s.get("jitter_ms", 0) or 1e-9
    )
    heapq.heappush(self.queue, (start + max(delay, 0) / 1000, seq, packet))

  def send_due(self, now: float) -> None:
    while self.queue and self.queue[0][0] <= now:
      _, _, packet = heapq.heappop(self.queue)
      try:
        os.write(self.dst, packet)
      except OSError:
        pass  # the device went away or its queue is full: a lost packet


def serve_links(pairs: Sequence[str]) -> None:
  """The link emulator: opens a TUN pair per link, then forwards packets and
  applies the settings read from stdin (one JSON object per line)."""
  directions: List[Tuple[_Direction, _Direction]] = []
  by_fd: Dict[int, _Direction] = {}
  for pair in pairs:
    host_if, router_if = pair.split(":")
    a, b = _tun(host_if), _tun(router_if)
    out, back = _Direction(a, b), _Direction(b, a)
    directions.append((out, back))
    by_fd[a], by_fd[b] = out, back
  lock = threading.Lock()

  def control() -> None:
    for line in sys.stdin:
      msg = json.loads(line)
      with lock:
        for d in directions[msg.pop("link")]:
          d.settings = msg

  threading.Thread(target=control, daemon=True).start()
  print("ready", flush=True)
  seq = 0
  while True:
    now = time.monotonic()
    with lock:
      due = [d.queue[0][0] for d in by_fd.values() if d.queue]
    timeout = min([0.05] + [max(0.0, t - now) for t in due])
    readable, _, _ = select.select(list(by_fd), [], [], timeout)
    now = time.monotonic()
    with lock:
      for fd in readable:
        while True:
          try:
            packet = os.read(fd, 65535)
          except BlockingIOError:
            break
          seq += 1
          by_fd[fd].receive(packet, now, seq)
      for d in by_fd.values():
        d.send_due(now)


class Proc:
  """A process whose output lines are kept with the monotonic time each
  arrived (stdout and stderr merged)."""

  def __init__(self, cmd: Sequence[str], env: Dict[str, str], cwd: str):
    self.popen = subprocess.Popen(
      list(cmd),
      env=env,
      cwd=cwd,
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
      start_new_session=True,
    )
    self.lines: List[Tuple[float, str]] = []
    self._reader = threading.Thread(target=self._read, daemon=True)
    self._reader.start()

  def _read(self) -> None:
    assert self.popen.stdout is not None
    for line in self.popen.stdout:
      self.lines.append((time.monotonic(), line.rstrip("\n")))

  @property
  def output(self) -> str:
    return "\n".join(line for _, line in self.lines)

  def _status(self, key: str) -> Optional[int]:
    try:
      with open(f"/proc/{self.popen.pid}/status") as f:
        for line in f:
          if line.startswith(key + ":"):
            return int(line.split()[1])
    except OSError:
      return None
    return None

  def rss_mib(self) -> Optional[float]:
    """Resident memory, from /proc (None once the process has gone)."""
    kib = self._status("VmRSS")
    return None if kib is None else kib / 1024

  def counts(self) -> Dict[str, Optional[int]]:
    """Threads and open fds, from /proc."""
    try:
      fds: Optional[int] = len(os.listdir(f"/proc/{self.popen.pid}/fd"))
    except OSError:
      fds = None
    return {"threads": self._status("Threads"), "fds": fds}

  def stop(self, sig: int, timeout: float) -> Optional[int]:
    """Sends `sig`; waits up to `timeout` s; kills the group if still up.
    Returns the exit code (None when killed)."""
    if self.popen.poll() is None:
      self.popen.send_signal(sig)
    try:
      code: Optional[int] = self.popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      os.killpg(self.popen.pid, 9)
      self.popen.wait(timeout=10)
      code = None
    self._reader.join(timeout=5)  # its last lines are in `lines` on return
    return code


def read_json(path: str) -> Optional[dict]:
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


if __name__ == "__main__":
  if sys.argv[1:2] == ["links"]:
    serve_links(sys.argv[2:])
