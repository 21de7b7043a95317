"""A learner on several devices (LearnerConfig.training_devices).

The CPU can be split into logical devices only before TensorFlow
initialises them, so the checks run once in a fresh interpreter
(vtrace_check.py, 2 logical CPUs) and report JSON; the tests
below judge it. One V-trace update on 2 devices must equal the update on one
device: the same initial weights and unrolls, the batch split along B, the
shard gradients averaged.
"""

from __future__ import annotations

from tests.multi_device import harness

import pytest

pytestmark = pytest.mark.timeout(300)

# Float32 sums in another order; a wrong reduction or shard mix-up is off by
# far more (tens of percent in the loss and weights).
TOL = 1e-5
# Means over [T, B], exactly mergeable from equal shards (all but
# value/explained_variance, documented as averaged over shards).
EXACT_METRICS = (
  "loss/policy",
  "loss/value",
  "loss/entropy",
  "loss/total",
  "policy/entropy",
  "vtrace/rho_mean",
  "vtrace/rho_clipped_fraction",
  "value/mean",
  "value/target_mean",
  "advantage/mean",
  "advantage/std",
  "grad/norm",
  "grad/norm_torso",
  "grad/norm_head",
  "opt/learning_rate",
)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
  logdir = str(tmp_path_factory.mktemp("logdir"))
  return harness.run_check(
    "vtrace_check.py", timeout=280, MULTI_DEVICE_LOGDIR=logdir
  )


@pytest.mark.parametrize("case", ["mlp", "lstm", "transition"])
def test_two_devices_update_equals_one_device(report, case):
  """mlp: Adam with an active clip; lstm: RMSProp whose step scales with the
  gradient, 2 minibatches (a [T+1, 4] batch, 2 unrolls and their LSTM start
  states per device); transition: minibatches of single steps with the
  round's targets, standardised over the whole minibatch; two updates
  each, so optimizer slots matter too."""
  r = report[case]
  assert r["steps"][0] == r["steps"][1] > 0
  assert r["copies"] == 2
  assert r["copy_diff"] == 0.0  # every device holds the same weights
  assert r["weight_diff"] < TOL
  assert r["act_diff"] < TOL  # inference reads the trained weights
  for name in EXACT_METRICS:
    assert r["metric_diff"][name] < TOL, name


def test_placement_is_described(report):
  assert report["describe"] == (
    "devices: inference on /device:CPU:0, training on /device:CPU:0, "
    "/device:CPU:1 (MirroredStrategy, 2 replicas; each batch split along B)"
  )


def test_misconfigurations_are_refused_clearly(report):
  e = report["errors"]
  assert e["indivisible"].startswith(
    "VtraceConfig.batch_size / num_minibatches (5) must be divisible by the "
    "number of LearnerConfig.training_devices (2: /device:CPU:0, "
    "/device:CPU:1)"
  )
  for key, name, option in (
    ("unknown_training", "'GPU:3'", "training_devices"),
    ("unknown_inference", "'/cpu:7'", "inference_device"),
  ):
    assert e[key].startswith(
      f"LearnerConfig.{option}: unknown device {name}; available devices: "
      "/device:CPU:0, /device:CPU:1"
    )
  assert "names a device twice" in e["twice"]
  assert e["not_a_tuple"].startswith(
    "LearnerConfig.training_devices must be a tuple of device names"
  )
  assert e["unsupported"]["code"] == 2
  assert (
    "LearnerConfig.training_devices is not supported by the "
    "'tests.plugins.toy_agent' agent" in e["unsupported"]["stderr"]
  )
