"""A deterministic NumPy agent that records what the learner runtime hands
it, and the step batches the runtime tests feed it."""

import dataclasses

import numpy as np

from seed_rl.common.agent_api import ActOutputs, Agent
from seed_rl.common.specs import StepBatch


class _Counter:
  def __init__(self):
    self.value = 0

  def numpy(self):
    return self.value


class RecordingAgent(Agent):
  """Action = env id + step; value = obs sum; core state counts steps."""

  unroll_length = 3

  def __init__(self, obs_spec, action_spec, num_envs):
    super().__init__(obs_spec, action_spec, num_envs)
    self.calls, self.unrolls = [], []
    self._step = _Counter()

  def initial_core_state(self, batch_size):
    return (np.zeros((batch_size, 1), np.float32),)

  def act(self, inputs):
    # Inputs are valid only during act (agent_api.ActInputs): keep a copy.
    self.calls.append(
      dataclasses.replace(inputs, observation=np.array(inputs.observation))
    )
    obs = inputs.observation.reshape(len(inputs.env_ids), -1)
    return ActOutputs(
      action=(inputs.env_ids % 2).astype(np.int32),
      value=obs.sum(-1).astype(np.float32),
      extras={
        "logits": np.tile(inputs.env_ids[:, None], (1, 2)).astype(np.float32)
      },
      core_state=(inputs.core_state[0] + 1,),
    )

  def add_unrolls(self, unrolls):
    self.unrolls.append(unrolls)

  def train_step(self):
    return {}

  @property
  def step_counter(self):
    return self._step

  def checkpoint_objects(self):
    return {}


def step_batch(
  env_ids,
  run_ids,
  obs,
  reward=None,
  terminated=None,
  truncated=None,
  final_obs=None,
):
  """A StepBatch of one observation row per env (no episode ended)."""
  k = len(env_ids)
  obs = np.asarray(obs, np.float32).reshape(k, -1)
  return StepBatch(
    env_ids=np.asarray(env_ids, np.int32),
    run_ids=np.asarray(run_ids, np.int64),
    reward=np.asarray(reward if reward is not None else [0.0] * k, np.float32),
    terminated=np.asarray(terminated or [False] * k),
    truncated=np.asarray(truncated or [False] * k),
    observation=obs,
    final_observation=(
      np.zeros((0, obs.shape[1]), np.float32)
      if final_obs is None
      else np.asarray(final_obs, np.float32)
    ),
    episode_return=np.zeros(0, np.float32),
    episode_length=np.zeros(0, np.int32),
  )
