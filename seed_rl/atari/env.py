"""Atari environments for actors: ale_py's C++ vector env behind BatchedEnv.

gin binding names: `atari.create_environment.game = 'pong'`,
`atari.create_environment.num_threads = 2`, ...

Preprocessing happens in ALE's C++ threads, following SEED RL's Atari setup
(DQN-style, Mnih et al. 2015, as in gym's AtariPreprocessing): grayscale 84x84,
frameskip 4 with max-pooling over the last two frames, up to 30 no-op starts,
minimal action set, episodes capped at 108,000 frames (27,000 agent steps,
reported as truncation), full episodes (no life-loss terminals: a lost life
is only reported, in `StepResult.life_lost`, and the learner decides what
it means, see LearnerConfig.terminal_on_life_loss), raw rewards (agents
clip). Frame stacking is NOT done here: the learner stacks frames per
env, so only one [84, 84] uint8 frame per step crosses the wire.

The no-op start is in emulator frames (as gym's NoopResetEnv under a
frame-skip wrapper); the episode cap counts the frames of the agent's steps
after it. `render_mode='rgb_array'` (seed_rl.evaluate's colour video) adds
a twin of env 0 that plays the same game in colour.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

import ale_py
from ale_py import roms
import gin
from gymnasium.vector import AutoresetMode
import numpy as np

from seed_rl.actors.batched_env import BatchedEnv
from seed_rl.actors.batched_env import StepResult
from seed_rl.actors.batched_env import spec_from_space
from seed_rl.atari import scores
from seed_rl.common.specs import ArraySpec

FRAME_SHAPE = (84, 84)
SCREEN_SHAPE = (210, 160)  # ALE's native screen, every game
FRAMESKIP = 4  # emulator frames per agent step


def check_game(game: str) -> None:
  """Raises ValueError naming close matches unless `game` is an ALE ROM."""
  valid = roms.get_all_rom_ids()
  if game not in valid:
    matches = scores.close_game_names(game, valid)
    raise ValueError(
      f"unknown Atari game {game!r}; ALE game names are snake_case "
      f"(close matches: {matches or 'none'}); valid games: "
      f"{', '.join(valid)}"
    )


def _check_arguments(
  game: str,
  num_envs: int,
  noop_max: int,
  repeat_action_probability: float,
  max_num_frames_per_episode: int,
  render_mode: Optional[str],
) -> None:
  """Raises ValueError naming the first AtariBatchedEnv argument out of
  range."""
  check_game(game)
  if num_envs < 1:
    raise ValueError(f"num_envs must be >= 1, got {num_envs}")
  if not 0.0 <= repeat_action_probability <= 1.0:
    raise ValueError(
      "repeat_action_probability must be in [0, 1], got "
      f"{repeat_action_probability}"
    )
  if noop_max < 0 or max_num_frames_per_episode < 1:
    raise ValueError(
      f"noop_max must be >= 0 and max_num_frames_per_episode >= 1, got "
      f"{noop_max} and {max_num_frames_per_episode}"
    )
  if render_mode not in (None, "rgb_array"):
    raise ValueError(
      f"render_mode={render_mode!r}; Atari envs render 'rgb_array' only"
    )


def _game_kwargs(
  noop_max: int,
  repeat_action_probability: float,
  max_num_frames_per_episode: int,
  use_fire_reset: bool,
) -> Dict[str, Any]:
  """AtariVectorEnv arguments that fix the game's dynamics (the env's and
  its colour twin's alike)."""
  return dict(
    frameskip=FRAMESKIP,
    noop_max=noop_max,
    repeat_action_probability=repeat_action_probability,
    max_num_frames_per_episode=max_num_frames_per_episode,
    full_action_space=False,
    episodic_life=False,
    reward_clipping=False,
    use_fire_reset=use_fire_reset,
    autoreset_mode=AutoresetMode.SAME_STEP,
  )


def _agent_vector_env(
  game: str, num_envs: int, num_threads: int, game_kwargs: Dict[str, Any]
) -> ale_py.AtariVectorEnv:
  """The K envs the agent sees: grayscale 84x84, max-pooled frames."""
  return ale_py.AtariVectorEnv(
    game,
    num_envs,
    num_threads=num_threads,
    stack_num=1,
    img_height=FRAME_SHAPE[0],
    img_width=FRAME_SHAPE[1],
    grayscale=True,
    maxpool=True,
    **game_kwargs,
  )


