"""DQN, R2D2, SAC and TD3 trained on 2 logical CPUs and on one, from the
same weights on the same batches fed to the compiled training step directly
(no replay sampling); run by test_offpolicy.py through harness.py."""

from __future__ import annotations

import sys

from tests.multi_device import harness

tf = harness.split_cpu()

import numpy as np  # noqa: E402

import keras  # noqa: E402

from seed_rl import registry  # noqa: E402
from seed_rl.agents import multi_device  # noqa: E402
from seed_rl.agents.dqn.agent import DQNAgent  # noqa: E402
from seed_rl.agents.dqn.config import DQNConfig  # noqa: E402
from seed_rl.agents.r2d2.agent import R2D2Agent  # noqa: E402
from seed_rl.agents.r2d2.config import R2D2Config  # noqa: E402
from seed_rl.agents.sac.agent import SACAgent  # noqa: E402
from seed_rl.agents.sac.config import SACConfig  # noqa: E402
from seed_rl.agents.td3.agent import TD3Agent  # noqa: E402
from seed_rl.agents.td3.config import TD3Config  # noqa: E402
from seed_rl.networks import mlp_torso  # noqa: E402
from seed_rl.common import devices  # noqa: E402
from seed_rl.common import optimizers  # noqa: E402
from seed_rl.agents import target_network  # noqa: E402
from seed_rl.common.specs import ArraySpec  # noqa: E402

OBS = ArraySpec((4,), "float32", "observation")
DISCRETE = ArraySpec((), "int32", "action", num_values=3)
BOX = ArraySpec(
  (2,), "float32", "action", minimum=np.asarray(-2.0), maximum=np.asarray(2.0)
)
TWO_CPUS = harness.TWO_CPUS
STEPS = 3

# Adam's step lr m / (sqrt(v) + eps) hardly depends on the gradient's scale
# for eps << |g|; with eps = 1 and small gradients it is ~ lr g, so a wrong
# reduction (a sum, one shard's gradient) moves the weights differently.
# No clip either (it would rescale any gradient to the same norm).
SCALE_SENSITIVE = dict(optimizer_epsilon=1.0, max_grad_norm=None)


def variables(agent):
  """Every variable of the networks and optimizers that training changes or
  reads, in a fixed order (NoisyNet noise, log alpha and slots included)."""
  if isinstance(agent, (DQNAgent, R2D2Agent)):
    nets = [agent.online_network, agent.target_network]
    opts = [agent._optimizer]
    extra = []
  elif isinstance(agent, SACAgent):
    nets = [agent.policy, *agent.critics, *agent.target_critics]
    opts = list(agent._optimizers)
    extra = [agent.log_alpha]
  else:
    nets = [agent.actor, agent.target_actor]
    nets += [*agent.critics, *agent.target_critics]
    opts = list(agent._optimizers)
    extra = []
  out = [optimizers.tf_variable(v) for n in nets for v in n.variables]
  for o in opts:
    out += [*o.slots, o.iterations]
  return out + extra


def copy_weights(single, multi):
  pairs = zip(variables(single), variables(multi), strict=True)
  for s, m in pairs:
    m.assign(s.numpy())


