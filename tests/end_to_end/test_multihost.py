"""Learner and actors on different hosts: the learner in one Linux network
namespace, two actors in another, joined only by a veth pair with their own
addresses (no shared loopback), over TLS with a bearer token, started with
the entrypoints containers use (`python -m seed_rl.learner_main`,
`python -m seed_rl.actors.main`). Needs root for `ip netns`; skipped
otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.support import ROOT, launch

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import netlab  # noqa: E402

ENV = launch.env_without("SEED_RL_TOKEN")  # the token comes from a file only
LEARNER_IP, ACTOR_IP = "10.200.0.1", "10.200.0.2"
PORT = 8686
NUM_ACTORS, ENVS_PER_ACTOR = 2, 4
LEARNER_STEPS = 40


_SKIP = netlab.netns_unavailable()
pytestmark = [
  pytest.mark.timeout(300),
  pytest.mark.skipif(_SKIP is not None, reason=_SKIP or ""),
]


class Hosts:
  """Names of the two namespaces ("hosts") and their veth ends."""

  def __init__(self):
    pid = os.getpid()
    self.learner_ns = f"seedrl-learner-{pid}"
    self.actor_ns = f"seedrl-actors-{pid}"
    # Interface names have at most 15 characters.
    self.learner_if = f"srl{pid}l"
    self.actor_if = f"srl{pid}a"

  def up(self):
    netlab.ip("netns", "add", self.learner_ns)
    netlab.ip("netns", "add", self.actor_ns)
    netlab.ip(
      "link",
      "add",
      self.learner_if,
      "netns",
      self.learner_ns,
      "type",
      "veth",
      "peer",
      "name",
      self.actor_if,
      "netns",
      self.actor_ns,
    )
    for ns, dev, ip in (
      (self.learner_ns, self.learner_if, LEARNER_IP),
      (self.actor_ns, self.actor_if, ACTOR_IP),
    ):
      netlab.ip("-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
      netlab.ip("-n", ns, "link", "set", dev, "up")
      netlab.ip("-n", ns, "link", "set", "lo", "up")

  def down(self):
    # Deleting a namespace also deletes the veth end inside it.
    for ns in (self.learner_ns, self.actor_ns):
      netlab.ip("netns", "del", ns, check=False)

  def addresses(self, ns):
    out = netlab.ip("-n", ns, "-j", "addr", "show")
    # Link-local IPv6 addresses (fe80::) come with every link; not routable.
    return {
      a["local"]
      for link in json.loads(out.stdout)
      for a in link["addr_info"]
      if a.get("scope") != "link"
    }

  def tx_bytes(self):
    """Bytes the actors' host sent through its veth end."""
    out = netlab.ip(
      "-n", self.actor_ns, "-s", "-j", "link", "show", self.actor_if
    )
    return json.loads(out.stdout)[0]["stats64"]["tx"]["bytes"]

  def ns_of(self, pid):
    """Name of the namespace process `pid` runs in (or its inode)."""
    inode = os.stat(f"/proc/{pid}/ns/net").st_ino
    for ns in (self.learner_ns, self.actor_ns):
      if os.stat(f"/run/netns/{ns}").st_ino == inode:
        return ns
    return inode


@pytest.fixture()
def hosts():
  h = Hosts()
  try:
    h.up()
    yield h
  finally:
    h.down()


@pytest.fixture()
def certs(tmp_path):
  out = tmp_path / "certs"
  subprocess.run(
    [
      "bash",
      os.path.join(ROOT, "scripts", "make_certs.sh"),
      str(out),
      "learner.test",
      LEARNER_IP,
    ],
    check=True,
    capture_output=True,
    timeout=60,
  )
  return out


def _proc_in(ns, args):
  """`python -m ARGS` inside network namespace `ns`."""
  return launch.Proc(args, ENV, prefix=["ip", "netns", "exec", ns])


