"""NullAgent: the real act/unroll interface, no model and no training.

`act` returns zero actions and values without TensorFlow; `add_unrolls`
counts what it is given and drops it; `train_step` only waits. Everything
the runtime does around them (state tables, frame stacks, unroll buffers,
completed-unroll hand-off) is unchanged, so the learner process's CPU per
agent step is the cost one learner pays before any model compute.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Mapping

import gin
import numpy as np
import tensorflow as tf

from seed_rl.common.agent_api import ActInputs, ActOutputs, Agent, Unroll


@gin.configurable
class NullAgent(Agent):
  """Acts with zeros; keeps no data. `unroll_length` sizes the runtime's
  unroll buffers like a real agent's would."""

  # Unrolls are taken as the runtime stores them (frames, with frame
  # stacking): what a real agent that trains on frames costs the runtime.
  trains_on_frames = True

  def __init__(
    self, observation_spec, action_spec, num_envs, unroll_length: int = 20
  ):
    super().__init__(observation_spec, action_spec, num_envs)
    self.unroll_length = unroll_length
    self._step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
    self._stop = threading.Event()
    self.unrolls_received = 0
    self._action = np.zeros((0,) + action_spec.shape, action_spec.dtype)

  @property
  def step_counter(self) -> Any:
    return self._step

  def act(self, inputs: ActInputs) -> ActOutputs:
    size = inputs.observation.shape[0]
    if self._action.shape[0] < size:  # grown once, then sliced
      self._action = np.zeros(
        (2 * size,) + self.action_spec.shape, self.action_spec.dtype
      )
      self._value = np.zeros(2 * size, np.float32)
    return ActOutputs(
      action=self._action[:size],
      value=self._value[:size],
      extras={},
      core_state=(),
    )

  def add_unrolls(self, unrolls: Unroll) -> None:
    self.unrolls_received += unrolls.batch_size

  def train_step(self) -> Mapping[str, float]:
    self._stop.wait(0.05)
    return {}

  def checkpoint_objects(self) -> Dict[str, Any]:
    return {"step": self._step}

  def stop(self) -> None:
    self._stop.set()


@gin.configurable
def create_agent(observation_spec, action_spec, num_envs) -> NullAgent:
  return NullAgent(observation_spec, action_spec, num_envs)
