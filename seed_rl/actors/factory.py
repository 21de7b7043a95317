"""Building gymnasium envs by name and batching them inline or in workers."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
from typing import Any, Iterator, Mapping, Optional, Tuple

import dm_env
import gymnasium as gym

from seed_rl.actors.batched_env import BatchedEnv
from seed_rl.actors.dm_env_adapter import DmEnvAdapter
from seed_rl.actors.env_runner import EnvFn
from seed_rl.actors.inline_env import InlineBatchedEnv
from seed_rl.actors.subprocess_env import SubprocessBatchedEnv

PARALLEL_KINDS = ("inline", "subprocess")
# Set by `rendering()` (seed_rl.evaluate): gymnasium ids are made with this
# render_mode and batched envs are built inline, so `BatchedEnv.render`
# reaches them.
_render_mode: Optional[str] = None


@contextlib.contextmanager
def rendering(render_mode: str = "rgb_array") -> Iterator[None]:
  """Envs built inside this block render (gymnasium ids get `render_mode`;
  'module:callable' factories are called as configured) and run inline."""
  global _render_mode
  previous, _render_mode = _render_mode, render_mode
  try:
    yield
  finally:
    _render_mode = previous


def check_env_id(env_id: str) -> None:
  """Raises ValueError unless `env_id` is registered or a 'module:callable'."""
  if ":" in env_id:
    module_name, _, attr = env_id.partition(":")
    if not module_name or not attr:
      raise ValueError(
        f"env factory {env_id!r} must look like 'package.module:callable'"
      )
    return
  if env_id not in gym.registry:
    matches = difflib.get_close_matches(
      env_id, list(gym.registry), n=8, cutoff=0.5
    )
    hint = (
      f"close matches: {matches}"
      if matches
      else "no close match among gymnasium's registered ids"
    )
    raise ValueError(
      f"unknown gymnasium env id {env_id!r} ({hint}); pass a registered id "
      "or a 'package.module:callable' factory returning a gymnasium.Env or "
      "a dm_env.Environment"
    )


def _call_factory(spec: str, kwargs: Mapping[str, Any]) -> Any:
  module_name, _, attr = spec.partition(":")
  try:
    module = importlib.import_module(module_name)
  except ImportError as e:
    raise ValueError(
      f"env factory {spec!r}: cannot import module {module_name!r}: {e}"
    ) from e
  factory = module
  for part in attr.split("."):
    if not hasattr(factory, part):
      raise ValueError(
        f"env factory {spec!r}: {module_name!r} has no attribute {attr!r}"
      )
    factory = getattr(factory, part)
  if not callable(factory):
    raise ValueError(f"env factory {spec!r} is not callable")
  return factory(**kwargs)


def make_gym_env(
  env_id: str,
  max_episode_steps: Optional[int] = None,
  env_kwargs: Optional[Mapping[str, Any]] = None,
) -> gym.Env:
  """Builds one env from a gymnasium id or a 'module:callable' factory.

  A factory may return a gymnasium.Env or a dm_env.Environment (wrapped in
  DmEnvAdapter). `max_episode_steps` adds a TimeLimit (truncation).
  """
  check_env_id(env_id)
  kwargs = dict(env_kwargs or {})
  if ":" not in env_id:
    if _render_mode is not None:
      kwargs.setdefault("render_mode", _render_mode)
    return gym.make(env_id, max_episode_steps=max_episode_steps, **kwargs)
  env = _call_factory(env_id, kwargs)
  if isinstance(env, dm_env.Environment):
    env = DmEnvAdapter(env)
  if not isinstance(env, gym.Env):
    raise ValueError(
      f"env factory {env_id!r} returned {type(env).__name__}; "
      "expected a gymnasium.Env or a dm_env.Environment"
    )
  if max_episode_steps is not None:
    env = gym.wrappers.TimeLimit(env, max_episode_steps)
  return env


@dataclasses.dataclass(frozen=True)
class GymEnvFn:
  """Picklable `() -> gym.Env` (subprocess workers rebuild envs from it)."""

  env_id: str
  max_episode_steps: Optional[int] = None
  env_kwargs: Tuple[Tuple[str, Any], ...] = ()

  def __call__(self) -> gym.Env:
    return make_gym_env(
      self.env_id, self.max_episode_steps, dict(self.env_kwargs)
    )


def make_batched_env(
  env_fn: EnvFn,
  num_envs: int,
  seed: int,
  parallel: str = "inline",
  num_workers: Optional[int] = None,
  start_method: str = "forkserver",
) -> BatchedEnv:
  """Batches `num_envs` envs from `env_fn`; env i is seeded with seed + i.

  Args:
    env_fn: `() -> gym.Env`; must be picklable for 'subprocess'.
    num_envs: K.
    seed: seed of env 0.
    parallel: 'inline' (stepped in this process, best for cheap envs) or
      'subprocess' (shared-memory worker processes, for envs whose step costs
      more than ~50 us, e.g. MuJoCo).
    num_workers: worker processes for 'subprocess' (default min(K, cpus)).
    start_method: multiprocessing start method for 'subprocess'.
  """
  if parallel == "inline" or (_render_mode and parallel == "subprocess"):
    return InlineBatchedEnv(env_fn, num_envs, seed)
  if parallel == "subprocess":
    return SubprocessBatchedEnv(
      env_fn, num_envs, seed, num_workers, start_method
    )
  raise ValueError(f"parallel={parallel!r}; choose one of {PARALLEL_KINDS}")