def rel_diff(a, b):
  """max |a - b| / max(1, |a|): float32 summation order in another shape."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(a))))


def compare_weights(single, multi, strategy):
  weight_diff, copy_diff, copies = 0.0, 0.0, []
  pairs = zip(variables(single), variables(multi), strict=True)
  for s, m in pairs:
    weight_diff = max(weight_diff, rel_diff(s.numpy(), m.numpy()))
    local = strategy.experimental_local_results(m)
    copies.append(len(local))
    for c in local:
      copy_diff = max(
        copy_diff, float(np.abs(c.numpy() - local[0].numpy()).max())
      )
  return {
    "weight_diff": weight_diff,
    "copy_diff": copy_diff,
    "min_copies": min(copies),
    "num_variables": len(copies),
  }


def run_pair(single, multi, strategy, steps, act):
  """Trains both agents on the same batches; `steps` yields, per step, a
  function agent -> (per-item outputs or None, metrics)."""
  copy_weights(single, multi)
  metric_diff, item_diff, keys_equal = {}, 0.0, True
  for step in steps:
    (s_items, s_metrics), (m_items, m_metrics) = step(single), step(multi)
    keys_equal &= set(s_metrics) == set(m_metrics)
    for name, value in s_metrics.items():
      d = rel_diff(value, m_metrics[name])
      metric_diff[name] = max(metric_diff.get(name, 0.0), d)
    if s_items is not None:
      item_diff = max(item_diff, rel_diff(s_items, m_items))
  out = compare_weights(single, multi, strategy)
  out.update(
    metric_diff=metric_diff,
    metric_keys_equal=keys_equal,
    item_diff=item_diff,
    act_diff=rel_diff(act(single), act(multi)),
    steps=[
      int(single.step_counter.numpy()),
      int(multi.step_counter.numpy()),
    ],
  )
  return out


def numpy_metrics(metrics):
  return {k: float(v) for k, v in metrics.items()}


def build(cls, placement, *args):
  """One agent on one device and one on `placement`, same initial weights
  (copied in `run_pair`)."""
  keras.utils.set_random_seed(0)
  single = cls(*args)
  with devices.use(placement):
    multi = cls(*args)
  return single, multi


# ---- DQN ---------------------------------------------------------------------


def dqn(placement):
  config = DQNConfig(
    torso=lambda: mlp_torso((16,)),
    head_hidden=(8,),
    dueling=True,
    double_q=True,
    huber_delta=0.5,
    n_step=2,
    discount=0.9,
    unroll_length=5,
    batch_size=8,
    min_replay_size=8,
    replay_capacity=100,
    seed=0,
    learning_rate=0.05,
    **SCALE_SENSITIVE,
  )
  single, multi = build(DQNAgent, placement, OBS, DISCRETE, 4, config)
  rng = np.random.default_rng(1)
  b = config.batch_size
  batches = [
    (
      rng.normal(size=[b, 4]).astype(np.float32),
      rng.integers(0, 3, [b]).astype(np.int32),
      rng.normal(size=[b]).astype(np.float32),
      np.where(rng.random(b) < 0.3, 0.0, 0.81).astype(np.float32),
      rng.normal(size=[b, 4]).astype(np.float32),
      # Prioritized replay's weights: normalised by their max, unequal.
      (lambda w: w / w.max())(rng.uniform(0.2, 1.0, b)).astype(np.float32),
    )
    for _ in range(STEPS)
  ]

  def step(i):
    def run(agent):
      td_error, metrics = agent._train_fn(*batches[i])
      if i == 0:
        agent._sync_target()  # later steps bootstrap from a moved target
      return td_error.numpy(), numpy_metrics(metrics)

    return run

  obs = rng.normal(size=[8, 4]).astype(np.float32)
  return run_pair(
    single,
    multi,
    placement.strategy,
    [step(i) for i in range(STEPS)],
    lambda agent: agent._act_fn(obs)[0].numpy(),
  )


def noisy_dqn(placement):
  """NoisyNet: the noise is drawn once per step for the whole batch and
  written to every device's copy (it cannot equal the single device's
  draw: that comes from another graph's random op)."""
  config = DQNConfig(
    torso=lambda: mlp_torso((8,)),
    head_hidden=(),
    noisy="fg",
    epsilon_start=0.0,
    epsilon_end=0.0,
    n_step=1,
    unroll_length=4,
    batch_size=4,
    min_replay_size=4,
    replay_capacity=100,
    seed=0,
  )
  with devices.use(placement):
    agent = DQNAgent(OBS, DISCRETE, 4, config)
  noise = [v for v in agent.online_network.variables if not v.trainable]
  before = [v.numpy() for v in noise]
  rng = np.random.default_rng(2)
  agent._train_fn(
    rng.normal(size=[4, 4]).astype(np.float32),
    np.zeros([4], np.int32),
    np.ones([4], np.float32),
    np.full([4], 0.9, np.float32),
    rng.normal(size=[4, 4]).astype(np.float32),
    np.ones([4], np.float32),
  )
  out = compare_weights(agent, agent, placement.strategy)
  out["noise_variables"] = len(noise)
  out["noise_changed"] = all(
    float(np.abs(v.numpy() - b).max()) > 0 for v, b in zip(noise, before)
  )
  return out


# ---- R2D2 --------------------------------------------------------------------


