"""What the queue-fed actor-critics share (A2C, PPO, V-trace).

`QueueAgent`: unrolls go on a bounded UnrollQueue (back-pressure keeps the
data on-policy up to a learner step or two); `train_step` takes the next
`batch_size` unrolls with their perf/policy_lag and reports
perf/samples_trained; the checkpoint holds the network, the optimizer and
the learner step counter.

`RawActionAgent` adds what A2C and PPO share on top: a Categorical or
Gaussian policy (clipped or tanh-squashed into a bounded Box) whose loss
re-evaluates log pi at the raw action. For continuous actions the Gaussian's
raw sample (before clip / tanh) is stored in the unroll as
extras['raw_action'], so the loss re-evaluates exactly the density the
action was drawn from (see agents/distributions.py).
"""

from __future__ import annotations

import time
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np
import tensorflow as tf

from seed_rl.agents import learning
from seed_rl.agents import multi_device
from seed_rl.common import agent_api
from seed_rl.common import devices
from seed_rl.agents import distributions
from seed_rl.common.agent_api import ActOutputs, Agent, Unroll
from seed_rl.common.unroll_queue import UnrollQueue

# observation [T+1, B, ...], raw_action [T, B, ...], then rewards,
# terminated, truncated, bootstrap_value [T, B] (`_transition_batch`).
TransitionArrays = Tuple[
  np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray
]

# Name in ActOutputs.extras / Unroll.extras (continuous actions only):
# float32 [B, D] the Gaussian sample before clip / tanh.
RAW_ACTION = "raw_action"


def step_result(
  metrics: Mapping[str, Any], policy_lag: float, samples: float
) -> Dict[str, float]:
  """A training step's metrics as floats, with perf/policy_lag and
  perf/samples_trained (`samples` transitions trained on)."""
  result = {name: float(value) for name, value in metrics.items()}
  result["perf/policy_lag"] = policy_lag
  result[agent_api.SAMPLES_METRIC] = float(samples)
  return result


class QueueAgent(Agent):
  """An actor-critic trained on batches of unrolls from a bounded queue.

  Subclasses build `_network`, `_optimizer`, `_step_counter` and call
  `_init_queue`.
  """

  unroll_overlap = 1
  _network: Any
  _optimizer: Any
  _step_counter: tf.Variable
  _queue: UnrollQueue

  def _init_queue(self, capacity: int, batch_size: int) -> None:
    self._queue = UnrollQueue(capacity, batch_size)
    # perf/queue_fill and perf/train_data_wait of the latest batch taken.
    self._queue_metrics: Dict[str, float] = {}
    self._last_take: Optional[Tuple[float, float]] = None  # (time, wait_s)

  @property
  def batch_unrolls(self) -> int:  # type: ignore[override]
    return self._queue.batch_size

  @property
  def step_counter(self) -> tf.Variable:
    return self._step_counter

  @property
  def network(self) -> Any:
    return self._network

  def _next_batch(
    self, trained_steps: Optional[int] = None
  ) -> Optional[Tuple[Unroll, float]]:
    """The next `batch_size` unrolls [B, T+1, ...] (None once stopped) and
    their perf/policy_lag over steps 0..trained_steps-1 (all by default;
    agents whose step T only bootstraps pass T)."""
    batch = self._queue.get_batch()
    if batch is None:
      return None
    self._note_queue(time.perf_counter())
    version = batch.policy_version[:, :trained_steps]
    return batch, agent_api.policy_lag(self._step_counter.numpy(), version)

  def _note_queue(self, now: float) -> None:
    """Which side binds, as of the batch just taken: the queue's fill then
    (perf/queue_fill) and the share of the time since the previous batch
    that training spent waiting for this one (perf/train_data_wait)."""
    queue = self._queue
    self._queue_metrics = {"perf/queue_fill": queue.fill_at_last_get}
    if self._last_take is not None:
      then, wait_then = self._last_take
      self._queue_metrics["perf/train_data_wait"] = min(
        1.0, (queue.consumer_wait_s - wait_then) / max(now - then, 1e-9)
      )
    self._last_take = (now, queue.consumer_wait_s)

  def _step_result(
    self, metrics: Mapping[str, Any], policy_lag: float, samples: float
  ) -> Dict[str, float]:
    """step_result plus the queue's perf/queue_fill, perf/train_data_wait."""
    result = step_result(metrics, policy_lag, samples)
    result.update(self._queue_metrics)
    return result

  def checkpoint_objects(self) -> Dict[str, Any]:
    return {
      "network": self._network,
      "optimizer": self._optimizer,
      "step": self._step_counter,
    }

  def stop(self) -> None:
    self._queue.stop()


