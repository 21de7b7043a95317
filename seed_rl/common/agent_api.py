"""The contract between the learner runtime and an algorithm.

The runtime (seed_rl/common/learner.py) owns the gRPC server, the dynamic
inference batcher, per-environment state (run ids, recurrent core state,
previous action, frame stacks) and unroll assembly. An algorithm owns its
networks, what it stores (queue or replay) and how it trains.

Threads: `act` runs on the inference thread; `add_unrolls` on the inference
thread too (it may block to apply back-pressure); `train_step` runs on the
training thread, concurrently with `act`. Shapes use B for a batch of
environments and T for the unroll length (an unroll holds T+1 steps).
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Dict, Mapping, Tuple

import numpy as np

from seed_rl.common.specs import ArraySpec

CoreState = Tuple[np.ndarray, ...]  # each [B, ...]; () for feed-forward agents


@dataclasses.dataclass
class ActInputs:
  """Inputs of one batched inference call (NumPy, batch-major).

  env_ids: int32 [B] global env ids (e.g. for per-env epsilon in R2D2).
  observation: [B, *obs_shape] what the agent sees (frames already stacked).
  prev_action: [B, *action_shape] action taken before this step (zeros at an
    episode start).
  reward: float32 [B] reward of the previous transition (raw, unclipped).
  done: bool [B] this observation starts a new episode (core_state was
    already reset by the runtime for these rows).
  core_state: CoreState, each [B, ...].
  eval_mask: bool [B] rows belonging to evaluation environments (act
    greedily / deterministically there).
  """

  env_ids: np.ndarray
  observation: np.ndarray
  prev_action: np.ndarray
  reward: np.ndarray
  done: np.ndarray
  core_state: CoreState
  eval_mask: np.ndarray


@dataclasses.dataclass
class ActOutputs:
  """Outputs of one batched inference call.

  action: [B, *action_shape] in the action spec's dtype.
  value: float32 [B] the agent's value estimate of this observation (V(s) for
    actor-critics, max_a Q(s, a) for value-based agents). The runtime stores it
    as `bootstrap_value` when the observation was the final one of a
    truncated episode.
  extras: per-step arrays [B, ...] stored in unrolls under the same names
    (e.g. 'logits', 'log_prob').
  core_state: CoreState after this step, each [B, ...].
  """

  action: np.ndarray
  value: np.ndarray
  extras: Dict[str, np.ndarray]
  core_state: CoreState


@dataclasses.dataclass
class Unroll:
  """A batch of B unrolls of T+1 consecutive steps (batch-major, NumPy).

  Step 0 repeats the last `overlap` steps of the previous unroll of the same
  env (overlap=1: step 0 is the previous unroll's last step, as in SEED RL).
  Per-step fields describe step t: the observation seen, the reward and
  episode-end flags of the transition that led to it (SEED's EnvOutput), and
  the agent's output on it.

  env_ids: int32 [B].
  observation: [B, T+1, *obs_shape].
  reward: float32 [B, T+1] raw reward of the transition into step t.
  terminated: bool [B, T+1] the transition into step t ended the previous
    episode by termination (observation[t] is the next episode's first).
  truncated: bool [B, T+1] same, by truncation (time limit).
  bootstrap_value: float32 [B, T+1] where truncated[t], the behaviour value of
    the ended episode's final observation (0 elsewhere). Targets for step t-1
    bootstrap from it instead of from value(observation[t]).
  prev_action: [B, T+1, *action_shape].
  action: [B, T+1, *action_shape] action taken at step t.
  value: float32 [B, T+1] behaviour value at step t.
  extras: name -> [B, T+1, ...] from ActOutputs.extras.
  core_state: CoreState at the start of step 0 (before observation 0).
  policy_version: int64 [B, T+1] learner step whose weights acted at step t.
  """

  env_ids: np.ndarray
  observation: np.ndarray
  reward: np.ndarray
  terminated: np.ndarray
  truncated: np.ndarray
  bootstrap_value: np.ndarray
  prev_action: np.ndarray
  action: np.ndarray
  value: np.ndarray
  extras: Dict[str, np.ndarray]
  core_state: CoreState
  policy_version: np.ndarray

  @property
  def batch_size(self) -> int:
    return int(self.env_ids.shape[0])


class Agent(abc.ABC):
  """An algorithm as the learner runtime drives it.

  Constructed by its gin-configurable factory with the specs the learner
  announces (`observation_spec` is what `act` sees, after learner-side frame
  stacking) and the total number of environments.
  """

  # Unrolls carry `unroll_length + 1` steps; consecutive unrolls of one env
  # share `unroll_overlap` steps (1 for on-policy agents, burn-in + 1 or more
  # for R2D2-style sequence replay).
  unroll_length: int
  unroll_overlap: int = 1

  def __init__(self, observation_spec: ArraySpec, action_spec: ArraySpec,
               num_envs: int):
    self.observation_spec = observation_spec
    self.action_spec = action_spec
    self.num_envs = num_envs

  def initial_core_state(self, batch_size: int) -> CoreState:
    """Zero recurrent state for `batch_size` envs; () if feed-forward."""
    del batch_size
    return ()

  @abc.abstractmethod
  def act(self, inputs: ActInputs) -> ActOutputs:
    """Batched inference with the latest weights. Thread: inference."""

  @abc.abstractmethod
  def add_unrolls(self, unrolls: Unroll) -> None:
    """Takes completed unrolls (queue or replay). May block (back-pressure)."""

  @abc.abstractmethod
  def train_step(self) -> Mapping[str, float]:
    """Runs one learner step; blocks until enough data is ready.

    Returns scalar metrics named by namespace ('loss/policy', ...). Must return
    promptly (with an empty dict) once `stop()` was called.
    """

  @property
  @abc.abstractmethod
  def step_counter(self) -> Any:
    """tf.Variable int64: learner steps done (checkpointed, drives schedules)."""

  @abc.abstractmethod
  def checkpoint_objects(self) -> Dict[str, Any]:
    """Trackables for tf.train.Checkpoint (networks, optimizer, normalizers)."""

  def stop(self) -> None:
    """Unblocks `train_step` and `add_unrolls` at shutdown."""
