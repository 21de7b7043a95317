"""V-trace trained on 2 logical CPUs and on one (run by test_vtrace.py
through harness.py)."""

from __future__ import annotations

import contextlib
import io
import os
import sys

from tests.multi_device import harness

tf = harness.split_cpu()

import numpy as np  # noqa: E402

from seed_rl.agents.vtrace.agent import VtraceAgent  # noqa: E402
from seed_rl.agents.vtrace.config import VtraceConfig  # noqa: E402
from seed_rl import learner_main  # noqa: E402
from seed_rl.common import devices  # noqa: E402
from seed_rl.common import learner as learner_lib  # noqa: E402
from seed_rl.common import optimizers  # noqa: E402
from seed_rl.common.agent_api import ActInputs, Unroll  # noqa: E402
from seed_rl.common.specs import ArraySpec  # noqa: E402

OBS_SPEC = ArraySpec((4,), "float32", "observation")
ACTION_SPEC = ArraySpec((), "int32", "action", num_values=2)
TWO_CPUS = harness.TWO_CPUS


def make_unroll(rng, batch, t1, num_params, lstm_units):
  terminated = rng.random([batch, t1]) < 0.1
  truncated = (rng.random([batch, t1]) < 0.1) & ~terminated
  action = rng.integers(0, 2, [batch, t1]).astype(np.int32)
  core = (
    ()
    if not lstm_units
    else tuple(
      rng.normal(size=[batch, lstm_units]).astype(np.float32) for _ in range(2)
    )
  )
  return Unroll(
    env_ids=np.arange(batch, dtype=np.int32),
    observation=rng.normal(size=[batch, t1, 4]).astype(np.float32),
    reward=rng.normal(size=[batch, t1]).astype(np.float32),
    terminated=terminated,
    truncated=truncated,
    bootstrap_value=np.where(truncated, 5.0, 0.0).astype(np.float32),
    prev_action=np.roll(action, 1, axis=1),
    action=action,
    value=np.zeros([batch, t1], np.float32),
    extras={
      "logits": rng.normal(size=[batch, t1, num_params]).astype(np.float32)
    },
    core_state=core,
    policy_version=np.zeros([batch, t1], np.int64),
  )


def compare(placement, **overrides):
  """Two updates (the second uses the optimizer's slots) on the same data
  with one and with two devices, from the same initial weights."""
  kwargs = dict(
    unroll_length=5,
    batch_size=8,
    queue_capacity=8,
    lr_schedule="constant",
    learning_rate=1e-2,
    max_grad_norm=0.5,  # small: the clip is active
  )
  kwargs.update(overrides)
  config = VtraceConfig(**kwargs)
  single = VtraceAgent(OBS_SPEC, ACTION_SPEC, 8, config)
  with devices.use(placement):
    multi = VtraceAgent(OBS_SPEC, ACTION_SPEC, 8, config)
  for s, m in zip(
    single.network.trainable_variables, multi.network.trainable_variables
  ):
    m.assign(s.numpy())
  # The same minibatch permutations (each agent seeds its own).
  single._shuffle_rng = np.random.default_rng(1)
  multi._shuffle_rng = np.random.default_rng(1)
  rng = np.random.default_rng(0)
  lstm_units = config.lstm_units if config.use_lstm else 0
  metrics = []
  for _ in range(2):
    unroll = make_unroll(rng, config.batch_size, 6, 2, lstm_units)
    single.add_unrolls(unroll)
    multi.add_unrolls(unroll)
    metrics.append((single.train_step(), multi.train_step()))
  weight_diff, copy_diff, copies = harness.variable_diffs(
    placement.strategy,
    single.network.trainable_variables,
    [optimizers.tf_variable(m) for m in multi.network.trainable_variables],
  )
  obs = rng.normal(size=[8, 4]).astype(np.float32)
  inputs = ActInputs(
    env_ids=np.arange(8, dtype=np.int32),
    observation=obs,
    prev_action=np.zeros([8], np.int32),
    reward=np.zeros([8], np.float32),
    done=np.zeros([8], bool),
    core_state=single.initial_core_state(8),
    eval_mask=np.ones([8], bool),
  )
  act_single, act_multi = single.act(inputs), multi.act(inputs)
  act_diff = float(
    np.abs(act_single.extras["logits"] - act_multi.extras["logits"]).max()
  )
  metric_diff = {
    k: max(abs(a[k] - b[k]) for a, b in metrics)
    for k in metrics[0][0]
    if k != "perf/policy_lag"
  }
  return {
    "weight_diff": weight_diff,
    "copy_diff": copy_diff,
    "copies": copies,
    "act_diff": act_diff,
    "metric_diff": metric_diff,
    "steps": [
      int(single.step_counter.numpy()),
      int(multi.step_counter.numpy()),
    ],
  }


def main():
  # One strategy per process, as in a learner (two MirroredStrategy
  # objects in one process can mix up their collective ops).
  placement = devices.resolve(TWO_CPUS)
  out = {"describe": placement.describe()}
  out["mlp"] = compare(placement)
  out["lstm"] = compare(
    placement,
    use_lstm=True,
    lstm_units=8,
    optimizer="rmsprop",
    num_minibatches=2,
    # Adam and RMSProp steps hardly depend on the gradient's scale, this
    # one does (update ~ lr g for small g): a wrong reduction (a sum, or
    # one shard's gradient) moves the weights differently. No clip either.
    optimizer_epsilon=1.0,
    learning_rate=0.5,
    max_grad_norm=None,
  )
  # Minibatches of single steps (20 of the round's 40, 10 per device), the
  # advantages standardised over the whole minibatch.
  out["transition"] = compare(
    placement,
    policy_loss="clip",
    targets="round",
    minibatch_unit="transition",
    num_minibatches=2,
    normalize_advantages=True,
  )
  out["errors"] = errors(placement)
  harness.emit(out)


def errors(placement):
  """The messages of misconfigurations (None where nothing was raised)."""
  out = {}
  with devices.use(placement):
    out["indivisible"] = harness.error_message(
      lambda: VtraceAgent(
        OBS_SPEC, ACTION_SPEC, 8, VtraceConfig(batch_size=5, queue_capacity=8)
      )
    )
  out["unknown_training"] = harness.error_message(
    lambda: devices.resolve(("/cpu:0", "GPU:3"))
  )
  out["unknown_inference"] = harness.error_message(
    lambda: devices.resolve(None, "/cpu:7")
  )
  out["twice"] = harness.error_message(
    lambda: devices.resolve(("/cpu:0", "CPU:0"))
  )
  out["not_a_tuple"] = harness.error_message(
    lambda: learner_lib.LearnerConfig(training_devices="GPU:0")
  )
  # learner_main refuses an agent without multi-device training: the
  # plugin agent of tests/plugins/toy_agent, which does not set
  # SUPPORTS_TRAINING_DEVICES.
  stderr = io.StringIO()
  with contextlib.redirect_stderr(stderr):
    code = learner_main.main(
      [
        "--env",
        "classic",
        "--agent",
        "tests.plugins.toy_agent",
        "--logdir",
        os.environ["MULTI_DEVICE_LOGDIR"],
        "--gin_bindings",
        "LearnerConfig.training_devices = ('/cpu:0', '/cpu:1')",
      ]
    )
  out["unsupported"] = {"code": code, "stderr": stderr.getvalue()}
  return out


if __name__ == "__main__":
  sys.exit(main())