def r2d2(placement):
  config = R2D2Config(
    torso=lambda: keras.Sequential([keras.layers.Dense(8, activation="tanh")]),
    unroll_length=8,
    burn_in=2,
    n_step=2,
    batch_size=4,
    replay_capacity=64,
    min_replay_size=4,
    lstm_units=6,
    head_hidden=(5,),
    total_learner_steps=10,
    seed=0,
    learning_rate=0.05,
    **SCALE_SENSITIVE,
  )
  single, multi = build(R2D2Agent, placement, OBS, DISCRETE, 4, config)
  rng = np.random.default_rng(3)
  t1, b = config.unroll_length + 1, config.batch_size

  def batch():
    terminated = rng.random([t1, b]) < 0.1
    truncated = (rng.random([t1, b]) < 0.1) & ~terminated
    action = rng.integers(0, 3, [t1, b]).astype(np.int32)
    return (
      rng.normal(size=[t1, b, 4]).astype(np.float32),
      np.roll(action, 1, axis=0),
      action,
      rng.normal(size=[t1, b]).astype(np.float32),
      terminated,
      truncated,
      np.where(truncated, 2.0, 0.0).astype(np.float32),
      tuple(rng.normal(size=[b, 6]).astype(np.float32) for _ in range(2)),
      (lambda w: w / w.max())(rng.uniform(0.2, 1.0, b)).astype(np.float32),
    )

  batches = [batch() for _ in range(STEPS)]

  def step(i):
    def run(agent):
      loss, priorities, metrics = agent._train_fn(*batches[i])
      if i == 0:  # as train_step does every target_update_period steps
        target_network.hard_update(
          agent.online_network.weights, agent.target_network.weights
        )
      metrics = numpy_metrics(metrics)
      metrics["returned_loss"] = float(loss)
      return priorities.numpy(), metrics

    return run

  obs = rng.normal(size=[4, 4]).astype(np.float32)
  state = [rng.normal(size=[4, 6]).astype(np.float32) for _ in range(2)]

  def act(agent):
    q, h, c = agent._act_fn(
      obs, np.zeros([4], np.int32), np.zeros([4], np.float32),
      np.zeros([4], bool), *state,
    )  # fmt: skip
    return np.concatenate([q.numpy(), h.numpy(), c.numpy()], axis=-1)

  return run_pair(
    single, multi, placement.strategy, [step(i) for i in range(STEPS)], act
  )


# ---- SAC and TD3 -------------------------------------------------------------


def continuous_batches(rng, b):
  return [
    (
      rng.normal(size=[b, 4]).astype(np.float32),
      rng.uniform(-1.0, 1.0, [b, 2]).astype(np.float32),
      rng.normal(size=[b]).astype(np.float32),
      np.where(rng.random(b) < 0.3, 0.0, 0.9).astype(np.float32),
      rng.normal(size=[b, 4]).astype(np.float32),
    )
    for _ in range(STEPS)
  ]


def off_policy_pair(cls, config, placement, seed):
  """Steps pick the train function as train_step does: with the actor
  update when step % policy_delay == 0."""
  single, multi = build(cls, placement, OBS, BOX, 4, config)
  rng = np.random.default_rng(seed)
  batches = continuous_batches(rng, config.batch_size)

  def step(i):
    def run(agent):
      train_fn = agent._train_fns[i % config.policy_delay == 0]
      return None, numpy_metrics(train_fn(*batches[i]))

    return run

  obs = rng.normal(size=[8, 4]).astype(np.float32)

  def act(agent):
    # Evaluation rows: the deterministic action; the value reads the
    # critics (SAC: at a sampled action, from an equally seeded generator).
    action, value = agent._act_fn(obs, np.ones([8], bool), tf.constant(False))
    return np.concatenate([action.numpy(), value.numpy()[:, None]], axis=-1)

  return run_pair(
    single, multi, placement.strategy, [step(i) for i in range(STEPS)], act
  )


def sac(placement):
  config = SACConfig(
    torso=lambda: mlp_torso((16,), "relu"),
    unroll_length=4,
    batch_size=16,
    min_replay_size=16,
    replay_capacity=100,
    random_steps=0,
    learning_rate=0.05,
    actor_learning_rate=0.05,
    # Two policy and temperature updates every second step.
    policy_delay=2,
    tau=0.5,
    seed=0,
    **SCALE_SENSITIVE,
  )
  return off_policy_pair(SACAgent, config, placement, 4)


