"""Tests of the actor-side batched envs, env factories, dm_env adapter and loop.

References are independent plain-gymnasium loops written here from the SEED
semantics in CONTRACTS.md: after an episode end the observation is the next
episode's first; truncated (and only truncated, not terminated) episodes
report their last observation in final_observation, in env order.
"""

from __future__ import annotations

from tests.support import ROOT
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import List, Set

import dm_env
from dm_env import specs
import gin
import gymnasium as gym
import numpy as np
import pytest

from seed_rl.actors import actor as actor_lib
from seed_rl.actors import main as actor_main
from seed_rl.actors.batched_env import BatchedEnv
from seed_rl.actors.batched_env import EpisodeTracker
from seed_rl.actors.batched_env import spec_from_space
from seed_rl.actors.dm_env_adapter import DmEnvAdapter
from seed_rl.actors.dm_env_adapter import space_from_dm_spec
from seed_rl.actors.env_runner import EnvRunner
from seed_rl.actors.factory import GymEnvFn
from seed_rl.actors.subprocess_env import EnvWorkerError
from seed_rl.actors.subprocess_env import SubprocessBatchedEnv
from seed_rl.atari import env as atari_env
from seed_rl.classic import env as classic_env
from seed_rl.common.specs import ArraySpec
from seed_rl.grpc.errors import SpecMismatchError
from seed_rl.mujoco import env as mujoco_env

PARALLEL = ("inline", "subprocess")


# ----------------------------------------------------------------- helpers