def _colour_twin(
  game: str, game_kwargs: Dict[str, Any]
) -> ale_py.AtariVectorEnv:
  """One env playing env 0's game in colour at the native screen size."""
  return ale_py.AtariVectorEnv(
    game,
    1,
    num_threads=1,
    stack_num=1,
    img_height=SCREEN_SHAPE[0],
    img_width=SCREEN_SHAPE[1],
    grayscale=False,
    maxpool=False,  # the screen as shown, not pooled colours
    **game_kwargs,
  )


class AtariBatchedEnv(BatchedEnv):
  """K Atari games stepped by ale_py.AtariVectorEnv in C++ threads.

  Uses ALE's same-step autoreset, which is SEED's semantics: the observation
  of an env whose episode ended is already the first frame of its next
  episode, and `info['final_obs']` holds the ended episode's last frame.
  Env i is seeded with `seed + i` on the first reset.

  With render_mode='rgb_array', `render` returns env 0's screen in colour
  ([210, 160, 3] uint8, the last emulator frame of each step): a one-env
  twin with env 0's seed, settings and actions plays the same game, since
  an env's no-op starts and sticky actions draw only on its own seed (the
  image settings draw on nothing). Every step checks that the twin's
  reward, end flags, lives and frame counter equal env 0's and raises
  RuntimeError if they ever differ. It costs one more env of emulation.
  """

  def __init__(
    self,
    game: str,
    num_envs: int,
    seed: int,
    num_threads: Optional[int] = None,
    noop_max: int = 30,
    repeat_action_probability: float = 0.0,
    max_num_frames_per_episode: int = 108_000,
    use_fire_reset: bool = False,
    render_mode: Optional[str] = None,
  ):
    _check_arguments(
      game,
      num_envs,
      noop_max,
      repeat_action_probability,
      max_num_frames_per_episode,
      render_mode,
    )
    if num_threads is None:
      num_threads = min(num_envs, os.cpu_count() or 1)
    self.num_envs = num_envs
    self.game = game
    # What the episodes are (seed_rl.evaluate reports them).
    self.settings = {
      "noop_max": int(noop_max),
      "repeat_action_probability": float(repeat_action_probability),
      "max_num_frames_per_episode": int(max_num_frames_per_episode),
      "use_fire_reset": bool(use_fire_reset),
      "frameskip": FRAMESKIP,
      "full_games": True,  # episodic_life=False: no life-loss terminals
    }
    self._seed = seed
    self._seeded = False
    self._lives: Optional[np.ndarray] = None  # int [K] after the last step
    # The game's dynamics; the twin (render) shares them.
    game_kwargs = _game_kwargs(
      noop_max,
      repeat_action_probability,
      max_num_frames_per_episode,
      use_fire_reset,
    )
    self._env: Optional[ale_py.AtariVectorEnv] = _agent_vector_env(
      game, num_envs, num_threads, game_kwargs
    )
    self._twin: Optional[ale_py.AtariVectorEnv] = None
    self._screen: Optional[np.ndarray] = None
    if render_mode is not None:
      self._twin = _colour_twin(game, game_kwargs)
    self.observation_spec = ArraySpec(
      FRAME_SHAPE,
      "uint8",
      "observation",
      minimum=np.asarray(0),
      maximum=np.asarray(255),
    )
    self.action_spec = spec_from_space(self._env.single_action_space, "action")

  def _frames(self, stacked: np.ndarray) -> np.ndarray:
    # [N, stack_num=1, 84, 84] -> [N, 84, 84]
    return stacked.reshape((stacked.shape[0],) + FRAME_SHAPE)

  def _live_env(self) -> ale_py.AtariVectorEnv:
    if self._env is None:
      raise RuntimeError("AtariBatchedEnv is closed")
    return self._env

  def reset(self) -> np.ndarray:
    seed = None if self._seeded else self._seed
    obs, info = self._live_env().reset(seed=seed)
    self._lives = np.asarray(info["lives"])
    self._seeded = True
    if self._twin is not None:
      screen, _ = self._twin.reset(seed=seed)
      self._screen = screen[0, 0]
    return self._frames(obs)

  def step(self, actions: np.ndarray) -> StepResult:
    actions = np.asarray(actions, np.int32)
    obs, reward, terminated, truncated, info = self._live_env().step(actions)
    if self._twin is not None:
      self._step_twin(actions[:1], reward, terminated, truncated, info)
    terminated = np.asarray(terminated, bool)
    truncated = np.logical_and(truncated, np.logical_not(terminated))
    if truncated.any():
      final = self._frames(info["final_obs"][truncated])
    else:
      final = np.zeros((0,) + FRAME_SHAPE, np.uint8)
    return StepResult(
      self._frames(obs),
      reward.astype(np.float32),
      terminated,
      truncated,
      final,
      self._life_lost(info["lives"], terminated | truncated),
    )

  def _life_lost(self, lives: np.ndarray, ended: np.ndarray) -> np.ndarray:
    """bool [K]: a life lost in this step by a game that goes on. As
    Baselines' EpisodicLifeEnv, a drop to 0 lives is not one: some games
    (Q*bert) sit at 0 for a few frames before the game over, which is then
    the episode's end. Ended envs' `lives` are already their next game's."""
    lives = np.asarray(lives)
    previous, self._lives = self._lives, lives
    if previous is None:
      return np.zeros(lives.shape, bool)
    return (lives < previous) & (lives > 0) & ~ended

  def _step_twin(self, action, reward, terminated, truncated, info) -> None:
    """Steps the colour twin with env 0's action; raises if its game is not
    env 0's."""
    assert self._twin is not None
    screen, t_reward, t_term, t_trunc, t_info = self._twin.step(action)
    self._screen = screen[0, 0]
    ours, twin = [
      (r[0], te[0], tr[0], i["lives"][0], i["episode_frame_number"][0])
      for r, te, tr, i in (
        (reward, terminated, truncated, info),
        (t_reward, t_term, t_trunc, t_info),
      )
    ]
    if ours != twin:
      raise RuntimeError(
        "the colour twin of Atari env 0 diverged from it (reward, "
        f"terminated, truncated, lives, episode frame: {ours} vs {twin}); "
        "its frames would not show the scored game"
      )

  def render(self) -> Optional[np.ndarray]:
    """Env 0's screen [210, 160, 3] uint8 after the last reset or step
    (render_mode='rgb_array'), else None."""
    return None if self._screen is None else self._screen.copy()

  def close(self) -> None:
    if self._env is not None:
      self._env.close()
      self._env = None
    if self._twin is not None:
      self._twin.close()
      self._twin = None


