"""The ACER agent as the learner runtime drives it.

Data flow: `act` (inference thread) samples from pi = softmax(logits) (the
argmax for evaluation envs), stores the logits of this behaviour policy mu
in the unroll (extras['logits']: Retrace and the bias correction need
mu(a|x) for every action) and reports V(x) = sum_a pi(a|x) Q(x, a), kept by
the runtime as the bootstrap value of truncated episodes; `add_unrolls`
puts unrolls on a bounded queue. `train_step` (training thread) runs one
gradient update per call, in one compiled graph call: on the next
`batch_size` unrolls from the queue, which then enter replay (a uniform FIFO
of whole unrolls, common/replay.PrioritizedReplay with uniform=True), or,
while replay updates are owed, on `batch_size` unrolls sampled from replay.
After each on-policy update, n replay updates are owed: n ~
Poisson(replay_ratio) or the running floor of replay_ratio (ACERConfig).

With `trust_region`, an average policy network (a Polyak average of the
whole network, of which only the policy head is read) bounds each update as
in section 3.3 of the paper (loss.trust_region_gradient). Replay contents
go to checkpoints only with LearnerConfig.checkpoint_replay; else a resumed
run trains on-policy until replay holds min_replay_size unrolls again.

With LearnerConfig.training_devices every update (on-policy or replayed:
replay hands out whole unrolls as before) is data parallel
(agents/multi_device.py): the [T+1, B] batch is split along B, one shard
per device, each device computes Retrace and the (trust-region projected)
gradient of its unrolls, the shard gradients are averaged, and the optimizer
step and the average network's Polyak step are applied once to every
device's copy; the update equals the one-device update.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np
import tensorflow as tf

from seed_rl.agents import learning
from seed_rl.agents import multi_device
from seed_rl.agents import rewards as rewards_lib
from seed_rl.agents.acer import loss as loss_lib
from seed_rl.agents.acer import networks
from seed_rl.agents.acer.config import ACERConfig
from seed_rl.common import agent_api
from seed_rl.common import devices
from seed_rl.agents import distributions
from seed_rl.common import optimizers
from seed_rl.agents import target_network
from seed_rl.common.agent_api import ActInputs, ActOutputs, Agent, Unroll
from seed_rl.common.replay import PrioritizedReplay
from seed_rl.common.specs import ArraySpec
from seed_rl.common.unroll_queue import UnrollQueue

# Name of the behaviour policy's logits [B, A] in ActOutputs.extras and
# Unroll.extras.
BEHAVIOUR_LOGITS = "logits"
# Unroll fields kept in replay, each [B, T+1, ...] per stored unroll.
_REPLAY_FIELDS = (
  "observation",
  "action",
  "reward",
  "terminated",
  "truncated",
  "bootstrap_value",
  "policy_version",
)

# Trains on several devices when LearnerConfig.training_devices is set (see
# seed_rl/common/devices.py and seed_rl/agents/multi_device.py).
SUPPORTS_TRAINING_DEVICES = True


class ACERAgent(Agent):
  """ACER (discrete actions) with a replay of recent unrolls."""

  unroll_overlap = 1

  def __init__(
    self,
    observation_spec: ArraySpec,
    action_spec: ArraySpec,
    num_envs: int,
    config: Optional[ACERConfig] = None,
  ):
    super().__init__(observation_spec, action_spec, num_envs)
    _check_action_spec(action_spec)
    cfg = self.config = config if config is not None else ACERConfig()
    self.unroll_length = cfg.unroll_length
    self._distribution = distributions.for_action_spec(action_spec)
    assert action_spec.num_values is not None  # is_discrete
    self.num_actions = int(action_spec.num_values)
    # The learner's devices (default: TF's one device, no strategy).
    self._placement = devices.current()
    strategy = self._placement.strategy
    if strategy is not None:
      devices.shard_size(
        cfg.batch_size, self._placement, "ACERConfig.batch_size"
      )
    # Both networks, the optimizer and the step counter are mirrored on
    # every training device under a strategy.
    with multi_device.training_scope(strategy):
      self._build_networks()
      self._step_counter = optimizers.learner_step_counter()
      self._optimizer = learning.scheduled_optimizer(
        cfg, self._network.trainable_variables, self._step_counter
      )
    with multi_device.device_scope(self._placement.inference_device):
      self._generator = tf.random.Generator.from_seed(cfg.seed)
    self._rng = np.random.default_rng(cfg.seed)
    self._queue = UnrollQueue(
      cfg.queue_capacity or cfg.batch_size, cfg.batch_size
    )
    self._replay = PrioritizedReplay(
      cfg.replay_capacity, uniform=True, seed=cfg.seed
    )
    # Replay updates still owed since the last on-policy update, and the
    # fractional remainder of replay_ratio carried by the 'fixed' draw.
    self._owed_replay_updates = 0
    self._replay_credit = 0.0
    self._stopped = False
    self._act_fn = self._make_act_fn()
    self._train_fn = self._make_train_fn()

  def _make_network(self, name: str) -> networks.ACERNetwork:
    """A built ACERNetwork (policy and Q heads) named `name`."""
    cfg = self.config
    network = networks.ACERNetwork(
      cfg.torso,
      self.num_actions,
      cfg.head_hidden,
      shared_torso=cfg.shared_torso,
      name=name,
    )
    networks.build_network(network, self.observation_spec)
    return network

  def _build_networks(self) -> None:
    """The network and, with trust_region, its average (equal at start)."""
    self._network = self._make_network("acer_network")
    self._average = None
    if self.config.trust_region:
      self._average = self._make_network("acer_average_network")
      target_network.hard_update(
        self._network.trainable_variables, self._average.trainable_variables
      )

  # ---- Agent API ---------------------------------------------------------

  @property
  def step_counter(self) -> tf.Variable:
    return self._step_counter

  @property
  def network(self) -> networks.ACERNetwork:
    return self._network

  @property
  def average_network(self) -> Optional[networks.ACERNetwork]:
    return self._average

  @property
  def replay(self) -> PrioritizedReplay:
    return self._replay

  def act(self, inputs: ActInputs) -> ActOutputs:
    inputs = agent_api.check_act_inputs(inputs, self.observation_spec)
    action, value, logits = self._act_fn(inputs.observation, inputs.eval_mask)
    return ActOutputs(
      action=action.numpy().astype(self.action_spec.dtype, copy=False),
      value=value.numpy(),
      extras={BEHAVIOUR_LOGITS: logits.numpy()},
      core_state=(),
    )

  def greedy_policy(self) -> Tuple[agent_api.GreedyStep, bool]:
    """argmax of the policy logits, as `act` for evaluation rows."""
    network, distribution = self._network, self._distribution
    action_dtype = self.action_spec.dtype

    def step(observation, prev_action, reward, done, core):
      del prev_action, reward, done
      logits, _ = network(observation)
      return tf.cast(distribution.mode(logits)[0], action_dtype), core

    return step, False

  def add_unrolls(self, unrolls: Unroll) -> None:
    agent_api.check_unroll(
      unrolls,
      self.unroll_length,
      self.observation_spec,
      self.action_spec,
      required_extras={BEHAVIOUR_LOGITS: (self.num_actions,)},
    )
    self._queue.put(unrolls)

  def train_step(self) -> Mapping[str, float]:
    cfg = self.config
    if self._stopped:
      return {}
    replayed = (
      self._owed_replay_updates > 0 and len(self._replay) >= cfg.min_replay_size
    )
    if replayed:
      _, items, _ = self._replay.sample(cfg.batch_size)
      self._owed_replay_updates -= 1
    else:
      batch = self._queue.get_batch()
      if batch is None:
        return {}
      items = {name: getattr(batch, name) for name in _REPLAY_FIELDS}
      items[BEHAVIOUR_LOGITS] = np.asarray(
        batch.extras[BEHAVIOUR_LOGITS], np.float32
      )
      if cfg.replay_ratio > 0:
        self._replay.insert(items)
      self._owed_replay_updates = self._draw_replay_updates()
    t = self.unroll_length
    policy_lag = agent_api.policy_lag(
      self._step_counter.numpy(), items["policy_version"][:, :t]
    )
    time_major = agent_api.time_major
    metrics = self._train_fn(
      time_major(items["observation"]),
      time_major(items["action"]),
      time_major(items["reward"], np.float32),
      time_major(items["terminated"], np.bool_),
      time_major(items["truncated"], np.bool_),
      time_major(items["bootstrap_value"], np.float32),
      time_major(items[BEHAVIOUR_LOGITS], np.float32),
    )
    result = {name: float(value) for name, value in metrics.items()}
    result["acer/replay_fraction"] = float(replayed)
    result["replay/size"] = float(len(self._replay))
    result["perf/policy_lag"] = policy_lag
    result[agent_api.SAMPLES_METRIC] = float(t * cfg.batch_size)
    return result

  def _draw_replay_updates(self) -> int:
    cfg = self.config
    if cfg.replay_ratio == 0:
      return 0
    if cfg.replay_draw == "poisson":
      return int(self._rng.poisson(cfg.replay_ratio))
    self._replay_credit += cfg.replay_ratio
    owed = int(math.floor(self._replay_credit))
    self._replay_credit -= owed
    return owed

  keeps_replay = True

  def replay_state(self) -> Dict[str, Any]:
    return self._replay.state_dict()

  def load_replay_state(self, state: Mapping[str, Any]) -> None:
    self._replay.load_state_dict(state)

  def checkpoint_objects(self) -> Dict[str, Any]:
    objects: Dict[str, Any] = {
      "network": self._network,
      "optimizer": self._optimizer,
      "step": self._step_counter,
    }
    if self._average is not None:
      # Listed explicitly as in SAC: no optimizer reaches these variables.
      objects["average_network"] = self._average
      objects["average_network_variables"] = list(self._average.variables)
    return objects

  def stop(self) -> None:
    self._stopped = True
    self._queue.stop()

  # ---- compiled functions ------------------------------------------------

  def _make_act_fn(self):
    obs_spec = self.observation_spec
    network, distribution = self._network, self._distribution
    generator = self._generator
    device = self._placement.inference_device

    @tf.function(
      input_signature=[
        tf.TensorSpec((None,) + obs_spec.shape, obs_spec.dtype),
        tf.TensorSpec([None], tf.bool),
      ]
    )
    def act_fn(observation, eval_mask):
      """-> action [B], V(x) [B], behaviour logits [B, A]."""
      # With training devices, inference reads the first copy of mirrored
      # weights (or the one on LearnerConfig.inference_device).
      with multi_device.device_scope(device):
        logits, q = network(observation)
        value = tf.reduce_sum(tf.nn.softmax(logits) * q, axis=-1)
        sampled, _ = distribution.sample(logits, generator)
        greedy, _ = distribution.mode(logits)
        action = tf.where(eval_mask, greedy, sampled)
        return action, value, logits

    return act_fn

  def _make_train_fn(self):
    """The compiled update on [T+1, B] unrolls (split along B over the
    training devices when there are several)."""
    average = self._average
    compile_args = (
      self._train_signature(),
      self._loss_and_gradients,
      self._network,
      self._optimizer,
      self._step_counter,
      self._update_average if average is not None else None,
    )
    strategy = self._placement.strategy
    if strategy is not None:
      return multi_device.compile_train_fn(strategy, *compile_args)
    return learning.compile_train_fn(*compile_args)

  def _train_signature(self):
    """Input signature of the update: observation [T+1, B, ...], action,
    reward, terminated, truncated, bootstrap_value [T+1, B] and the
    behaviour logits [T+1, B, A]."""
    cfg = self.config
    obs_spec, act_spec = self.observation_spec, self.action_spec
    t1, b, a = cfg.unroll_length + 1, cfg.batch_size, self.num_actions
    return [
      tf.TensorSpec((t1, b) + obs_spec.shape, obs_spec.dtype),
      tf.TensorSpec([t1, b], act_spec.dtype),
      tf.TensorSpec([t1, b], tf.float32),
      tf.TensorSpec([t1, b], tf.bool),
      tf.TensorSpec([t1, b], tf.bool),
      tf.TensorSpec([t1, b], tf.float32),
      tf.TensorSpec([t1, b, a], tf.float32),
    ]

  def _loss_and_gradients(
    self,
    observation,
    action,
    reward,
    terminated,
    truncated,
    bootstrap_value,
    behaviour_logits,
  ):
    """Gradients of the mean loss over a time-major unroll batch (a
    device's shard of it under training devices): observation [T+1, B,
    ...], the rest [T+1, B] in the Unroll layout, behaviour_logits
    [T+1, B, A]; metrics.

    Kept in one piece: the trust region projects the policy terms'
    gradient with respect to pi inside the same tape pass that also
    differentiates the value term, so the steps share one graph.
    """
    cfg = self.config
    network, average = self._network, self._average
    reward = rewards_lib.clip_rewards(reward, cfg.reward_clipping)
    variables = network.trainable_variables
    with tf.GradientTape(persistent=average is not None) as tape:
      logits, q = networks.unroll(network, observation)
      probs = tf.nn.softmax(logits)
      terms, metrics = loss_lib.acer_loss(
        probs,
        q,
        behaviour_logits,
        action,
        reward,
        terminated,
        truncated,
        bootstrap_value,
        discount=cfg.discount,
        retrace_lambda=cfg.retrace_lambda,
        truncation_threshold=cfg.truncation_threshold,
        entropy_cost=cfg.entropy_cost,
        value_cost=cfg.value_cost,
      )
      total = terms["policy"] + terms["value"] + terms["entropy"]
      policy_objective = terms["policy"] + terms["entropy"]
    if average is None:
      return tape.gradient(total, variables), metrics
    average_logits, _ = networks.unroll(average, observation)
    loss_gradient = tape.gradient(policy_objective, probs)
    # Per step (the gradient of a mean over the shard's steps, rescaled
    # by their number), so a shard's projection is the batch's.
    adjusted, trust_metrics = loss_lib.trust_region_gradient(
      loss_gradient[:-1],
      probs[:-1],
      tf.nn.softmax(average_logits)[:-1],
      cfg.trust_region_delta,
    )
    metrics.update(trust_metrics)
    # Step T's probabilities feed no policy term (zero gradient).
    adjusted = tf.concat([adjusted, tf.zeros_like(probs[-1:])], axis=0)
    policy_gradients = tape.gradient(
      probs, variables, output_gradients=adjusted
    )
    value_gradients = tape.gradient(terms["value"], variables)
    del tape
    gradients = [_add(p, v) for p, v in zip(policy_gradients, value_gradients)]
    return gradients, metrics

  def _update_average(self) -> None:
    """The average network's Polyak step after each optimizer step."""
    cfg = self.config
    network, average = self._network, self._average
    assert average is not None
    target_network.soft_update(
      network.trainable_variables,
      average.trainable_variables,
      1.0 - cfg.average_policy_decay,
    )


def _check_action_spec(action_spec: ArraySpec) -> None:
  """Raises ValueError unless the actions are discrete scalars."""
  if not action_spec.is_discrete or action_spec.shape != ():
    raise ValueError(
      f"ACER needs a discrete scalar action spec (e.g. CartPole's), got "
      f"{action_spec.name or 'action'!r} shape {list(action_spec.shape)} "
      f"dtype {action_spec.dtype} num_values {action_spec.num_values}"
    )


def _add(a, b):
  """Sum of two gradients where either may be None (an unconnected path)."""
  if a is None:
    return b
  if b is None:
    return a
  return a + b


def create_agent(
  observation_spec: ArraySpec, action_spec: ArraySpec, num_envs: int
) -> ACERAgent:
  """Builds the agent with the gin-bound ACERConfig (discrete actions)."""
  return ACERAgent(observation_spec, action_spec, num_envs, ACERConfig())
