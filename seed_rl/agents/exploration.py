"""Per-environment epsilon-greedy exploration (Ape-X, R2D2), and the
epsilon-greedy draw DQN's linearly decayed epsilon uses too.

Training env i of N explores with its own fixed epsilon
eps_i = base ** (1 + alpha * i / (N - 1)) (base 0.4, alpha 7 in Horgan et al.
2018 and Kapturowski et al. 2019), so the envs of all actors together cover a
spectrum from fairly random to almost greedy behaviour. Evaluation envs use a
small fixed epsilon.
"""

from __future__ import annotations

import numpy as np


def per_env_epsilons(
  num_envs: int, base: float = 0.4, alpha: float = 7.0
) -> np.ndarray:
  """Returns float64 [num_envs]: base ** (1 + alpha * i / (num_envs - 1))."""
  if num_envs < 1:
    raise ValueError(f"per_env_epsilons: num_envs must be >= 1, got {num_envs}")
  if num_envs == 1:
    return np.array([base], np.float64)
  i = np.arange(num_envs, dtype=np.float64)
  return base ** (1.0 + alpha * i / (num_envs - 1))


def warmed_up(table: np.ndarray, step: int, warmup_steps: int) -> np.ndarray:
  """float64 [N]: each training env's epsilon moved linearly from 1 at
  learner step 0 to its own `table` value at `warmup_steps` (0: `table`).

  eps_i(t) = table_i + (1 - table_i) * max(0, 1 - t / warmup_steps). With
  few envs most of the Ape-X spectrum is nearly greedy; starting every env
  at 1 gives an untrained Q network's first data DQN's uniform exploration.
  """
  if warmup_steps <= 0 or step >= warmup_steps:
    return table
  remaining = 1.0 - step / warmup_steps
  return table + (1.0 - table) * remaining


def env_epsilons(
  table: np.ndarray,
  env_ids: np.ndarray,
  eval_mask: np.ndarray,
  eval_epsilon: float,
) -> np.ndarray:
  """Epsilon per row [B]: `table[env_id]`, or `eval_epsilon` where eval_mask.

  Raises ValueError naming the ids when a training row's env id is outside
  [0, len(table)).
  """
  env_ids = np.asarray(env_ids)
  eval_mask = np.asarray(eval_mask, bool)
  train = ~eval_mask
  bad = train & ((env_ids < 0) | (env_ids >= table.shape[0]))
  if bad.any():
    raise ValueError(
      f"training env ids {np.unique(env_ids[bad])[:8].tolist()} "
      f"are outside [0, {table.shape[0]}): the agent was built "
      f"for {table.shape[0]} training envs"
    )
  eps = np.full(env_ids.shape, eval_epsilon, np.float64)
  eps[train] = table[env_ids[train]]
  return eps


def epsilon_greedy(
  greedy: np.ndarray,
  num_actions: int,
  epsilon: np.ndarray,
  rng: np.random.Generator,
) -> np.ndarray:
  """Replaces each greedy action [B] by a uniform one with prob. epsilon [B]."""
  explore = rng.random(greedy.shape[0]) < epsilon
  random_actions = rng.integers(0, num_actions, greedy.shape[0])
  return np.where(explore, random_actions, greedy)
