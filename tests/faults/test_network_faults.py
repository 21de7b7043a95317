"""A run across an emulated network (benchmarks/network_faults.py): the
learner on one host, two actors on each of two others, a fault on the links
while it trains. The scenarios that fit in seconds run here; the long ones
(30 s and 3-minute partitions, the 60-minute soak) are benchmarks. Needs root,
iproute2, /dev/net/tun and openssl; skipped with the reason otherwise."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.support import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import netlab  # noqa: E402
import network_faults  # noqa: E402

_SKIP = netlab.unavailable()
pytestmark = [
  pytest.mark.timeout(400),
  pytest.mark.skipif(_SKIP is not None, reason=_SKIP or ""),
]
ENVS = (
  len(network_faults.ACTOR_HOSTS)
  * network_faults.ACTORS_PER_HOST
  * network_faults.ENVS_PER_ACTOR
)


def _kept_the_run(line):
  """What every scenario must keep: training, actors, episodes, a clean exit."""
  why = json.dumps(line)  # the whole line, where pytest would cut it short
  assert line["actors_exited"] == 0, why
  assert line["actors_killed"] == 0, why  # SIGTERM ends an actor cleanly
  assert line["learner_steps_per_s"]["after"] > 0, why
  # Nothing counted twice, nothing lost: a resumed learner leaves out each
  # env's first, partly unseen episode (at most one per env; it may be one
  # the old learner counted, when the batch that ended it was resent after
  # the restart); an actor's last batch, stepped but never sent, holds at
  # most one episode per env.
  counted, uncounted = line["episodes_counted"], line["episodes_uncounted"]
  assert uncounted <= ENVS * line["learner_resumes"], why
  assert counted <= line["episodes_played"], why
  assert line["episodes_played"] <= counted + uncounted + ENVS, why
  assert line["learner_exit"]["code"] == 0, why


def test_a_partitioned_actor_host_resumes_after_it_heals():
  line = network_faults.run_scenario(
    "partition30", before=6.0, after=15.0, fault_s=6.0
  )
  _kept_the_run(line)
  why = json.dumps(line)
  # The other host went on training while actors1 was cut off.
  assert line["env_steps_per_s"]["during"]["actors0"] > 0, why
  assert line["env_steps_per_s"]["during"]["actors1"] == 0, why
  assert line["resume_s"]["actors1"] != "never", why
  assert line["resume_s"]["actors1"] < 12, why


def test_latency_and_loss_slow_the_actors_but_lose_nothing():
  line = network_faults.run_scenario(
    "latency20", before=4.0, after=4.0, fault_s=6.0
  )
  _kept_the_run(line)
  why = json.dumps(line)
  for host in network_faults.ACTOR_HOSTS:
    assert line["env_steps_per_s"]["during"][host] > 0, why


def test_a_preempted_learner_resumes_and_its_actors_reconnect():
  """SIGTERM to the learner (a cluster moving it), a new learner process on
  the same address and logdir 2 s later, the actors left running."""
  line = network_faults.run_scenario(
    "preempt", before=6.0, after=15.0, fault_s=2.0
  )
  _kept_the_run(line)
  why = json.dumps(line)
  preempted = line["preempted"]
  assert preempted["exit_code"] == 0 and preempted["exit_s"] < 30, why
  # The final checkpoint held every step trained before SIGTERM.
  assert preempted["resumed_at_step"] >= preempted["step_at_sigterm"], why
  assert line["learner_resumes"] == 1 and line["episodes_uncounted"] > 0, why
  for host in network_faults.ACTOR_HOSTS:
    assert line["resume_s"][host] != "never", why
    assert line["resume_s"][host] < 12, why
