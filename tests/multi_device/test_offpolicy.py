"""DQN, R2D2, SAC and TD3 on several devices (LearnerConfig.training_devices).

The CPU can be split into logical devices only before TensorFlow
initialises them, so the checks run once in a fresh interpreter
(offpolicy_check.py, 2 logical CPUs) and report JSON; the
tests below judge it. Training on 2 devices must equal training on one
device: the same initial weights, the same batches fed to the compiled
step, three steps (so optimizer slots, target networks, SAC's temperature
and TD3's delayed actor all take part), the batch split along B, the shard
gradients averaged, per-item priorities back in the batch's order.
"""

from __future__ import annotations

from tests.multi_device import harness

import pytest

# Minutes under load on 2 shared cores (~35 s of CPU time).
pytestmark = pytest.mark.timeout(600)

# Relative to max(1, |value|): float32 sums in another order. A wrong
# reduction, a shard mix-up or noise drawn per device is off by far more.
TOL = 1e-5
AGENTS = ("dqn", "r2d2", "sac", "td3")
# Metrics every step of each agent reports (all means over the batch).
METRICS = {
  "dqn": (
    "loss/td",
    "q/mean",
    "q/target_mean",
    "q/td_error",
    "replay/importance_weight_mean",
  ),
  "r2d2": ("loss/td", "returned_loss", "q/mean", "q/target_mean"),
  "sac": (
    "loss/critic",
    "loss/actor",
    "loss/temperature",
    "policy/entropy",
    "sac/temperature",
    "q/target_mean",
  ),
  "td3": ("loss/critic", "loss/actor", "q/mean", "q/target_mean"),
}
COMMON_METRICS = (
  "grad/norm",
  "grad/norm_torso",
  "grad/norm_head",
  "opt/learning_rate",
  "errors/nonfinite_updates",
)


@pytest.fixture(scope="module")
def report():
  return harness.run_check("offpolicy_check.py", timeout=580)


def test_run_sharded_splits_reduces_and_gathers_in_order(report):
  """Each replica gets 4 of the 8 rows (batch axis 0 for one array, 1 for
  the other); the mean all-reduce gives the full batch's loss and gradient;
  per-item outputs come back in the batch's order."""
  r = report["sharding"]
  assert r["rows"] == 4.0
  assert r["gradient"] == r["want_gradient"]
  assert r["loss"] == r["want_loss"]
  assert r["x_in_order"] and r["y_in_order"]
  assert r["replica"] == [0, 0, 0, 0, 1, 1, 1, 1]


@pytest.mark.parametrize("agent", AGENTS)
def test_two_devices_train_like_one_device(report, agent):
  """Weights (both networks, SAC's log alpha, every optimizer's slots),
  metrics, DQN's TD errors / R2D2's priorities, and the actions and values
  acting reads from the trained weights."""
  r = report[agent]
  assert r["steps"] == [3, 3]
  # Every variable is mirrored and every copy holds the same value.
  assert r["min_copies"] == 2
  assert r["copy_diff"] == 0.0
  assert r["weight_diff"] < TOL
  assert r["act_diff"] < TOL
  assert r["item_diff"] < TOL
  assert r["metric_keys_equal"]
  for name in METRICS[agent] + COMMON_METRICS:
    assert r["metric_diff"][name] < TOL, name
  assert max(r["metric_diff"].values()) < TOL


def test_noisy_net_noise_is_the_same_on_every_device(report):
  """NoisyNet noise is drawn once per step for the whole batch and written
  to every copy (weights and noise alike)."""
  r = report["noisy_dqn"]
  assert r["noise_variables"] == 4
  assert r["noise_changed"]
  assert r["min_copies"] == 2
  assert r["copy_diff"] == 0.0


def test_indivisible_batch_is_refused(report):
  for agent, config in (
    ("dqn", "DQNConfig"),
    ("r2d2", "R2D2Config"),
    ("sac", "SACConfig"),
    ("td3", "TD3Config"),
  ):
    assert report["errors"][agent].startswith(
      f"{config}.batch_size (5) must be divisible by the number of "
      "LearnerConfig.training_devices (2: /device:CPU:0, /device:CPU:1)"
    )


def test_learner_main_accepts_the_agents(report):
  assert report["supported"] == {
    "dqn": True,
    "r2d2": True,
    "sac": True,
    "td3": True,
    "ddpg": True,
  }
