r"""Do two Atari emulators play a game alike under the same actions?

    benchmarks/parity/bin/python benchmarks/emulator_parity.py \
        [--games battle_zone,qbert] [--steps 2000] [--seed 0]

CleanRL's published Atari-5 curves (benchmarks/references.py) were made on
envpool, which builds its own ALE (0.7.5 in envpool 0.8.4, the release
this project compares with); this project's actors run ale-py 0.12.1.
This script steps one env of each under the same actions and compares the
screens: native size and colour (no resize, no grayscale: the emulation
alone), frame skip 4 with max-pooling of the last two frames, no no-op
starts, no sticky actions, no fire reset, whole games, rewards unclipped.
Sequences:

- `noop`: NOOP only for 300 agent steps: the game running without the
  player's controls;
- `random`: uniform random actions, each held for 1 to 8 agent steps (a
  seeded sequence, the same for both), until either game ends or --steps.

Per game and sequence it prints whether the reset screens are equal, the
agent steps compared, the first step whose screens differ (null: none),
the fraction of steps whose screens differ, the mean absolute pixel
difference over those, both returns and where each game ended. Screens
identical throughout are parity; screens that stay identical under NOOP
and differ once the player moves mean the emulators apply the player's
controls differently. The last line printed is one JSON object with every
game. Figures and what they mean for the reference curves:
benchmarks/RESULTS.md (the Atari-5 section).

envpool 0.8.4 needs NumPy 1 (under NumPy 2 it returns blank frames without
an error), so this runs from a venv of its own:
`python3 -m venv benchmarks/parity && benchmarks/parity/bin/pip install -r
benchmarks/requirements-emulator-parity.txt`. It needs neither TensorFlow
nor this project's package.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Dict, List, Optional, Union

import numpy as np

ATARI5 = ("battle_zone", "double_dunk", "name_this_game", "phoenix", "qbert")
DEVELOPMENT = ("pong", "space_invaders", "seaquest", "beam_rider")
NOOP_STEPS = 300
SCREEN = (210, 160, 3)  # the native screen: no resize, no grayscale
MAX_HOLD = 8  # a random action is held for 1..MAX_HOLD agent steps


def game_name(game: str) -> str:
  """'battle_zone' -> 'BattleZone', as envpool's ids spell it."""
  return "".join(part.title() for part in game.split("_"))


class Envpool:
  """One env of envpool's `GAME-v5` with the comparison's preprocessing."""

  def __init__(self, game: str, seed: int):
    import envpool

    self.name = "envpool " + envpool.__version__
    self._env = envpool.make(
      game_name(game) + "-v5",
      env_type="gymnasium",
      num_envs=1,
      seed=seed,
      img_height=210,
      img_width=160,
      gray_scale=False,
      stack_num=1,
      frame_skip=4,
      noop_max=1,  # envpool draws 0..noop_max-1 no-ops: none
      repeat_action_probability=0.0,
      use_fire_reset=False,
      episodic_life=False,
      reward_clip=False,
      max_episode_steps=27_000,
    )
    self.num_actions = int(self._env.action_space.n)

  def reset(self) -> np.ndarray:
    obs, _ = self._env.reset()
    return obs[0].transpose(1, 2, 0)  # [3, 210, 160] -> [210, 160, 3]

  def step(self, action: int):
    obs, reward, terminated, truncated, _ = self._env.step(
      np.array([action], np.int32)
    )
    ended = bool(terminated[0] or truncated[0])
    return obs[0].transpose(1, 2, 0), float(reward[0]), ended


