"""PPO, A2C and ACER trained on 2 logical CPUs and on one (run by
test_onpolicy.py through harness.py).

Every case trains two agents built with the same config from the same
initial weights on the same unrolls, one on TensorFlow's default device and
one under a MirroredStrategy over /cpu:0 and /cpu:1, and reports the largest
differences of their metrics, weights and acting outputs.
"""

from __future__ import annotations

import sys

from tests.multi_device import harness

tf = harness.split_cpu()

import numpy as np  # noqa: E402

from seed_rl.agents.a2c.agent import A2CAgent  # noqa: E402
from seed_rl.agents.a2c.config import A2CConfig  # noqa: E402
from seed_rl.agents.acer.agent import ACERAgent  # noqa: E402
from seed_rl.agents.acer.config import ACERConfig  # noqa: E402
from seed_rl.agents.ppo.agent import PPOAgent  # noqa: E402
from seed_rl.agents.ppo.config import PPOConfig  # noqa: E402
from seed_rl.common import devices  # noqa: E402
from seed_rl.common import optimizers  # noqa: E402
from seed_rl.common.agent_api import ActInputs, Unroll  # noqa: E402
from seed_rl.common.specs import ArraySpec  # noqa: E402

OBS_SPEC = ArraySpec((4,), "float32", "observation")
ACTION_SPEC = ArraySpec((), "int32", "action", num_values=2)
TWO_CPUS = harness.TWO_CPUS


def make_unroll(rng, batch, t1, agent):
  """Random unrolls [batch, t1] with the extras `agent` needs; rewards of
  a few units, so advantages are far from normalised."""
  terminated = rng.random([batch, t1]) < 0.1
  truncated = (rng.random([batch, t1]) < 0.1) & ~terminated
  action = rng.integers(0, 2, [batch, t1]).astype(np.int32)
  extras = {}
  if isinstance(agent, PPOAgent):
    # log mu(a|x) of a policy near uniform.
    extras["log_prob"] = np.log(
      rng.uniform(0.3, 0.7, [batch, t1]).astype(np.float32)
    )
  if isinstance(agent, ACERAgent):
    extras["logits"] = rng.normal(size=[batch, t1, 2]).astype(np.float32)
  return Unroll(
    env_ids=np.arange(batch, dtype=np.int32),
    observation=rng.normal(size=[batch, t1, 4]).astype(np.float32),
    reward=rng.normal(1.0, 2.0, size=[batch, t1]).astype(np.float32),
    terminated=terminated,
    truncated=truncated,
    bootstrap_value=np.where(truncated, 5.0, 0.0).astype(np.float32),
    prev_action=np.roll(action, 1, axis=1),
    action=action,
    value=np.zeros([batch, t1], np.float32),
    extras=extras,
    core_state=(),
    policy_version=np.zeros([batch, t1], np.int64),
  )


def compare(placement, agent_class, config, updates, unroll_batches):
  """`updates` train steps of a one-device and a two-device agent on the
  same `unroll_batches` batches of unrolls (put on both queues first)."""
  single = agent_class(OBS_SPEC, ACTION_SPEC, 8, config)
  with devices.use(placement):
    multi = agent_class(OBS_SPEC, ACTION_SPEC, 8, config)
  variables = lambda agent: (
    list(agent.network.trainable_variables)
    + (
      list(agent.average_network.trainable_variables)
      if isinstance(agent, ACERAgent) and agent.average_network is not None
      else []
    )
  )
  for s, m in zip(variables(single), variables(multi)):
    m.assign(s.numpy())
  if isinstance(single, PPOAgent):
    # The same minibatch permutations (seeded alike; set again to be sure).
    single._shuffle_rng = np.random.default_rng(1)
    multi._shuffle_rng = np.random.default_rng(1)
  rng = np.random.default_rng(0)
  for _ in range(unroll_batches):
    unroll = make_unroll(
      rng, config.batch_size, config.unroll_length + 1, single
    )
    single.add_unrolls(unroll)
    multi.add_unrolls(unroll)
  metrics = [(single.train_step(), multi.train_step()) for _ in range(updates)]
  weight_diff, copy_diff, copies = harness.variable_diffs(
    placement.strategy,
    variables(single),
    [optimizers.tf_variable(m) for m in variables(multi)],
  )
  inputs = ActInputs(
    env_ids=np.arange(8, dtype=np.int32),
    observation=rng.normal(size=[8, 4]).astype(np.float32),
    prev_action=np.zeros([8], np.int32),
    reward=np.zeros([8], np.float32),
    done=np.zeros([8], bool),
    core_state=(),
    eval_mask=np.ones([8], bool),
  )
  act_single, act_multi = single.act(inputs), multi.act(inputs)
  act_diff = harness.max_diff(act_single.value, act_multi.value)
  for name, value in act_single.extras.items():
    act_diff = max(act_diff, harness.max_diff(value, act_multi.extras[name]))
  return {
    "weight_diff": weight_diff,
    "copy_diff": copy_diff,
    "copies": copies,
    "act_diff": act_diff,
    "metric_diff": {
      k: max(abs(a[k] - b[k]) for a, b in metrics)
      for k in metrics[0][0]
      if k != "perf/policy_lag"
    },
    # The metrics of every update on one device (what was exercised).
    "metrics": [a for a, _ in metrics],
    "steps": [
      int(single.step_counter.numpy()),
      int(multi.step_counter.numpy()),
    ],
  }


