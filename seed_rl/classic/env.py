"""Classic-control (and any gymnasium or dm_env) environments for actors.

gin binding names: `classic.create_environment.env_id = 'CartPole-v1'`,
`classic.create_environment.parallel = 'inline'` (or 'subprocess'), ...
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import gin

from seed_rl.actors.batched_env import BatchedEnv
from seed_rl.actors.factory import GymEnvFn
from seed_rl.actors.factory import check_env_id
from seed_rl.actors.factory import make_batched_env


@gin.configurable("classic.create_environment")
def create_environment(
  num_envs: int,
  seed: int,
  env_id: str = "CartPole-v1",
  max_episode_steps: Optional[int] = None,
  env_kwargs: Optional[Mapping[str, Any]] = None,
  parallel: str = "inline",
  num_workers: Optional[int] = None,
  start_method: str = "forkserver",
) -> BatchedEnv:
  """K envs of one gymnasium id or 'module:callable' factory.

  Args:
    num_envs: K.
    seed: env i is seeded with `seed + i` (actors pass base seed +
      first global env id, so every env of a run has its own seed).
    env_id: registered gymnasium id, or 'package.module:callable' returning a
      gymnasium.Env or a dm_env.Environment (called with `env_kwargs`).
    max_episode_steps: time limit (truncation); None keeps the registered one.
    env_kwargs: keyword arguments for gym.make / the factory.
    parallel: 'inline' (default; CartPole steps in microseconds, far below a
      process round trip) or 'subprocess'.
    num_workers, start_method: for 'subprocess', see make_batched_env.

  Returns:
    A BatchedEnv with SEED autoreset semantics.
  """
  return gym_batched_env(
    num_envs,
    seed,
    env_id,
    max_episode_steps,
    env_kwargs,
    parallel,
    num_workers,
    start_method,
  )


def gym_batched_env(
  num_envs: int,
  seed: int,
  env_id: str,
  max_episode_steps: Optional[int],
  env_kwargs: Optional[Mapping[str, Any]],
  parallel: str,
  num_workers: Optional[int],
  start_method: str,
) -> BatchedEnv:
  """The body of every gymnasium-backed domain factory (not gin-bound, so
  one domain's bindings never leak into another's)."""
  check_env_id(env_id)
  env_fn = GymEnvFn(
    env_id, max_episode_steps, tuple(sorted((env_kwargs or {}).items()))
  )
  return make_batched_env(
    env_fn, num_envs, seed, parallel, num_workers, start_method
  )