class AlePy:
  """One env of ale-py's AtariVectorEnv with the game settings of the
  suite's actors (seed_rl/atari/env.py), but native colour screens and no
  no-op starts."""

  def __init__(self, game: str, seed: int):
    import ale_py

    self.name = "ale-py " + ale_py.__version__
    self._seed = seed
    self._env = ale_py.AtariVectorEnv(
      game,
      1,
      num_threads=1,
      stack_num=1,
      img_height=210,
      img_width=160,
      grayscale=False,
      maxpool=True,
      frameskip=4,
      noop_max=0,
      repeat_action_probability=0.0,
      max_num_frames_per_episode=108_000,
      full_action_space=False,
      episodic_life=False,
      reward_clipping=False,
      use_fire_reset=False,
    )
    self.num_actions = int(self._env.single_action_space.n)  # type: ignore[attr-defined]

  def reset(self) -> np.ndarray:
    obs, _ = self._env.reset(seed=self._seed)
    return obs.reshape(SCREEN)

  def step(self, action: int):
    obs, reward, terminated, truncated, _ = self._env.step(
      np.array([action], np.int64)
    )
    ended = bool(terminated[0] or truncated[0])
    return obs.reshape(SCREEN), float(reward[0]), ended


def action_sequence(
  kind: str, num_actions: int, steps: int, seed: int
) -> List[int]:
  """`steps` actions: NOOP (0) throughout, or random actions held 1..8 steps."""
  if kind == "noop":
    return [0] * steps
  rng = np.random.default_rng(seed)
  actions: List[int] = []
  while len(actions) < steps:
    actions += [int(rng.integers(num_actions))] * int(
      rng.integers(1, MAX_HOLD + 1)
    )
  return actions[:steps]


def compare(envs: List[Any], actions: List[int]) -> Dict[str, Any]:
  """Steps both envs under `actions` until either game ends."""
  frames = [env.reset() for env in envs]
  reset_equal = bool(np.array_equal(*frames))
  first_diff: Optional[int] = None
  differing, pixel_diff, steps = 0, 0.0, 0
  returns = [0.0, 0.0]
  ended_at: List[Optional[int]] = [None, None]
  for t, action in enumerate(actions, start=1):
    for i, env in enumerate(envs):
      frames[i], reward, ended = env.step(action)
      returns[i] += reward
      if ended:
        ended_at[i] = t
    steps = t
    if not np.array_equal(*frames):
      differing += 1
      pixel_diff += float(
        np.abs(frames[0].astype(np.int16) - frames[1].astype(np.int16)).mean()
      )
      if first_diff is None:
        first_diff = t
    if ended_at[0] is not None or ended_at[1] is not None:
      break
  return {
    "agent_steps": steps,
    "reset_frames_equal": reset_equal,
    "first_differing_step": first_diff,
    "differing_fraction": round(differing / max(steps, 1), 4),
    "mean_abs_pixel_diff": round(pixel_diff / differing, 3)
    if differing
    else 0.0,
    "returns": returns,
    "ended_at": ended_at,
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument(
    "--games",
    default=",".join(ATARI5 + DEVELOPMENT),
    help="comma-separated games (default: the Atari-5 and development games)",
  )
  parser.add_argument("--steps", type=int, default=2000)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()
  if args.steps < 1:
    parser.error(f"--steps must be >= 1, got {args.steps}")
  results: Dict[str, Any] = {}
  names: List[str] = []
  for game in args.games.split(","):
    envs: List[Union[Envpool, AlePy]] = [
      Envpool(game, args.seed),
      AlePy(game, args.seed),
    ]
    names = [env.name for env in envs]
    if envs[0].num_actions != envs[1].num_actions:
      raise SystemExit(
        f"{game}: {names[0]} has {envs[0].num_actions} actions, "
        f"{names[1]} {envs[1].num_actions}; the comparison needs the same set"
      )
    row = {
      kind: compare(
        envs,
        action_sequence(
          kind,
          envs[0].num_actions,
          NOOP_STEPS if kind == "noop" else args.steps,
          args.seed,
        ),
      )
      for kind in ("noop", "random")
    }
    print(json.dumps({"game": game, **row}), flush=True)
    results[game] = row
  print(json.dumps({"emulators": names, "seed": args.seed, "games": results}))


if __name__ == "__main__":
  main()
