"""PPO, A2C and ACER on several devices (LearnerConfig.training_devices).

As test_vtrace.py for V-trace: the CPU can be split into logical
devices only before TensorFlow initialises them, so the checks run once in
a fresh interpreter (onpolicy_check.py, 2 logical CPUs)
and report JSON; the tests below judge it. Updates on 2 devices must equal
the updates on one device: the same initial weights and unrolls, every
batch (PPO: the B unrolls of the targets, then every minibatch of
transitions) split into equal shards, the shard gradients averaged, and
advantage normalisation over the whole (mini)batch.
"""

from __future__ import annotations

from tests.multi_device import harness

import pytest

pytestmark = pytest.mark.timeout(300)

# Float32 sums in another order; a wrong reduction, shard mix-up or
# per-shard normalisation is off by far more (percents of the loss, the
# weights and grad/norm).
TOL = 1e-5
# Not a mean over samples, so the average of the shards' values (see
# seed_rl/agents/multi_device.py). PPO computes it on the gathered batch.
AVERAGED_OVER_SHARDS = {
  "ppo": (),
  "ppo_kl": (),
  "a2c": ("value/explained_variance",),
  "acer": ("value/explained_variance",),
}


@pytest.fixture(scope="module")
def report():
  return harness.run_check("onpolicy_check.py", timeout=280)


@pytest.mark.parametrize("case", sorted(AVERAGED_OVER_SHARDS))
def test_two_devices_update_equals_one_device(report, case):
  """ppo: clipped loss, value clip, advantages normalised per minibatch, 2
  epochs of 2 minibatches per update; ppo_kl: KL penalty, targets
  recomputed every epoch, observation normalisation, an active gradient
  clip; a2c: GAE and normalised advantages; acer: on-policy, replayed and
  on-policy updates with the trust region. Two or three updates each, so
  optimizer slots (and ACER's average network) matter too."""
  r = report[case]
  assert r["steps"][0] == r["steps"][1] > 0
  assert r["copies"] == 2
  assert r["copy_diff"] == 0.0  # every device holds the same weights
  assert r["weight_diff"] < TOL
  assert r["act_diff"] < TOL  # inference reads the trained weights
  exact = set(r["metric_diff"]) - set(AVERAGED_OVER_SHARDS[case])
  assert "loss/total" in exact and "grad/norm" in exact
  for name in sorted(exact):
    assert r["metric_diff"][name] < TOL, name


def test_cases_exercise_what_they_claim(report):
  """The configurations reach the paths the equality is about."""
  for case in ("ppo", "ppo_kl", "a2c", "acer"):
    for m in report[case]["metrics"]:
      # Far from normalised: per-shard normalisation would show.
      assert m["advantage/std"] > 1.5, case
  for case in ("ppo", "ppo_kl"):
    for m in report[case]["metrics"]:
      assert m["ppo/epochs"] == 2.0 and m["ppo/early_stopped"] == 0.0
      assert m["policy/clip_fraction"] > 0.0
  assert report["ppo_kl"]["metrics"][-1]["ppo/kl_coef"] != 1.0  # adapted
  acer = report["acer"]["metrics"]
  assert [m["acer/replay_fraction"] for m in acer] == [0.0, 1.0, 0.0]
  assert all(m["acer/trust_region_active"] > 0.0 for m in acer)


def test_batches_that_do_not_split_are_refused_clearly(report):
  e = report["errors"]
  devices = (
    "must be divisible by the number of LearnerConfig.training_devices "
    "(2: /device:CPU:0, /device:CPU:1)"
  )
  assert e["ppo_batch"].startswith(f"PPOConfig.batch_size (3) {devices}")
  assert e["ppo_minibatch"].startswith(
    f"PPOConfig.unroll_length * batch_size / num_minibatches (5) {devices}"
  )
  assert e["ppo_uneven"].startswith(
    "PPOConfig.unroll_length * batch_size (10) must be divisible by "
    "num_minibatches (3) with LearnerConfig.training_devices"
  )
  assert e["a2c"].startswith(f"A2CConfig.batch_size (3) {devices}")
  assert e["acer"].startswith(f"ACERConfig.batch_size (3) {devices}")
