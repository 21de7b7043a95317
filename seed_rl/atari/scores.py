"""Random and human reference scores of the 57 Atari games, and the
human-normalised score: (score - random) / (human - random), so 0 is a
uniformly random policy and 1 a professional human game tester.

The numbers are the "Random" and "Human" columns of the per-game table in
the appendix of Badia et al., 2020, "Agent57: Outperforming the Atari Human
Benchmark" (the table that also lists R2D2 and MuZero): the scores first
tabulated for DQN (Mnih et al., 2015, "Human-level control through deep
reinforcement learning") and extended to all 57 games by the DQN-family
papers after it. DeepMind's DQN Zoo (`dqn_zoo/atari_data.py`), and code
that copies its table, has the same numbers for 56 games; for Video Pinball
it has random = 16,256.9 where Agent57 has 0.0, so Video Pinball's
normalised scores from the two tables differ.

Game names are ALE ROM ids in snake_case, as `atari.create_environment.game`
takes them ('pong', 'space_invaders', 'ms_pacman', ...).
"""

from __future__ import annotations

import difflib
from typing import Dict, NamedTuple, Tuple


class ReferenceScores(NamedTuple):
  random: float
  human: float


# game: (random, human)
_SCORES: Dict[str, Tuple[float, float]] = {
  "alien": (227.8, 7127.7),
  "amidar": (5.8, 1719.5),
  "assault": (222.4, 742.0),
  "asterix": (210.0, 8503.3),
  "asteroids": (719.1, 47388.7),
  "atlantis": (12850.0, 29028.1),
  "bank_heist": (14.2, 753.1),
  "battle_zone": (2360.0, 37187.5),
  "beam_rider": (363.9, 16926.5),
  "berzerk": (123.7, 2630.4),
  "bowling": (23.1, 160.7),
  "boxing": (0.1, 12.1),
  "breakout": (1.7, 30.5),
  "centipede": (2090.9, 12017.0),
  "chopper_command": (811.0, 7387.8),
  "crazy_climber": (10780.5, 35829.4),
  "defender": (2874.5, 18688.9),
  "demon_attack": (152.1, 1971.0),
  "double_dunk": (-18.6, -16.4),
  "enduro": (0.0, 860.5),
  "fishing_derby": (-91.7, -38.7),
  "freeway": (0.0, 29.6),
  "frostbite": (65.2, 4334.7),
  "gopher": (257.6, 2412.5),
  "gravitar": (173.0, 3351.4),
  "hero": (1027.0, 30826.4),
  "ice_hockey": (-11.2, 0.9),
  "jamesbond": (29.0, 302.8),
  "kangaroo": (52.0, 3035.0),
  "krull": (1598.0, 2665.5),
  "kung_fu_master": (258.5, 22736.3),
  "montezuma_revenge": (0.0, 4753.3),
  "ms_pacman": (307.3, 6951.6),
  "name_this_game": (2292.3, 8049.0),
  "phoenix": (761.4, 7242.6),
  "pitfall": (-229.4, 6463.7),
  "pong": (-20.7, 14.6),
  "private_eye": (24.9, 69571.3),
  "qbert": (163.9, 13455.0),
  "riverraid": (1338.5, 17118.0),
  "road_runner": (11.5, 7845.0),
  "robotank": (2.2, 11.9),
  "seaquest": (68.4, 42054.7),
  "skiing": (-17098.1, -4336.9),
  "solaris": (1236.3, 12326.7),
  "space_invaders": (148.0, 1668.7),
  "star_gunner": (664.0, 10250.0),
  "surround": (-10.0, 6.5),
  "tennis": (-23.8, -8.3),
  "time_pilot": (3568.0, 5229.2),
  "tutankham": (11.4, 167.6),
  "up_n_down": (533.4, 11693.2),
  "venture": (0.0, 1187.5),
  "video_pinball": (0.0, 17667.9),
  "wizard_of_wor": (563.5, 4756.5),
  "yars_revenge": (3092.9, 54576.9),
  "zaxxon": (32.5, 9173.3),
}

GAMES: Tuple[str, ...] = tuple(sorted(_SCORES))


def close_game_names(game: str, names) -> list:
  """Up to 5 of `names` close to `game`, read as snake_case ('SpaceInvaders'
  -> 'space_invaders'), for error messages."""
  snake = "".join("_" + c.lower() if c.isupper() else c for c in game)
  return difflib.get_close_matches(
    snake.lstrip("_"), list(names), n=5, cutoff=0.6
  )


def reference_scores(game: str) -> ReferenceScores:
  """(random, human) of `game`.

  Raises:
    ValueError: `game` is not one of the 57 (the message names close
      matches and all of them).
  """
  if game not in _SCORES:
    matches = close_game_names(game, GAMES)
    raise ValueError(
      f"no reference scores for Atari game {game!r} (close matches: "
      f"{matches or 'none'}); the 57 games with random and human scores "
      f"are: {', '.join(GAMES)}"
    )
  return ReferenceScores(*_SCORES[game])


def human_normalized(game: str, score: float) -> float:
  """(score - random) / (human - random) of `game`: 0 random, 1 human."""
  random, human = reference_scores(game)
  return (float(score) - random) / (human - random)
