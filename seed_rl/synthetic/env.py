"""Synthetic domains for pipeline checks (see dots.py).

gin binding names: `synthetic.create_environment.env_id`, `.env_kwargs`, ...
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import gin

from seed_rl.actors.batched_env import BatchedEnv
from seed_rl.classic.env import gym_batched_env

MOVING_DOT = "seed_rl.synthetic.dots:MovingDot"


@gin.configurable("synthetic.create_environment")
def create_environment(
  num_envs: int,
  seed: int,
  env_id: str = MOVING_DOT,
  env_kwargs: Optional[Mapping[str, Any]] = None,
  parallel: str = "inline",
) -> BatchedEnv:
  """K synthetic envs (env i seeded with seed + i), stepped inline."""
  return gym_batched_env(
    num_envs, seed, env_id, None, env_kwargs, parallel, None, "forkserver"
  )
