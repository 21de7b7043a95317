"""Published learning curves to compare runs with, by name.

`--reference cleanrl:GAME` in plot_curves.py and compare_reference.py
stands for CleanRL's PPO on that Atari game (its Open RL Benchmark
curves): the mean over seeds of the episodic return (whole games, all
lives) against `global_step`, which counts agent steps of the
4-frame-skip environment, as our `perf/env_steps` does (the plots' own
median-HNS data starts at x = 1,024, one iteration of 8 envs x 128 steps).

The points up to 8M agent steps were read off the published plots pixel by
pixel against their tick marks (about +-3-5% of full scale; on steep
stretches the curve's own jaggedness over +-0.1M is larger); the 10M
points are the exact means of the results tables. The points below 2M
of the four development games, and Breakout's, were read later by a
script (the curve's pixels by column, against the gridlines and tick
marks), which read the points above within 1% of the earlier hand
readings (Q*bert's within 1.7% at every listed point; Breakout's curve
at 10M within 0.8 of the table's 465.90). Only points read off a
plot are listed; between them a comparison interpolates linearly.
Sources, per game:

- space_invaders, seaquest, breakout and the Atari-5 games (battle_zone,
  double_dunk, name_this_game, phoenix, qbert): openrlbenchmark
  `static/cleanrl_vs_baselines_atari.png` (commit 27851fc7, 2023-06-05),
  the orange `ppo_atari_envpool_xla_jax_truncation` curves (3 seeds, a
  100-point rolling mean of `charts/avg_episodic_return`); 10M from
  `static/cleanrl_vs_baselines_atari.md`;
- beam_rider: CleanRL docs `docs/rl-algorithms/ppo/BeamRiderNoFrameskip-v4.png`,
  `ppo_atari.py`;
- pong: CleanRL docs, `ppo_atari.py`.

`CLEANRL_MEDIAN_HNS_57` is the same CleanRL runs' median human-normalised
score over all 57 games (openrlbenchmark
`static/cleanrl_vs_baselines_hns_median.pkl`, exact values), and
`atari5_median` the 57-game median that the Atari-5 regression predicts
from five games' scores (Aitchison, Sweetser and Hutter, ICML 2023; its
weights from maitchison/PPO `tools/plot_util.py`, commit d3e32282, which
a least-squares refit on the Atari-5 repository's `dataset.csv`
reproduces).
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional

import numpy as np

# game: {agent steps: mean return}
CLEANRL_PPO_ATARI: Dict[str, Dict[float, float]] = {
  "space_invaders": {
    0.5e6: 305, 1e6: 435, 1.5e6: 505, 2e6: 530, 3e6: 630, 4e6: 660,
    5e6: 760, 6e6: 810, 7e6: 860, 8e6: 990,
    10e6: 1164.26,
  },
  "seaquest": {
    0.5e6: 785, 1e6: 820, 1.5e6: 850, 2e6: 870, 4e6: 880, 5e6: 890,
    6e6: 880, 7e6: 980, 8e6: 1160,
    10e6: 1203.30,
  },
  "beam_rider": {
    0.5e6: 535, 1e6: 545, 1.5e6: 550, 2e6: 600, 4e6: 1240, 5e6: 1450,
    6e6: 1640, 7e6: 2020, 8e6: 2220,
    10e6: 2445.38,
  },
  "pong": {
    0.5e6: -19.5, 1e6: -8.9, 1.25e6: -3.3, 1.5e6: 5.0, 1.75e6: 9.6,
    2e6: 12.9, 4e6: 19.1, 5e6: 19.6, 6e6: 19.7, 7e6: 20.2, 8e6: 20.4,
    10e6: 20.59,
  },
  # Held out: no setting was measured on it before its suite run.
  "breakout": {
    0.5e6: 14.3, 1e6: 25.0, 1.5e6: 38.5, 2e6: 56.3, 2.5e6: 77.4,
    3e6: 102.4, 4e6: 186, 5e6: 250, 6e6: 294, 7e6: 340, 8e6: 375,
    10e6: 465.90,
  },
  # Atari-5: evaluation games, never tuned on.
  "battle_zone": {
    0.5e6: 9900, 1e6: 14670, 1.5e6: 16530, 2e6: 17390, 2.5e6: 16440,
    3e6: 16590, 4e6: 17790, 5e6: 18900, 6e6: 18670, 7e6: 19560,
    8e6: 20330, 10e6: 20424.17,
  },
  "double_dunk": {
    0.5e6: -14.8, 1e6: -13.3, 1.5e6: -15.0, 2e6: -16.2, 2.5e6: -15.7,
    3e6: -16.8, 4e6: -16.6, 5e6: -13.9, 6e6: -15.7, 7e6: -14.3,
    8e6: -14.0, 10e6: -6.72,
  },
  "name_this_game": {
    0.5e6: 2940, 1e6: 4900, 1.5e6: 5130, 2e6: 5030, 2.5e6: 5200,
    3e6: 5390, 4e6: 5480, 5e6: 5360, 6e6: 5620, 7e6: 5690, 8e6: 5620,
    10e6: 5939.28,
  },
  "phoenix": {
    0.5e6: 2920, 1e6: 3990, 1.5e6: 4220, 2e6: 4930, 2.5e6: 5440,
    3e6: 5540, 4e6: 6220, 5e6: 6380, 6e6: 7970, 7e6: 8910, 8e6: 11110,
    10e6: 14847.46,
  },
  "qbert": {
    0.5e6: 580, 1e6: 1090, 1.5e6: 2320, 2e6: 3720, 2.5e6: 4000,
    3e6: 4270, 4e6: 7170, 5e6: 10960, 6e6: 13390, 7e6: 14330,
    8e6: 14430, 10e6: 17318.50,
  },
}  # fmt: skip

# The emulator under each CleanRL curve. This project's actors run ale-py
# 0.12.1 (seed_rl/atari/env.py); no game's frames are identical between
# the two under the same actions (benchmarks/emulator_parity.py), so every
# comparison crosses emulators, and where learning itself was seen to
# differ by emulator, EMULATOR_EFFECTS says so.
# ppo_atari_envpool_xla_jax_truncation ran on envpool, which builds its
# own ALE; the release is not in what was read (CleanRL's pyproject.toml
# asks for envpool ^0.6.4). This project's comparisons ran envpool 0.8.4,
# whose ALE is 0.7.5.
ENVPOOL = "envpool (release not published; compared here: 0.8.4, ALE 0.7.5)"
CLEANRL_EMULATOR: Dict[str, str] = {
  game: ENVPOOL for game in CLEANRL_PPO_ATARI
} | {
  # ppo_atari.py's docs curves: CleanRL's pyproject.toml pins ale-py
  # 0.7.4 for its `atari` extra.
  "pong": "ale-py 0.7.4",
  "beam_rider": "ale-py 0.7.4",
}
# game: what the same agent did on the reference's emulator and on ale-py
# 0.12.1 (benchmarks/RESULTS.md, the Atari-5 section).
EMULATOR_EFFECTS: Dict[str, str] = {
  "battle_zone": (
    "on envpool 0.8.4 CleanRL's update (vtrace_cleanrl.gin; 1.01x at "
    "0.7M agent steps, one seed) and SB3's PPO follow CleanRL's curve; "
    "on ale-py 0.12.1 neither left random play by 0.5-0.73M (two seeds "
    "of the former, one of SB3), and the accelerator overlay was near it "
    "to 3.1M (0.19x)"
  ),
}

# agent steps: CleanRL's median human-normalised score over the 57 games.
CLEANRL_MEDIAN_HNS_57: Dict[float, float] = {
  0.5e6: 0.083, 1e6: 0.147, 2e6: 0.277, 3e6: 0.321, 4e6: 0.430,
  5e6: 0.499, 10e6: 0.923,
}  # fmt: skip

# The Atari-5 regression: log10(1 + median HNS%) = sum of w * log10(1 +
# max(HNS%, 0)) over the five games, no intercept (relative error ~10% on
# final scores of the 44 algorithms it was fit on, all with medians above
# 40%; at a few million agent steps it is an indication).
ATARI5_WEIGHTS: Dict[str, float] = {
  "battle_zone": 0.3819751237831753,
  "double_dunk": 0.0679099488887574,
  "name_this_game": 0.310804148620847,
  "phoenix": 0.12412619402774641,
  "qbert": 0.08048518286466755,
}


def atari5_median(hns: Dict[str, float]) -> float:
  """The 57-game median human-normalised score (a fraction, 1 = human)
  predicted from the five games' human-normalised scores (fractions);
  ValueError naming the games missing."""
  missing = sorted(set(ATARI5_WEIGHTS) - set(hns))
  if missing:
    raise ValueError(f"atari5_median needs all five games; missing {missing}")
  log_median = sum(
    w * np.log10(1.0 + max(100.0 * hns[game], 0.0))
    for game, w in ATARI5_WEIGHTS.items()
  )
  return float((10.0**log_median - 1.0) / 100.0)


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
