"""Google Research Football for actors (the optional `football` domain).

gin binding names: `football.create_environment.scenario =
'academy_empty_goal_close'`, `football.create_environment.representation =
'simple115v2'`, ...

As SEED RL ran it: one controlled player (the active one, switching as the
game does), the 19 default actions, observations as the "super mini map"
(SMM: 4 uint8 planes of 72 x 96: left team, right team, ball, active
player) by default, or the `simple115v2` float vector, rewards `scoring` or
`scoring,checkpoints`. The learner stacks SMM frames (LearnerConfig.
frame_stack, like Atari), so one [72, 96, 4] frame per env step crosses the
wire. The engine runs headless: no window, no display.

Episode ends: a goal, the ball out of play or lost possession (academy
scenarios), or the scenario's clock running out (`game_duration`, e.g. 400
steps), are all reported as termination, as SEED RL did: the clock is part
of the game (a match ends), not a cap added by the runner.

gfootball is not in the default install: `scripts/install_football.sh`
builds its engine (Debian packages listed there) and `./run_local.sh
football ...` runs it the first time.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
from typing import Any, List, Optional

import gin
import gymnasium
import numpy as np

from seed_rl.actors.batched_env import BatchedEnv
from seed_rl.actors.factory import PARALLEL_KINDS, make_batched_env

# representation -> what the agent sees (gfootball's names).
REPRESENTATIONS = {
  "extracted": "SMM, uint8 [72, 96, 4] (SEED RL's choice)",
  "simple115v2": "float32 [115] (11 vs 11 scenarios only)",
}
REWARDS = ("scoring", "scoring,checkpoints")
INSTALL_HINT = (
  "Google Research Football is not installed; run "
  "scripts/install_football.sh (./run_local.sh football ... runs it the "
  "first time)"
)


def import_gfootball() -> Any:
  """gfootball.env, with seed_rl's `gym` compatibility layer; raises
  ImportError with the install command if the package is missing."""
  from seed_rl.football import gym_compat

  gym_compat.install()
  # gfootball logs a line per episode at INFO through absl; the actor's own
  # throughput lines already count episodes and returns.
  logging.getLogger("absl").setLevel(logging.WARNING)
  try:
    import gfootball_engine  # noqa: F401 (the engine: fails first if unbuilt)
    from gfootball import env as football
  except ImportError as e:
    raise ImportError(f"{INSTALL_HINT} ({e})") from None
  return football


def scenarios() -> List[str]:
  """The scenario names gfootball ships (e.g. 'academy_empty_goal_close')."""
  from gfootball.env import scenario_builder

  return sorted(
    s for s in scenario_builder.all_scenarios() if not s.startswith("test")
  )


def check_arguments(scenario: str, representation: str, rewards: str) -> None:
  """Raises ValueError naming the first argument that is not allowed."""
  if representation not in REPRESENTATIONS:
    raise ValueError(
      f"football.create_environment: representation {representation!r} is "
      f"unknown; allowed: {', '.join(REPRESENTATIONS)}"
    )
  if rewards not in REWARDS:
    raise ValueError(
      f"football.create_environment: rewards {rewards!r} is unknown; "
      f"allowed: {', '.join(repr(r) for r in REWARDS)}"
    )
  import_gfootball()
  known = scenarios()
  if scenario not in known:
    close = difflib.get_close_matches(scenario, known, n=3, cutoff=0.5)
    raise ValueError(
      f"football.create_environment: unknown scenario {scenario!r} (close "
      f"matches: {close or 'none'}); scenarios: {', '.join(known)}"
    )


class FootballGymEnv(gymnasium.Env):
  """One gfootball env under the gymnasium API (one controlled player).

  Seeding: gfootball draws each episode's engine seed from Python's global
  `random`, shared by every env of a process; here each episode's seed is
  drawn from this env's own generator, seeded by `reset(seed=...)`. The
  engine is still not bit-reproducible in the scenarios that are not
  `deterministic` (all academy ones): measured, two runs of one seed
  diverge within a few dozen steps, in one process or in two.
  """

  metadata = {"render_modes": []}

  def __init__(self, scenario: str, representation: str, rewards: str):
    check_arguments(scenario, representation, rewards)
    football = import_gfootball()
    self._env = football.create_environment(
      env_name=scenario,
      representation=representation,
      rewards=rewards,
      stacked=False,
      render=False,
      write_goal_dumps=False,
      write_full_episode_dumps=False,
      logdir="",
      number_of_left_players_agent_controls=1,
    )
    space = self._env.observation_space
    self._dtype = np.uint8 if representation == "extracted" else np.float32
    self.observation_space = gymnasium.spaces.Box(
      low=np.asarray(space.low, self._dtype),
      high=np.asarray(space.high, self._dtype),
      dtype=self._dtype,
    )
    if not isinstance(self._env.action_space, gymnasium.spaces.Discrete):
      raise ValueError(
        f"football: scenario {scenario!r} gives actions "
        f"{self._env.action_space}; seed_rl controls one player "
        "(Discrete actions)"
      )
    self.action_space = gymnasium.spaces.Discrete(int(self._env.action_space.n))
    self._rng: Optional[np.random.Generator] = None

  def reset(self, *, seed: Optional[int] = None, options=None):
    del options
    if seed is not None or self._rng is None:
      self._rng = np.random.default_rng(seed)
    config = self._env.unwrapped._config
    # Read by gfootball's scenario builder at the reset below.
    config._values["game_engine_random_seed"] = int(
      self._rng.integers(0, 2**31 - 1)
    )
    observation = self._env.reset()
    return np.asarray(observation, self._dtype), {}

  def step(self, action):
    observation, reward, done, info = self._env.step(int(action))
    info = {k: v for k, v in info.items() if k == "score_reward"}
    return (
      np.asarray(observation, self._dtype),
      float(reward),
      bool(done),
      False,
      info,
    )

  def close(self) -> None:
    if self._env is not None:
      self._env.close()
      self._env = None


@dataclasses.dataclass(frozen=True)
class FootballEnvFn:
  """Picklable `() -> FootballGymEnv` (subprocess workers build from it)."""

  scenario: str
  representation: str
  rewards: str

  def __call__(self) -> FootballGymEnv:
    return FootballGymEnv(self.scenario, self.representation, self.rewards)


@gin.configurable("football.create_environment")
def create_environment(
  num_envs: int,
  seed: int,
  scenario: str = "academy_empty_goal_close",
  representation: str = "extracted",
  rewards: str = "scoring",
  parallel: str = "inline",
  num_workers: Optional[int] = None,
  start_method: str = "forkserver",
) -> BatchedEnv:
  """K Football envs of `scenario`.

  Args:
    num_envs: K.
    seed: env i is seeded with `seed + i`.
    scenario: a gfootball scenario name (see `scenarios()`).
    representation: 'extracted' (SMM planes, default) or 'simple115v2'.
    rewards: 'scoring' (+1/-1 per goal) or 'scoring,checkpoints' (plus
      gfootball's 0.1 for each of 10 distance checkpoints towards goal).
    parallel: 'inline' (default: the K engines in the actor process,
      several actor processes use the cores; ~15% more env steps/s than
      'subprocess' measured with 4 envs on 2 busy cores) or 'subprocess'
      (shared-memory worker processes).
    num_workers, start_method: for 'subprocess', see make_batched_env.
  """
  if parallel not in PARALLEL_KINDS:
    raise ValueError(
      f"football.create_environment: parallel={parallel!r}; choose one of "
      f"{PARALLEL_KINDS}"
    )
  check_arguments(scenario, representation, rewards)
  return make_batched_env(
    FootballEnvFn(scenario, representation, rewards),
    num_envs,
    seed,
    parallel,
    num_workers,
    start_method,
  )
