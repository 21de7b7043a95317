"""The optional Football domain: the gym compatibility layer, the torso, the
argument checks, and (when gfootball is installed: scripts/install_football.sh)
real engines stepped headless in an actor's batched env and their specs over
gRPC."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from seed_rl.football import env as football_env
from seed_rl.football import gym_compat

HAVE_GFOOTBALL = (
  importlib.util.find_spec("gfootball") is not None
  and importlib.util.find_spec("gfootball_engine") is not None
)
needs_gfootball = pytest.mark.skipif(
  not HAVE_GFOOTBALL,
  reason="gfootball is not installed (scripts/install_football.sh)",
)


class _Counter(gym_compat.Env):
  """An old-API env: reset() -> obs; step() -> 4-tuple."""

  def __init__(self):
    self.action_space = "actions"
    self.observation_space = "observations"
    self.t = 0

  def reset(self):
    self.t = 0
    return self.t

  def step(self, action):
    self.t += action
    return self.t, 1.0, self.t >= 3, {"t": self.t}


def test_gym_compat_has_the_old_wrapper_semantics():
  class Doubled(gym_compat.ObservationWrapper):
    def observation(self, observation):
      return 2 * observation

  class Halved(gym_compat.RewardWrapper):
    def reward(self, reward):
      return reward / 2

  inner = _Counter()
  env = Halved(Doubled(inner))
  assert env.reset() == 0
  assert env.step(2) == (4, 0.5, False, {"t": 2})
  assert env.step(1) == (6, 0.5, True, {"t": 3})
  assert env.unwrapped is inner
  assert env.t == 3  # attributes reach the wrapped env
  assert env.action_space == "actions"
  with pytest.raises(NotImplementedError, match="define observation"):
    gym_compat.ObservationWrapper(inner).reset()


def test_gym_compat_install_provides_what_gfootball_imports():
  saved = {k: sys.modules.get(k) for k in ("gym", "gym.envs.registration")}
  try:
    sys.modules.pop("gym", None)
    gym_compat.install()
    import gym  # the layer, not a package
    from gym.envs.registration import register

    import gymnasium

    assert gym._seed_rl_compat
    assert gym.spaces.Box is gymnasium.spaces.Box
    assert gym.Wrapper is gym_compat.Wrapper
    register(id="Anything-v0", entry_point="x:y")  # accepted, kept nowhere
    with pytest.raises(RuntimeError, match="create_environment"):
      gym.make("Anything-v0")
    gym_compat.install()  # idempotent
    assert sys.modules["gym"] is gym
  finally:
    for k, v in saved.items():
      if v is None:
        sys.modules.pop(k, None)
      else:
        sys.modules[k] = v


@pytest.mark.parametrize(
  "kwargs, expected",
  [
    ({"representation": "pixels"}, "representation 'pixels' is unknown"),
    ({"rewards": "checkpoints"}, "rewards 'checkpoints' is unknown"),
  ],
)
def test_bad_arguments_are_named(kwargs, expected):
  args = dict(
    scenario="academy_empty_goal_close",
    representation="extracted",
    rewards="scoring",
  )
  args.update(kwargs)
  with pytest.raises(ValueError, match=expected):
    football_env.check_arguments(**args)


def test_bad_parallel_is_named():
  with pytest.raises(ValueError, match="parallel='threads'"):
    football_env.create_environment(2, 0, parallel="threads")


@pytest.mark.skipif(HAVE_GFOOTBALL, reason="gfootball is installed")
def test_missing_gfootball_names_the_install_command():
  with pytest.raises(ImportError, match="scripts/install_football.sh"):
    football_env.create_environment(1, 0)


def test_football_torso_merges_the_stacked_planes():
  from seed_rl.football import networks

  torso = networks.football_torso(kind="nips")
  frames = np.random.default_rng(0).integers(
    0, 256, size=(3, 72, 96, 4, 4), dtype=np.uint8
  )
  features = np.asarray(torso(frames))
  assert features.shape == (3, 256)
  # The 16 channels are the 4 planes x 4 stacked frames, plane-major.
  merged = networks.MergePlanes()(frames)
  assert merged.shape == (3, 72, 96, 16)
  np.testing.assert_array_equal(np.asarray(merged)[..., 5], frames[..., 1, 1])


@needs_gfootball
@pytest.mark.parametrize("parallel", ["inline", "subprocess"])
def test_football_envs_step_headless(parallel):
  """Real engines, no display: SMM planes of 0/255, goals of +-1, and
  academy episodes that end (ball out, possession lost, a goal or the
  clock) and start over in the same step."""
  env = football_env.create_environment(2, 0, parallel=parallel)
  try:
    assert env.observation_spec.shape == (72, 96, 4)
    assert env.observation_spec.dtype == "uint8"
    assert env.action_spec.num_values == 19
    first = env.reset()
    assert first.shape == (2, 72, 96, 4) and first.dtype == np.uint8
    # Each plane shows something: players of both teams, ball, active.
    assert (first.reshape(2, -1, 4).max(axis=1) == 255).all()
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(200):
      result = env.step(rng.integers(0, 19, size=2))
      assert set(np.unique(result.observation)) <= {0, 255}
      assert set(np.unique(result.reward)) <= {-1.0, 0.0, 1.0}
      assert not result.truncated.any()
      ended += int(result.terminated.sum())
    assert ended >= 1
  finally:
    env.close()


@needs_gfootball
def test_football_specs_round_trip_over_grpc():
  from seed_rl.grpc import codec

  env = football_env.create_environment(1, 0)
  try:
    for spec in (env.observation_spec, env.action_spec):
      decoded = codec.decode_spec(codec.encode_spec(spec), spec.name)
      assert codec.spec_mismatch(spec, decoded, spec.name) is None
      for bound in ("minimum", "maximum"):
        np.testing.assert_array_equal(
          getattr(decoded, bound), getattr(spec, bound)
        )
  finally:
    env.close()