class RawActionAgent(QueueAgent):
  """A QueueAgent whose policy is re-evaluated at the raw action (A2C, PPO).

  Subclasses call `_init_policy` before building their network.
  """

  _distribution: distributions.ActionDistribution
  _continuous: bool
  _generator: tf.random.Generator
  # Whether act_fn also returns log pi(raw action | x) (PPO stores it).
  _act_log_prob = False
  # The learner's devices (seed_rl/common/devices.py; `_init_placement`).
  _placement = devices.Placement()

  def _init_placement(self) -> None:
    """Takes the learner's placement (LearnerConfig.training_devices and
    inference_device); agents check their batch divides into its shards,
    build weights, optimizer and step counter in
    `multi_device.training_scope` and act in `multi_device.device_scope`
    of the inference device."""
    self._placement = devices.current()

  def _init_policy(self, bound_handling: str) -> None:
    """Categorical for discrete specs; a Gaussian for float32 vectors,
    kept inside a bounded Box by `bound_handling` ('tanh' or 'clip')."""
    self._distribution = distributions.for_action_spec(
      self.action_spec, bound_handling
    )
    self._continuous = not self.action_spec.is_discrete

  @property
  def distribution(self) -> distributions.ActionDistribution:
    return self._distribution

  def _act_outputs(
    self,
    action: tf.Tensor,
    raw_action: tf.Tensor,
    value: tf.Tensor,
    extras: Optional[Dict[str, np.ndarray]] = None,
  ) -> ActOutputs:
    """ActOutputs of an act_fn's action, raw action and value, each [B, ...];
    the raw action joins `extras` for continuous actions."""
    extras = dict(extras or {})
    if self._continuous:
      extras[RAW_ACTION] = raw_action.numpy()
    return ActOutputs(
      action=action.numpy().astype(self.action_spec.dtype, copy=False),
      value=value.numpy(),
      extras=extras,
      core_state=(),
    )

  def greedy_policy(self) -> Tuple[agent_api.GreedyStep, bool]:
    """The mode of the policy on `_preprocess`ed observations (PPO's
    normalised ones): argmax of the logits, or the Gaussian mean clipped
    or tanh-squashed into the Box, as `act` for evaluation rows."""
    network, distribution = self._network, self._distribution
    preprocess, action_dtype = self._preprocess, self.action_spec.dtype

    def step(observation, prev_action, reward, done, core):
      del prev_action, reward, done
      params, _ = network(preprocess(observation))
      return tf.cast(distribution.mode(params)[0], action_dtype), core

    return step, False

  def _required_extras(self) -> Dict[str, Tuple[int, ...]]:
    """Extras an unroll must carry: the raw action for continuous actions."""
    return {RAW_ACTION: self.action_spec.shape} if self._continuous else {}

  def _preprocess(self, observation: tf.Tensor) -> tf.Tensor:
    """Observations -> network inputs (PPO normalises them)."""
    return observation  # torsos cast (and scale frames) themselves

  def _make_act_fn(self):
    """act_fn(observation [B, ...], eval_mask [B]) -> env action [B, ...],
    raw action [B, ...], V(x) [B] (then log pi(raw action | x) [B] with
    `_act_log_prob`): a sample for training rows, the mode for evaluation
    rows."""
    obs_spec = self.observation_spec
    network, distribution = self._network, self._distribution
    generator, with_log_prob = self._generator, self._act_log_prob

    @tf.function(
      input_signature=[
        tf.TensorSpec((None,) + obs_spec.shape, obs_spec.dtype),
        tf.TensorSpec([None], tf.bool),
      ]
    )
    def act_fn(observation, eval_mask):
      with multi_device.device_scope(self._placement.inference_device):
        params, value = network(self._preprocess(observation))
        action, raw_action = learning.sample_actions(
          distribution, params, generator, eval_mask
        )
        if not with_log_prob:
          return action, raw_action, value
        log_prob = distribution.log_prob(params, raw_action)
        return action, raw_action, value, log_prob

    return act_fn

  def _raw_action_spec(self, leading) -> tf.TensorSpec:
    """TensorSpec of raw actions [*leading, ...]."""
    if self._continuous:
      return tf.TensorSpec(leading + self.action_spec.shape, tf.float32)
    return tf.TensorSpec(leading, self.action_spec.dtype)

  def _transition_batch(self, batch: Unroll) -> TransitionArrays:
    """Unroll [B, T+1, ...] -> time-major inputs of its T transitions.

    Returns observation [T+1, B, ...] and, for the transitions t -> t+1,
    raw_action [T, B, ...] (taken at step t), rewards, terminated,
    truncated and bootstrap_value [T, B] (stored at step t+1: SEED's layout
    puts a transition's outcome on the step it leads to, so step 0's flags
    belong to the previous unroll).
    """
    t, time_major = self.unroll_length, agent_api.time_major
    raw_action = batch.extras[RAW_ACTION] if self._continuous else batch.action
    return (
      time_major(batch.observation),
      time_major(raw_action)[:t],
      time_major(batch.reward, np.float32)[1:],
      time_major(batch.terminated, np.bool_)[1:],
      time_major(batch.truncated, np.bool_)[1:],
      time_major(batch.bootstrap_value, np.float32)[1:],
    )
