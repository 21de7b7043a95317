"""Published learning curves to compare runs with, by name.

`--reference cleanrl:GAME` in plot_curves.py and compare_reference.py
stands for CleanRL's PPO on that Atari game (its Open RL Benchmark
curves): the mean over seeds of the episodic return (whole games, all
lives) against `global_step`, which counts agent steps of the
4-frame-skip environment, as our `perf/env_steps` does.

The points up to 8M agent steps were read off the published plots pixel by
pixel against their grid lines (about +-3-5% of full scale); the 10M points
are the exact means of CleanRL's results tables. Only points read off a
plot are listed; between them a comparison interpolates linearly (the
"~875" at 3M of Seaquest in RESULTS.md is such a midpoint). Sources, per
game:

- space_invaders, seaquest: openrlbenchmark `static/cleanrl_vs_baselines_atari.png`,
  `ppo_atari_envpool_xla_jax_truncation`;
- beam_rider: CleanRL docs `docs/rl-algorithms/ppo/BeamRiderNoFrameskip-v4.png`,
  `ppo_atari.py`;
- pong: CleanRL docs, `ppo_atari.py`.

benchmarks/RESULTS.md ("CleanRL references used for issue 20") has the
same table, and SpaceInvaders' 3M point in its session-8 table.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional

import numpy as np

# game: {agent steps: mean return}
CLEANRL_PPO_ATARI: Dict[str, Dict[float, float]] = {
  "space_invaders": {
    2e6: 530, 3e6: 630, 4e6: 660, 5e6: 760, 6e6: 810, 7e6: 860, 8e6: 990,
    10e6: 1164.26,
  },
  "seaquest": {
    2e6: 870, 4e6: 880, 5e6: 890, 6e6: 880, 7e6: 980, 8e6: 1160,
    10e6: 1203.30,
  },
  "beam_rider": {
    2e6: 600, 4e6: 1240, 5e6: 1450, 6e6: 1640, 7e6: 2020, 8e6: 2220,
    10e6: 2445.38,
  },
  "pong": {
    2e6: 12.9, 4e6: 19.1, 5e6: 19.6, 6e6: 19.7, 7e6: 20.2, 8e6: 20.4,
    10e6: 20.59,
  },
}  # fmt: skip


class Reference(NamedTuple):
  name: str
  xs: np.ndarray  # [N] agent steps, ascending
  ys: np.ndarray  # [N] returns
  game: Optional[str]  # the Atari game, where the curve is one


def named(text: str) -> Optional[Reference]:
  """The built-in curve `text` names ("cleanrl:GAME"), None if `text` is
  not of that form; ValueError naming the games there are if GAME is
  unknown."""
  source, sep, game = text.partition(":")
  if not sep or source.strip().lower() != "cleanrl" or "=" in game:
    return None
  game = game.strip()
  if game not in CLEANRL_PPO_ATARI:
    raise ValueError(
      f"--reference {text!r}: no built-in CleanRL curve for {game!r}; "
      f"there are: {', '.join(sorted(CLEANRL_PPO_ATARI))} (or give the "
      "points, NAME:X=Y,X=Y,...)"
    )
  points = sorted(CLEANRL_PPO_ATARI[game].items())
  return Reference(
    f"CleanRL ppo_atari {game}",
    np.array([x for x, _ in points]),
    np.array([y for _, y in points], dtype=np.float64),
    game,
  )