@gin.configurable("atari.create_environment", denylist=["render_mode"])
def create_environment(
  num_envs: int,
  seed: int,
  game: str = "pong",
  num_threads: Optional[int] = None,
  noop_max: int = 30,
  repeat_action_probability: float = 0.0,
  max_num_frames_per_episode: int = 108_000,
  use_fire_reset: bool = False,
  render_mode: Optional[str] = None,
) -> BatchedEnv:
  """K Atari envs of `game` (observation [84, 84] uint8, Discrete actions).

  Args:
    num_envs: K.
    seed: env i is seeded with `seed + i`.
    game: ALE ROM name in snake_case ('pong', 'ms_pacman', ...).
    num_threads: ALE worker threads; default min(K, cpu count): one thread
      per core is enough since each thread steps whole envs. On the shared
      2-core dev box Pong ran ~3.8k env steps/s for K=4..16 with 1, 2 or K
      threads under load from other processes, and up to ~7k with 2 idle
      cores.
    noop_max: no-op frames at each episode start: ale_py draws 0 to
      noop_max - 1 of them from the env's own seed (gym's NoopResetEnv
      draws 1 to noop_max); 0 or 1: none.
    repeat_action_probability: sticky actions. 0.0 as in SEED RL's Atari runs
      (gym 'NoFrameskip-v4' envs); 0.25 gives the Machado et al. protocol.
    max_num_frames_per_episode: episode cap in emulator frames (108,000 =
      30 minutes of play), reported as truncation.
    use_fire_reset: press FIRE after resets (off, as in SEED RL).
    render_mode: 'rgb_array' for `render` (env 0's colour screen, from a
      twin env: see AtariBatchedEnv); not a gin parameter.
  """
  return AtariBatchedEnv(
    game,
    num_envs,
    seed,
    num_threads,
    noop_max,
    repeat_action_probability,
    max_num_frames_per_episode,
    use_fire_reset,
    render_mode,
  )