def td3(placement):
  config = TD3Config(
    torso=lambda: mlp_torso((16,), "relu"),
    unroll_length=4,
    batch_size=16,
    min_replay_size=16,
    replay_capacity=100,
    random_steps=0,
    learning_rate=0.05,
    actor_learning_rate=0.05,
    policy_delay=2,
    policy_noise=0.3,
    noise_clip=0.4,  # active: some smoothing noise is clipped
    tau=0.5,
    seed=0,
    **SCALE_SENSITIVE,
  )
  return off_policy_pair(TD3Agent, config, placement, 5)


# ---- run_sharded itself --------------------------------------------------------


def sharding(placement):
  """What each replica is given and how its results come back: a [8, 3]
  batch-major and a [2, 8] time-major array; the loss mean_b(x_b . w)."""
  strategy = placement.strategy
  with strategy.scope():
    w = tf.Variable(tf.ones([3]))
  x = tf.reshape(tf.range(24, dtype=tf.float32), [8, 3])
  y = tf.reshape(tf.range(16, dtype=tf.float32), [2, 8])

  def loss_and_gradients(x, y):
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    rows = tf.shape(x)[0]
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.linalg.matvec(x, w))
    metrics = {"loss": loss, "rows": tf.cast(rows, tf.float32)}
    per_item = {
      "x": x,
      "y": tf.transpose(y),
      "replica": tf.fill([rows], replica),
    }
    return tape.gradient(loss, [w]), metrics, per_item

  @tf.function
  def run():
    with strategy.scope():
      _, gradients, metrics, per_item = multi_device.run_sharded(
        strategy, loss_and_gradients, (x, y), [w], batch_axes=(0, 1)
      )
      return gradients, metrics, per_item

  gradients, metrics, per_item = run()
  return {
    "gradient": gradients[0].numpy().tolist(),
    "want_gradient": tf.reduce_mean(x, axis=0).numpy().tolist(),
    "loss": float(metrics["loss"]),
    "want_loss": float(tf.reduce_mean(tf.reduce_sum(x, axis=1))),
    "rows": float(metrics["rows"]),
    "x_in_order": bool(np.array_equal(per_item["x"].numpy(), x.numpy())),
    "y_in_order": bool(np.array_equal(per_item["y"].numpy(), y.numpy().T)),
    "replica": per_item["replica"].numpy().tolist(),
  }


# ---- misconfiguration, learner_main --------------------------------------------


def errors(placement):
  """The messages for a batch that does not split into 2 equal shards."""
  out = {}
  with devices.use(placement):
    out["dqn"] = harness.error_message(
      lambda: DQNAgent(
        OBS, DISCRETE, 4, DQNConfig(batch_size=5, min_replay_size=5)
      )
    )
    out["r2d2"] = harness.error_message(
      lambda: R2D2Agent(
        OBS, DISCRETE, 4, R2D2Config(batch_size=5, min_replay_size=5)
      )
    )
    out["sac"] = harness.error_message(
      lambda: SACAgent(OBS, BOX, 4, SACConfig(batch_size=5, min_replay_size=5))
    )
    out["td3"] = harness.error_message(
      lambda: TD3Agent(OBS, BOX, 4, TD3Config(batch_size=5, min_replay_size=5))
    )
  return out


def main():
  # One strategy per process, as in a learner (two MirroredStrategy
  # objects in one process can mix up their collective ops).
  placement = devices.resolve(TWO_CPUS)
  out = {
    "sharding": sharding(placement),
    "dqn": dqn(placement),
    "noisy_dqn": noisy_dqn(placement),
    "r2d2": r2d2(placement),
    "sac": sac(placement),
    "td3": td3(placement),
    "errors": errors(placement),
    # What learner_main checks before it builds an agent on several devices.
    "supported": {
      name: bool(
        getattr(
          registry.agent_module(name), devices.SUPPORTED_AGENTS_ATTR, False
        )
      )
      for name in ("dqn", "r2d2", "sac", "td3", "ddpg")
    },
  }
  harness.emit(out)


if __name__ == "__main__":
  sys.exit(main())