def test_learner_and_actors_on_two_hosts_over_tls(hosts, certs, tmp_path):
  # The two hosts share nothing but the veth link.
  assert hosts.addresses(hosts.learner_ns) == {"127.0.0.1", "::1", LEARNER_IP}
  assert hosts.addresses(hosts.actor_ns) == {"127.0.0.1", "::1", ACTOR_IP}
  logdir = tmp_path / "run"
  learner = _proc_in(
    hosts.learner_ns,
    [
      "seed_rl.learner_main",
      "--env",
      "classic",
      "--agent",
      "vtrace",
      "--num_actors",
      str(NUM_ACTORS),
      "--envs_per_actor",
      str(ENVS_PER_ACTOR),
      # Every interface, as in a container: needs TLS and a token.
      "--server_address",
      f"0.0.0.0:{PORT}",
      "--tls_cert",
      str(certs / "learner.pem"),
      "--tls_key",
      str(certs / "learner.key"),
      "--token_file",
      str(certs / "token"),
      "--logdir",
      str(logdir),
      "--max_learner_steps",
      str(LEARNER_STEPS),
      "--gin_bindings",
      "LearnerConfig.log_every_s = 1.0",
    ],
  )
  actors = [
    _proc_in(
      hosts.actor_ns,
      [
        "seed_rl.actors.main",
        "--env",
        "classic",
        "--actor_id",
        str(i),
        "--num_envs",
        str(ENVS_PER_ACTOR),
        "--server_address",
        f"{LEARNER_IP}:{PORT}",
        "--tls_ca",
        str(certs / "ca.pem"),
        "--token_file",
        str(certs / "token"),
        "--gin_config",
        os.path.join(ROOT, "seed_rl", "classic", "gin", "vtrace.gin"),
        "--connect_timeout_s",
        "90",
        "--log_interval_s",
        "0.5",
        "--stats_file",
        str(tmp_path / f"actor{i}.json"),
      ],
    )
    for i in range(NUM_ACTORS)
  ]
  try:
    # Where each process runs, checked while all of them are up.
    deadline = time.monotonic() + 240
    while not any(s.startswith("[learner") for s in learner.lines):
      assert learner.popen.poll() is None, learner.output[-3000:]
      assert time.monotonic() < deadline, learner.output[-3000:]
      time.sleep(0.2)
    assert hosts.ns_of(learner.popen.pid) == hosts.learner_ns
    for actor in actors:
      assert actor.popen.poll() is None, actor.output[-3000:]
      assert hosts.ns_of(actor.popen.pid) == hosts.actor_ns

    # Actors exit 0 once the learner has finished (with a TLS or token
    # problem: at once, with an error).
    while learner.popen.poll() is None:
      for actor in actors:
        assert actor.popen.poll() in (None, 0), actor.output[-3000:]
      assert time.monotonic() < deadline, learner.output[-3000:]
      time.sleep(0.2)
    assert learner.wait(timeout=10) == 0, learner.output[-3000:]
    for actor in actors:
      assert actor.wait(timeout=60) == 0, actor.output[-3000:]
      assert "the learner finished training" in actor.output
  finally:
    for p in [learner] + actors:
      p.kill()

  with open(logdir / "result.json") as f:
    result = json.load(f)
  assert result["learner_steps"] >= LEARNER_STEPS
  assert result["reason"] == f"max_learner_steps {LEARNER_STEPS} reached"
  assert "INSECURE" not in learner.output
  # Both actors were served: each stepped its envs with the learner's actions.
  served = []
  for i in range(NUM_ACTORS):
    with open(tmp_path / f"actor{i}.json") as f:
      served.append(json.load(f)["env_steps"])
  assert all(s > 0 for s in served), served
  assert sum(served) <= result["env_steps"]
  # All of it crossed the veth: at least the CartPole observations (4 float32
  # per env step) left the actors' host through it.
  assert hosts.tx_bytes() > 16 * result["env_steps"]
