"""Classic-control (and any gymnasium or dm_env) environments for actors.

gin binding names: `classic.create_environment.env_id = 'CartPole-v1'`,
`classic.create_environment.parallel = 'inline'` (or 'subprocess'), ...
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import gin

from seed_rl.actors.batched_env import BatchedEnv
from seed_rl.actors.factory import GymEnvFn
from seed_rl.actors.factory import check_env_id
from seed_rl.actors.factory import make_batched_env


def gym_domain_factory(
  module: str,
  domain: str,
  default_env_id: str,
  doc: str,
  check: Optional[Callable[[BatchedEnv, str], None]] = None,
) -> Callable[..., BatchedEnv]:
  """`<domain>.create_environment` over gymnasium ids, gin-configurable
  under that name: the one signature of the gymnasium-backed domains
  (classic, mujoco), each under its own gin name so that one domain's
  bindings never leak into another's.

  Args:
    module: the `__name__` of the module that holds it as
      `create_environment` (its repr, help and pickling say so).
    domain: the gin name's prefix ('classic').
    default_env_id: env_id's default.
    doc: the factory's docstring.
    check: called with (env, env_id) on each new env: closes it and raises
      ValueError for an env the domain does not serve.
  """

  def create_environment(
    num_envs: int,
    seed: int,
    env_id: str = default_env_id,
    max_episode_steps: Optional[int] = None,
    env_kwargs: Optional[Mapping[str, Any]] = None,
    parallel: str = "inline",
    num_workers: Optional[int] = None,
    start_method: str = "forkserver",
  ) -> BatchedEnv:
    env = gym_batched_env(
      num_envs,
      seed,
      env_id,
      max_episode_steps,
      env_kwargs,
      parallel,
      num_workers,
      start_method,
    )
    if check is not None:
      check(env, env_id)
    return env

  create_environment.__doc__ = doc
  create_environment.__module__ = module
  create_environment.__qualname__ = "create_environment"
  return gin.configurable(f"{domain}.create_environment")(create_environment)


create_environment = gym_domain_factory(
  __name__,
  "classic",
  default_env_id="CartPole-v1",
  doc="""K envs of one gymnasium id or 'module:callable' factory.

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
  """,
)


def gym_batched_env(
  num_envs: int,
  seed: int,
  env_id: str,
  max_episode_steps: Optional[int] = None,
  env_kwargs: Optional[Mapping[str, Any]] = None,
  parallel: str = "inline",
  num_workers: Optional[int] = None,
  start_method: str = "forkserver",
) -> BatchedEnv:
  """K gymnasium envs behind BatchedEnv: the body of every gymnasium-backed
  domain factory (not gin-bound, so one domain's bindings never leak into
  another's), and a plugin domain's one-liner:
  `gym_batched_env(num_envs, seed, "my_pkg.envs:MyEnv", env_kwargs={...})`.

  Args:
    env_id: a gymnasium id, or 'module:callable' returning a gymnasium.Env
      or a dm_env.Environment.
    max_episode_steps: a time limit (truncation) on top of the env's own.
    env_kwargs: keyword arguments of the env's constructor.
    parallel: 'inline' (all K in the actor's process) or 'subprocess'
      (worker processes, for slow Python envs).
    num_workers, start_method: the worker processes of 'subprocess'.
  """
  check_env_id(env_id)
  env_fn = GymEnvFn(
    env_id, max_episode_steps, tuple(sorted((env_kwargs or {}).items()))
  )
  return make_batched_env(
    env_fn, num_envs, seed, parallel, num_workers, start_method
  )