def cases(placement):
  """Each config makes a wrong reduction visible: a large optimizer
  epsilon makes Adam's and RMSProp's steps scale with the gradient (update
  ~ lr g), so a summed or single-shard gradient moves the weights
  differently; grad/norm is compared too."""
  out = {}
  out["ppo"] = compare(
    placement,
    PPOAgent,
    PPOConfig(
      unroll_length=5,
      batch_size=4,
      num_epochs=2,
      num_minibatches=2,  # minibatches of 10 transitions, 5 per device
      learning_rate=0.5,
      optimizer_epsilon=1.0,
      max_grad_norm=None,
      value_clip=0.2,
      normalize_advantages=True,  # needs the whole minibatch's moments
      queue_capacity=8,
    ),
    updates=2,
    unroll_batches=2,
  )
  out["ppo_kl"] = compare(
    placement,
    PPOAgent,
    PPOConfig(
      unroll_length=5,
      batch_size=4,
      num_epochs=2,
      num_minibatches=2,
      loss="kl_penalty",
      recompute_advantages_each_epoch=True,  # targets on both devices again
      normalize_observations=True,
      learning_rate=0.5,
      optimizer_epsilon=1.0,
      optimizer_epsilon_form="paper",  # the per-step epsilon, mirrored
      max_grad_norm=0.05,  # small: the clip is active
      queue_capacity=8,
    ),
    updates=2,
    unroll_batches=2,
  )
  out["a2c"] = compare(
    placement,
    A2CAgent,
    A2CConfig(
      unroll_length=5,
      batch_size=4,
      gae_lambda=0.9,
      normalize_advantages=True,  # needs the whole batch's moments
      lr_schedule="constant",
      optimizer="rmsprop",
      learning_rate=0.5,
      optimizer_epsilon=1.0,
      max_grad_norm=None,
      queue_capacity=8,
    ),
    updates=2,
    unroll_batches=2,
  )
  # On-policy, replayed, on-policy ('fixed' ratio 1: one replay update
  # after each on-policy one), with the trust region and its average
  # network.
  out["acer"] = compare(
    placement,
    ACERAgent,
    ACERConfig(
      unroll_length=5,
      batch_size=4,
      replay_capacity=16,
      min_replay_size=4,
      replay_ratio=1.0,
      replay_draw="fixed",
      trust_region=True,
      trust_region_delta=0.01,  # small: the projection is active
      lr_schedule="constant",
      optimizer="rmsprop",
      learning_rate=0.5,
      optimizer_epsilon=1.0,
      max_grad_norm=None,
      queue_capacity=8,
    ),
    updates=3,
    unroll_batches=2,
  )
  return out


def errors(placement):
  """The messages of batches that do not split (None where nothing was
  raised)."""
  out = {}
  with devices.use(placement):
    out["ppo_batch"] = harness.error_message(
      lambda: PPOAgent(OBS_SPEC, ACTION_SPEC, 8, PPOConfig(batch_size=3))
    )
    out["ppo_minibatch"] = harness.error_message(
      lambda: PPOAgent(
        OBS_SPEC,
        ACTION_SPEC,
        8,
        PPOConfig(unroll_length=5, batch_size=2, num_minibatches=2),
      )
    )
    out["ppo_uneven"] = harness.error_message(
      lambda: PPOAgent(
        OBS_SPEC,
        ACTION_SPEC,
        8,
        PPOConfig(unroll_length=5, batch_size=2, num_minibatches=3),
      )
    )
    out["a2c"] = harness.error_message(
      lambda: A2CAgent(OBS_SPEC, ACTION_SPEC, 8, A2CConfig(batch_size=3))
    )
    out["acer"] = harness.error_message(
      lambda: ACERAgent(
        OBS_SPEC, ACTION_SPEC, 8, ACERConfig(batch_size=3, min_replay_size=3)
      )
    )
  return out


def main():
  # One strategy per process, as in a learner (two MirroredStrategy
  # objects in one process can mix up their collective ops).
  placement = devices.resolve(TWO_CPUS)
  out = cases(placement)
  out["errors"] = errors(placement)
  harness.emit(out)


if __name__ == "__main__":
  sys.exit(main())