def _alive(pid: int) -> bool:
  """True unless `pid` is gone or a zombie (containers may not reap)."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      state = f.read().rsplit(")", 1)[1].split()[0]
  except (FileNotFoundError, ProcessLookupError):
    return False
  return state not in ("Z", "X")


def _descendants(pid: int) -> set:
  parents = {}
  for entry in os.listdir("/proc"):
    if entry.isdigit():
      try:
        with open(f"/proc/{entry}/stat") as f:
          parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
      except (FileNotFoundError, ProcessLookupError, IndexError):
        pass
  found: Set[int] = set()
  frontier = {pid}
  while frontier:
    frontier = {p for p, parent in parents.items() if parent in frontier}
    frontier -= found
    found |= frontier
  return found


def _wait_dead(pids, timeout_s: float = 10.0) -> list:
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    alive = [p for p in pids if _alive(p)]
    if not alive:
      return []
    time.sleep(0.05)
  return [p for p in pids if _alive(p)]


def _reference_rollout(env_id, max_episode_steps, seeds, actions):
  """Plain gymnasium loop with SEED autoreset, one env after another.

  Returns per step t (after t actions; t=0 is the reset): observation [K],
  and for t >= 1 reward, terminated, truncated [K] and final observations of
  truncated envs in env order.
  """
  envs = [gym.make(env_id, max_episode_steps=max_episode_steps) for _ in seeds]
  obs = [env.reset(seed=s)[0] for env, s in zip(envs, seeds)]
  steps = [dict(observation=np.array(obs, np.float32))]
  for step_actions in actions:
    rewards, terms, truncs, finals = [], [], [], []
    for i, env in enumerate(envs):
      o, r, term, trunc, _ = env.step(int(step_actions[i]))
      trunc = trunc and not term  # a terminal step needs no bootstrap
      if term or trunc:
        if trunc:
          finals.append(o)
        o, _ = env.reset()
      obs[i] = o
      rewards.append(r)
      terms.append(term)
      truncs.append(trunc)
    steps.append(
      dict(
        observation=np.array(obs, np.float32),
        reward=np.array(rewards, np.float32),
        terminated=np.array(terms),
        truncated=np.array(truncs),
        final_observation=np.array(finals, np.float32).reshape(-1, 4),
      )
    )
  for env in envs:
    env.close()
  return steps


def _cartpole_actions(num_steps: int, num_envs: int) -> np.ndarray:
  """Env 0 always pushes left (terminates in ~10 steps); the rest random."""
  actions = np.random.default_rng(7).integers(0, 2, (num_steps, num_envs))
  actions[:, 0] = 0
  return actions.astype(np.int32)


# ------------------------------------------------------------ space -> spec


def test_spec_from_discrete_space():
  spec = spec_from_space(gym.spaces.Discrete(5), "action")
  assert (spec.shape, spec.dtype, spec.num_values) == ((), "int32", 5)
  shifted = spec_from_space(gym.spaces.Discrete(3, start=-1), "action")
  assert shifted.num_values == 3


def test_spec_from_box_spaces():
  box = gym.spaces.Box(
    np.array([-1.0, -np.inf]), np.array([2.0, np.inf]), dtype=np.float64
  )
  spec = spec_from_space(box, "observation")
  assert spec.dtype == "float32" and spec.shape == (2,)
  np.testing.assert_array_equal(spec.minimum, [-1.0, -np.inf])
  np.testing.assert_array_equal(spec.maximum, [2.0, np.inf])
  unbounded = spec_from_space(gym.spaces.Box(-np.inf, np.inf, (3,)), "obs")
  assert unbounded.minimum is None and unbounded.maximum is None
  image = spec_from_space(gym.spaces.Box(0, 255, (84, 84), np.uint8), "frame")
  assert image.dtype == "uint8" and image.maximum.max() == 255


@pytest.mark.parametrize(
  "space",
  [
    gym.spaces.Dict({"a": gym.spaces.Discrete(2)}),
    gym.spaces.Tuple((gym.spaces.Discrete(2),)),
    gym.spaces.MultiDiscrete([2, 3]),
    gym.spaces.MultiBinary(4),
  ],
)
def test_spec_from_unsupported_space_says_what_is_supported(space):
  with pytest.raises(ValueError, match="supported spaces are Discrete and Box"):
    spec_from_space(space, "observation")


# --------------------------------------------------- SEED autoreset semantics


@pytest.mark.parametrize("parallel", PARALLEL)
def test_classic_env_matches_reference_autoreset(parallel):
  num_envs, num_steps, seed, limit = 4, 40, 11, 10
  actions = _cartpole_actions(num_steps, num_envs)
  reference = _reference_rollout(
    "CartPole-v1", limit, [seed + i for i in range(num_envs)], actions
  )
  with classic_env.create_environment(
    num_envs, seed, max_episode_steps=limit, parallel=parallel, num_workers=2
  ) as env:
    assert env.observation_spec.shape == (4,)
    assert env.action_spec.num_values == 2
    obs = env.reset()
    np.testing.assert_array_equal(obs, reference[0]["observation"])
    saw_term = saw_trunc = False
    for t in range(num_steps):
      result = env.step(actions[t])
      ref = reference[t + 1]
      assert result.observation.dtype == np.float32
      assert result.reward.dtype == np.float32
      assert result.terminated.dtype == bool and result.truncated.dtype == bool
      np.testing.assert_array_equal(result.observation, ref["observation"])
      np.testing.assert_array_equal(result.reward, ref["reward"])
      np.testing.assert_array_equal(result.terminated, ref["terminated"])
      np.testing.assert_array_equal(result.truncated, ref["truncated"])
      assert not (result.terminated & result.truncated).any()
      assert result.final_observation.shape == (result.truncated.sum(), 4)
      np.testing.assert_array_equal(
        result.final_observation, ref["final_observation"]
      )
      saw_term |= bool(result.terminated.any())
      saw_trunc |= bool(result.truncated.any())
    assert saw_term and saw_trunc, "rollout must exercise both episode ends"


def test_truncation_only_and_first_observation_of_next_episode():
  # max_episode_steps=5: every env truncates at step 5 (CartPole cannot fall
  # that fast), the final observation is the 5th, the returned one a reset.
  with classic_env.create_environment(3, 0, max_episode_steps=5) as env:
    env.reset()
    zeros = np.zeros(3, np.int32)
    for _ in range(4):
      result = env.step(zeros)
      assert not result.truncated.any()
      assert result.final_observation.shape == (0, 4)
      before = result.observation
    result = env.step(zeros)
    assert result.truncated.all() and not result.terminated.any()
    # The final observation continues the episode (pushing left keeps
    # accelerating left), the new one is a fresh reset near 0.
    assert (result.final_observation[:, 1] < before[:, 1]).all()
    assert (np.abs(result.observation) <= 0.05).all()


def test_episode_tracker_against_hand_computed_returns():
  tracker = EpisodeTracker(3)
  steps = [
    # reward, terminated, truncated
    ([1.0, 2.0, 0.5], [False, False, False], [False, False, False]),
    ([1.0, -1.0, 0.5], [True, False, False], [False, False, False]),
    ([3.0, 1.0, 0.5], [False, False, True], [False, True, False]),
    ([1.0, 1.0, 1.0], [True, True, False], [False, False, False]),
  ]
  ended = []
  for reward, term, trunc in steps:
    returns, lengths = tracker.update(
      np.array(reward, np.float32), np.array(term), np.array(trunc)
    )
    assert returns.dtype == np.float32 and lengths.dtype == np.int32
    ended.append((returns.tolist(), lengths.tolist()))
  assert ended == [
    ([], []),
    ([2.0], [2]),
    ([2.0, 1.5], [3, 3]),
    ([4.0, 1.0], [2, 1]),
  ]


# ------------------------------------------------------------- subprocesses


class CrashingEnv(gym.Env):
  """Raises on its 3rd step when it was seeded with 2 (env index 2)."""

  observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
  action_space = gym.spaces.Discrete(2)

  def __init__(self):
    self._seed = None
    self._steps = 0

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    if seed is not None:
      self._seed = seed
    self._steps = 0
    return np.zeros(2, np.float32), {}

  def step(self, action):
    self._steps += 1
    if self._seed == 2 and self._steps == 3:
      raise RuntimeError("boom: the physics exploded")
    return np.zeros(2, np.float32), 0.0, False, False, {}


def test_subprocess_env_crash_reports_index_and_traceback():
  env = SubprocessBatchedEnv(CrashingEnv, 4, seed=0, num_workers=2)
  pids = env.worker_pids
  assert all(_alive(p) for p in pids)
  env.reset()
  actions = np.zeros(4, np.int32)
  env.step(actions)
  env.step(actions)
  with pytest.raises(EnvWorkerError) as info:
    env.step(actions)
  message = str(info.value)
  assert "env 2 (worker 1) raised during step" in message
  assert "RuntimeError: boom: the physics exploded" in message
  assert "Traceback" in message
  assert _wait_dead(pids) == []
  with pytest.raises(RuntimeError, match="closed"):
    env.step(actions)
  env.close()  # idempotent


def test_subprocess_env_build_failure_names_env():
  env_fn = GymEnvFn("CartPole-v1", env_kwargs=(("no_such_arg", 1),))
  expected = r"(?s)env 0 \(worker 0\) raised during construction.*no_such_arg"
  with pytest.raises(EnvWorkerError, match=expected):
    SubprocessBatchedEnv(env_fn, 2, seed=0, num_workers=1)


def test_subprocess_worker_killed_is_reported():
  env = SubprocessBatchedEnv(GymEnvFn("CartPole-v1"), 4, seed=0, num_workers=2)
  env.reset()
  pids = env.worker_pids
  os.kill(pids[0], signal.SIGKILL)
  with pytest.raises(EnvWorkerError, match=r"worker 0 \(envs 0\.\.1\) died"):
    env.step(np.zeros(4, np.int32))
  assert _wait_dead(pids) == []


def test_subprocess_workers_die_with_parent():
  script = textwrap.dedent("""
      import os, signal
      from seed_rl.actors.factory import GymEnvFn
      from seed_rl.actors.subprocess_env import SubprocessBatchedEnv
      env = SubprocessBatchedEnv(GymEnvFn('CartPole-v1'), 2, 0, num_workers=2)
      env.reset()
      print(' '.join(map(str, env.worker_pids)), flush=True)
      os.kill(os.getpid(), signal.SIGKILL)
  """)
  proc = subprocess.run(
    [sys.executable, "-c", script],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=60,
  )
  assert proc.returncode == -signal.SIGKILL, proc.stderr
  pids = [int(p) for p in proc.stdout.split()]
  assert len(pids) == 2
  assert _wait_dead(pids) == []


def test_actor_main_sigterm_closes_workers():
  proc = subprocess.Popen(
    [
      sys.executable,
      "-m",
      "seed_rl.actors.main",
      "--env",
      "classic",
      "--actor_id",
      "0",
      "--num_envs",
      "4",
      # Nothing listens here: the actor waits in Hello, as before a learner
      # comes up.
      "--server_address",
      "localhost:1",
      "--gin_bindings",
      "classic.create_environment.parallel = 'subprocess'",
      "--gin_bindings",
      "classic.create_environment.num_workers = 2",
      "--gin_bindings",
      "VtraceConfig.learning_rate = 0.1",
    ],
    cwd=ROOT,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )
  try:
    deadline = time.monotonic() + 30
    children = set()
    while time.monotonic() < deadline and len(children) < 4:
      # resource tracker + forkserver + 2 workers
      children = _descendants(proc.pid)
      time.sleep(0.1)
    assert len(children) >= 4, children
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=20)
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()
  assert proc.returncode == 0, stderr
  assert "stopped by SIGTERM" in stderr
  assert _wait_dead(children) == []


# -------------------------------------------------------------------- Atari


def test_atari_adapter_pong_shapes_and_semantics():
  # 800 frames = 200 agent steps per episode; no-op starts off so that every
  # episode starts from the same frame.
  with atari_env.create_environment(
    4, 0, game="pong", noop_max=0, max_num_frames_per_episode=800, num_threads=2
  ) as env:
    assert env.observation_spec.shape == (84, 84)
    assert env.observation_spec.dtype == "uint8"
    assert env.action_spec.num_values == 6
    first = env.reset()
    assert first.shape == (4, 84, 84) and first.dtype == np.uint8
    tracker = EpisodeTracker(4)
    rng = np.random.default_rng(0)
    lengths, rewards = [], []
    for _ in range(300):
      result = env.step(rng.integers(0, 6, 4).astype(np.int32))
      assert result.observation.shape == (4, 84, 84)
      assert result.observation.dtype == np.uint8
      assert result.reward.dtype == np.float32
      assert result.terminated.dtype == bool and result.truncated.dtype == bool
      assert not (result.terminated & result.truncated).any()
      assert result.final_observation.shape == (result.truncated.sum(), 84, 84)
      rewards.append(result.reward)
      _, ended = tracker.update(
        result.reward, result.terminated, result.truncated
      )
      lengths.extend(ended.tolist())
      for i in np.flatnonzero(result.truncated):
        np.testing.assert_array_equal(result.observation[i], first[i])
      for frame in result.final_observation:
        assert not np.array_equal(frame, first[0])
    assert lengths == [200] * 4
    assert set(np.concatenate(rewards).tolist()) <= {-1.0, 0.0, 1.0}
    assert np.concatenate(rewards).any(), "pong scores within 300 steps"


def test_atari_is_reproducible_per_seed():
  def frames(seed):
    with atari_env.create_environment(2, seed, num_threads=1) as env:
      out = [env.reset()]
      for t in range(30):
        out.append(env.step(np.full(2, t % 6, np.int32)).observation)
      return np.stack(out)

  np.testing.assert_array_equal(frames(3), frames(3))


def test_atari_unknown_game_lists_matches():
  with pytest.raises(ValueError, match=r"'pong'"):
    atari_env.create_environment(1, 0, game="Pong")
  with pytest.raises(ValueError, match="ms_pacman"):
    atari_env.create_environment(1, 0, game="mspacman")


# ----------------------------------------------------------- dm_env adapter


class CorridorEnv(dm_env.Environment):
  """Position on a line; reaching `length` terminates, `limit` steps truncate.

  signed=False: DiscreteArray(2) actions (1 = right, 0 = left).
  signed=True: scalar int BoundedArray in [-1, 1] (the move itself).
  """

  def __init__(self, length: int = 3, limit: int = 5, signed: bool = False):
    self._length, self._limit, self._signed = length, limit, signed
    self._position = self._steps = 0

  def _observation(self):
    return np.array([self._position], np.float64)

  def reset(self):
    self._position = self._steps = 0
    return dm_env.restart(self._observation())

  def step(self, action):
    move = int(action) if self._signed else (1 if int(action) == 1 else -1)
    self._position = max(0, self._position + move)
    self._steps += 1
    if self._position >= self._length:
      return dm_env.termination(1.0, self._observation())
    if self._steps >= self._limit:
      return dm_env.truncation(0.0, self._observation())
    return dm_env.transition(0.0, self._observation())

  def observation_spec(self):
    return specs.BoundedArray(
      (1,), np.float64, 0.0, float(self._length), name="position"
    )

  def action_spec(self):
    if self._signed:
      return specs.BoundedArray((), np.int64, -1, 1, name="move")
    return specs.DiscreteArray(2, name="move")


def make_corridor(**kwargs):
  return CorridorEnv(**kwargs)


def test_dm_env_adapter_termination_and_truncation():
  env = DmEnvAdapter(CorridorEnv(length=3, limit=5))
  assert env.action_space == gym.spaces.Discrete(2)
  assert env.observation_space.shape == (1,)
  obs, _ = env.reset(seed=0)
  np.testing.assert_array_equal(obs, [0.0])
  outcomes = [env.step(1)[1:4] for _ in range(3)]
  assert outcomes == [
    (0.0, False, False),
    (0.0, False, False),
    (1.0, True, False),
  ]
  with pytest.raises(RuntimeError, match="reset"):
    env.step(1)
  env.reset()
  outcomes = [env.step(0)[1:4] for _ in range(5)]
  assert outcomes[-1] == (0.0, False, True)
  assert all(o == (0.0, False, False) for o in outcomes[:-1])


def test_dm_env_spaces():
  assert space_from_dm_spec(specs.DiscreteArray(4), "a") == gym.spaces.Discrete(
    4
  )
  signed = space_from_dm_spec(specs.BoundedArray((), np.int64, -1, 1), "a")
  assert signed == gym.spaces.Discrete(3, start=-1)
  box = space_from_dm_spec(specs.BoundedArray((2,), np.float32, -2.0, 2.0), "a")
  assert box.shape == (2,) and box.low.min() == -2.0 and box.high.max() == 2.0
  free = space_from_dm_spec(specs.Array((3,), np.float64), "o")
  assert np.isinf(free.low).all()
  ints = space_from_dm_spec(specs.Array((2,), np.int16), "o")
  assert ints.high.max() == np.iinfo(np.int16).max
  with pytest.raises(ValueError, match="not nested"):
    space_from_dm_spec({"x": specs.Array((), np.float32)}, "o")
  with pytest.raises(ValueError, match="not nested, not strings"):
    space_from_dm_spec(specs.StringArray(()), "o")


def test_dm_env_through_classic_factory():
  # The signed corridor shifts actions: learner action a -> env move a - 1.
  factory = f"{__name__}:make_corridor"
  with classic_env.create_environment(
    2, 0, env_id=factory, env_kwargs={"length": 2, "limit": 3, "signed": True}
  ) as env:
    assert env.observation_spec.dtype == "float32"
    assert env.action_spec.num_values == 3
    env.reset()
    right_and_stay = np.array([2, 1], np.int32)
    results = [env.step(right_and_stay) for _ in range(3)]
  np.testing.assert_array_equal(results[0].observation[:, 0], [1.0, 0.0])
  assert results[1].terminated.tolist() == [True, False]
  np.testing.assert_array_equal(results[1].observation[:, 0], [0.0, 0.0])
  assert results[2].truncated.tolist() == [False, True]
  np.testing.assert_array_equal(results[2].final_observation, [[0.0]])


# ------------------------------------------------------ runner / factories


class _RecordingEnv(gym.Env):
  observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float64)
  action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float64)

  def __init__(self):
    self.actions = []

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    return np.zeros(1), {}

  def step(self, action):
    self.actions.append(action)
    return np.zeros(1), 0.0, False, False, {}


def test_env_runner_clips_and_casts_continuous_actions():
  env = _RecordingEnv()
  runner = EnvRunner(env)
  assert runner.action_spec.dtype == "float32"
  obs = runner.reset(seed=0)
  assert obs.dtype == np.float32
  runner.step(np.array([5.0, -0.25], np.float32))
  sent = env.actions[-1]
  assert sent.dtype == np.float64
  np.testing.assert_array_equal(sent, [1.0, -0.25])


class _EndsBothWaysEnv(gym.Env):
  """Each step ends the episode by termination AND time limit at once."""

  observation_space = gym.spaces.Discrete(4, start=1)
  action_space = gym.spaces.Discrete(2)

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    return 1, {}

  def step(self, action):
    return 3, 1.0, True, True, {}


def test_env_runner_terminated_wins_over_truncated():
  runner = EnvRunner(_EndsBothWaysEnv())
  assert runner.observation_spec.num_values == 4
  assert runner.reset(seed=0) == 0  # Discrete observations start at 0
  obs, reward, terminated, truncated, final = runner.step(np.int32(1))
  assert (obs, reward, terminated, truncated, final) == (
    0,
    1.0,
    True,
    False,
    None,
  )


def test_gin_binding_names_select_the_env():
  gin.clear_config()
  try:
    gin.parse_config_files_and_bindings(
      [],
      [
        "classic.create_environment.env_id = 'Acrobot-v1'",
        "atari.create_environment.game = 'breakout'",
        "UnknownLearnerThing.value = 3",
      ],
      skip_unknown=True,
    )
    with classic_env.create_environment(1, 0) as env:
      assert env.observation_spec.shape == (6,)
      assert env.action_spec.num_values == 3
  finally:
    gin.clear_config()


def test_classic_unknown_id_lists_close_matches():
  with pytest.raises(ValueError, match="CartPole-v1"):
    classic_env.create_environment(1, 0, env_id="CartPol-v1")
  with pytest.raises(ValueError, match="module:callable"):
    classic_env.create_environment(1, 0, env_id="seed_rl.nothing:")
  with pytest.raises(ValueError, match="cannot import"):
    classic_env.create_environment(1, 0, env_id="seed_rl.no_module:make")
  with pytest.raises(ValueError, match="parallel="):
    classic_env.create_environment(1, 0, parallel="threads")


def test_mujoco_env_specs_and_step():
  with mujoco_env.create_environment(2, 0, env_id="HalfCheetah-v5") as env:
    assert env.observation_spec.shape == (17,)
    assert env.observation_spec.dtype == "float32"
    assert env.action_spec.shape == (6,) and env.action_spec.dtype == "float32"
    np.testing.assert_array_equal(env.action_spec.maximum, np.ones(6))
    env.reset()
    result = env.step(np.full((2, 6), 3.0, np.float32))  # clipped, no error
    assert result.observation.dtype == np.float32
  with mujoco_env.create_environment(
    1, 0, env_id="Pendulum-v1", max_episode_steps=2
  ) as env:
    env.reset()
    env.step(np.zeros((1, 1), np.float32))
    result = env.step(np.zeros((1, 1), np.float32))
    assert result.truncated.tolist() == [True]
    assert result.final_observation.shape == (1, 3)


def test_mujoco_rejects_discrete_and_unknown():
  with pytest.raises(ValueError, match="discrete action space"):
    mujoco_env.create_environment(1, 0, env_id="CartPole-v1")
  with pytest.raises(ValueError, match="Hopper-v5"):
    mujoco_env.create_environment(1, 0, env_id="Hoper-v5")


# --------------------------------------------------------------- actor loop


class FakeClient:
  """ActorClient stand-in: records batches, answers with `policy`."""

  def __init__(
    self, address, actor_id, num_envs, observation_spec, action_spec, policy
  ):
    self.address, self.actor_id, self.num_envs = address, actor_id, num_envs
    self.observation_spec, self.action_spec = observation_spec, action_spec
    self.policy = policy
    self.batches = []
    self.connected = self.closed = False

  def connect(self):
    self.connected = True

  @property
  def first_env_id(self):
    return self.actor_id * self.num_envs

  def step(self, batch):
    assert self.connected and not self.closed
    self.batches.append(batch)
    return self.policy(len(self.batches) - 1, batch)

  def close(self):
    self.closed = True


class SpyEnv(BatchedEnv):
  """Delegates to a real BatchedEnv and records the seed and close()."""

  def __init__(self, inner, seed):
    self.inner, self.seed, self.closed = inner, seed, False
    self.num_envs = inner.num_envs
    self.observation_spec = inner.observation_spec
    self.action_spec = inner.action_spec

  def reset(self):
    return self.inner.reset()

  def step(self, actions):
    return self.inner.step(actions)

  def close(self):
    self.closed = True
    self.inner.close()


def _run(
  policy,
  num_envs=3,
  actor_id=1,
  seed=100,
  max_steps=12,
  stop_event=None,
  limit=5,
):
  clients, envs = [], []

  def client_factory(*args):
    clients.append(FakeClient(*args, policy=policy))
    return clients[-1]

  def env_factory(n, s):
    envs.append(
      SpyEnv(classic_env.create_environment(n, s, max_episode_steps=limit), s)
    )
    return envs[-1]

  try:
    summary = actor_lib.run_actor(
      "fake:0",
      actor_id,
      num_envs,
      env_factory,
      seed,
      max_steps=max_steps,
      stop_event=stop_event,
      client_factory=client_factory,
    )
  finally:
    assert envs and envs[0].closed
    if clients:
      assert clients[0].closed
  return summary, clients[0], envs[0]


def test_actor_loop_sends_seed_step_batches():
  num_envs, actor_id, seed, steps = 3, 1, 100, 12
  actions = _cartpole_actions(steps, num_envs)
  summary, client, env = _run(
    lambda t, batch: actions[t], num_envs, actor_id, seed, steps
  )
  seeds = [seed + actor_id * num_envs + i for i in range(num_envs)]
  assert env.seed == seeds[0]
  reference = _reference_rollout("CartPole-v1", 5, seeds, actions)
  assert len(client.batches) == steps
  run_ids = client.batches[0].run_ids
  assert run_ids.dtype == np.int64 and run_ids.shape == (num_envs,)
  returns = np.zeros(num_envs)
  lengths = np.zeros(num_envs, int)
  episodes = 0
  for t, batch in enumerate(client.batches):
    ref = reference[t]
    np.testing.assert_array_equal(batch.env_ids, [3, 4, 5])
    assert batch.env_ids.dtype == np.int32
    np.testing.assert_array_equal(batch.run_ids, run_ids)
    np.testing.assert_array_equal(batch.observation, ref["observation"])
    assert batch.reward.dtype == np.float32
    assert batch.terminated.dtype == bool and batch.truncated.dtype == bool
    assert batch.episode_return.dtype == np.float32
    assert batch.episode_length.dtype == np.int32
    if t == 0:
      assert not batch.reward.any() and not batch.terminated.any()
      assert not batch.truncated.any()
      assert batch.final_observation.shape == (0, 4)
      assert batch.episode_return.shape == (0,)
      continue
    np.testing.assert_array_equal(batch.reward, ref["reward"])
    np.testing.assert_array_equal(batch.terminated, ref["terminated"])
    np.testing.assert_array_equal(batch.truncated, ref["truncated"])
    np.testing.assert_array_equal(
      batch.final_observation, ref["final_observation"]
    )
    returns += ref["reward"]
    lengths += 1
    ended = ref["terminated"] | ref["truncated"]
    np.testing.assert_array_equal(batch.episode_return, returns[ended])
    np.testing.assert_array_equal(batch.episode_length, lengths[ended])
    episodes += ended.sum()
    returns[ended] = 0
    lengths[ended] = 0
  assert episodes > 0
  assert summary.steps == steps and summary.env_steps == steps * num_envs
  assert summary.episodes >= episodes


@pytest.mark.parametrize(
  "bad, message",
  [
    (np.zeros(3, np.int64), "dtype int64, expected int32"),
    (np.zeros((3, 1), np.int32), r"shape \[3, 1\], expected \[3\]"),
    (np.array([0, 2, 1], np.int32), r"values \[2\] outside \[0, 2\)"),
    ([0, 1, 0], "expected a numpy array"),
  ],
)
def test_actor_rejects_bad_learner_actions(bad, message):
  with pytest.raises(ValueError, match=message):
    _run(lambda t, batch: bad)


def test_actor_stops_on_event():
  stop = threading.Event()

  def policy(t, batch):
    if t == 2:
      stop.set()
    return np.zeros(batch.num_envs, np.int32)

  summary, client, _ = _run(policy, max_steps=None, stop_event=stop)
  assert summary.steps == 3 and len(client.batches) == 3


def test_check_actions_continuous_rejects_nan():
  box = ArraySpec((2,), "float32", "action", minimum=-1.0, maximum=1.0)
  actor_lib.check_actions(np.full((2, 2), 7.0, np.float32), box, 2)
  with pytest.raises(ValueError, match="non-finite"):
    actor_lib.check_actions(np.full((2, 2), np.nan, np.float32), box, 2)


def test_main_unknown_env_lists_valid(capsys):
  with pytest.raises(SystemExit) as info:
    actor_main.parse_args(["--env", "doom", "--actor_id", "0"])
  assert info.value.code == 2
  err = capsys.readouterr().err
  assert "unknown environment 'doom'" in err and "classic vtrace" in err


def test_actor_closes_env_when_handshake_fails():
  envs = []

  class RejectingClient(FakeClient):
    def connect(self):
      raise SpecMismatchError("observation_spec.shape: learner [8], actor [4]")

  def env_factory(n, s):
    envs.append(SpyEnv(classic_env.create_environment(n, s), s))
    return envs[-1]

  with pytest.raises(SpecMismatchError, match="observation_spec.shape"):
    actor_lib.run_actor(
      "fake:0",
      0,
      2,
      env_factory,
      0,
      client_factory=lambda *args: RejectingClient(*args, policy=None),
    )
  assert envs[0].closed


def test_subprocess_build_failure_in_one_worker_stops_the_others(capfd):
  # Env 3 (worker 1's second env) fails to build; worker 0 built its envs and
  # waits for the shared block: it must exit quietly when told to close.
  env_fn = GymEnvFn(f"{__name__}:make_fails_in_worker_1")
  with pytest.raises(EnvWorkerError, match="env 3 .*construction"):
    SubprocessBatchedEnv(env_fn, 4, seed=0, num_workers=2)
  assert not [
    p
    for p in multiprocessing.active_children()
    if p.name.startswith("seed_rl-env-worker")
  ]
  assert "Traceback" not in capfd.readouterr().err


_builds: List[None] = []


def make_fails_in_worker_1():
  _builds.append(None)  # counted per process: each worker builds 2 envs
  if (
    multiprocessing.current_process().name == "seed_rl-env-worker-1"
    and len(_builds) == 2
  ):
    raise RuntimeError("cannot build this env")
  return gym.make("CartPole-v1")


# -------------------------------------------------------------- env groups


def _run_groups(policy, num_envs=4, env_groups=2, actor_id=1, **kwargs):
  clients, envs = [], []

  def client_factory(*args):
    clients.append(FakeClient(*args, policy=policy))
    return clients[-1]

  def env_factory(n, s):
    envs.append(SpyEnv(classic_env.create_environment(n, s), s))
    return envs[-1]

  try:
    return (
      actor_lib.run_actor(
        "fake:0",
        actor_id,
        num_envs,
        env_factory,
        100,
        client_factory=client_factory,
        env_groups=env_groups,
        **kwargs,
      ),
      clients,
      envs,
    )
  finally:
    assert envs and all(env.closed for env in envs)
    assert all(client.closed for client in clients)


def test_env_groups_keep_the_ungrouped_env_ids_and_seeds():
  summary, clients, envs = _run_groups(
    lambda t, batch: np.zeros(batch.num_envs, np.int32), max_steps=5
  )
  # Group g of actor 1 (K = 4, G = 2) is actor 2 + g with 2 envs: env ids
  # 4..7 and seeds 104..107, as actor 1 alone.
  assert sorted((c.actor_id, c.num_envs) for c in clients) == [(2, 2), (3, 2)]
  assert sorted(env.seed for env in envs) == [104, 106]
  ids = sorted(int(i) for c in clients for i in c.batches[0].env_ids)
  assert ids == [4, 5, 6, 7]
  # Each group steps max_steps batches of its own 2 envs.
  assert all(len(c.batches) == 5 for c in clients)
  assert summary.env_steps == 5 * 4 and summary.steps == 5


def test_a_failing_env_group_stops_the_others_and_raises():
  def policy(t, batch):
    if batch.env_ids[0] == 6 and t == 3:
      return np.full(batch.num_envs, 9, np.int32)  # outside CartPole's 2
    return np.zeros(batch.num_envs, np.int32)

  with pytest.raises(ValueError, match=r"values \[9, 9\] outside \[0, 2\)"):
    _run_groups(policy)


def test_env_groups_end_when_the_learner_finished_every_stream():
  from seed_rl.grpc.client import LearnerFinished

  def policy(t, batch):
    if t == 2:
      raise LearnerFinished("the learner finished training")
    return np.zeros(batch.num_envs, np.int32)

  with pytest.raises(LearnerFinished):
    _run_groups(policy)


@pytest.mark.parametrize("num_envs, env_groups", [(4, 3), (4, 0)])
def test_env_groups_must_divide_the_envs(num_envs, env_groups):
  built = []
  with pytest.raises(ValueError, match="env_groups"):
    actor_lib.run_actor(
      "fake:0",
      0,
      num_envs,
      lambda n, s: built.append(n),
      0,
      env_groups=env_groups,
    )
  assert not built  # refused before any env was built
