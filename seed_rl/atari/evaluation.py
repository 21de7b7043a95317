"""Atari's evaluation protocol for `python -m seed_rl.evaluate`: the
episodes the papers score, and the game and human-normalised score in the
JSON line (seed_rl.common.evaluation says how the tool uses it).

--protocol picks the episodes (the envs always play full games, all lives,
raw rewards):

  run     the run's own env settings (its gin config; the default)
  noop30  up to 30 no-op frames at each start (ale_py draws 0-29), no
          sticky actions, episodes capped at 108,000 frames (Mnih et al.,
          2015; SEED RL's setup)
  sticky  sticky actions with p = 0.25, no no-op starts, 108,000-frame cap
          (Machado et al., 2018; Dopamine)

and --noop_max N, --sticky_actions P, --max_episode_frames F override one
setting on top of it. The JSON line then also has "game", "protocol" (the
settings played: noop_max, sticky_actions, max_episode_frames, ...) and
"human_normalized_score": (mean_return - random) / (human - random) with
the random and human scores of seed_rl.atari.scores (null for a game
outside its 57).

--video records the game's colour screen (ALE's 210x160 frames, scaled 2x;
the same game as the scored env 0, played by a twin env with its seed and
actions: see seed_rl.atari.env) in real time (15 fps: 60 Hz over
frameskip 4); --video_source agent shows the 84x84 frames the agent sees.

Neither ALE nor TensorFlow is imported here (the env that played is
handed in): the tool lists these flags for every run.
"""

from __future__ import annotations

import argparse
from typing import Any, Dict, Optional

from seed_rl.atari import scores
from seed_rl.common.evaluation import EvaluationProtocol

MAX_EPISODE_FRAMES = 108_000  # 30 minutes of play at 60 Hz
# --protocol: atari.create_environment overrides ('run': none).
PROTOCOLS: Dict[str, Dict[str, Any]] = {
  "run": {},
  "noop30": {
    "noop_max": 30,
    "repeat_action_probability": 0.0,
    "max_num_frames_per_episode": MAX_EPISODE_FRAMES,
  },
  "sticky": {
    "noop_max": 0,
    "repeat_action_probability": 0.25,
    "max_num_frames_per_episode": MAX_EPISODE_FRAMES,
  },
}


def atari_settings(
  protocol: str = "run",
  noop_max: Optional[int] = None,
  sticky_actions: Optional[float] = None,
  max_episode_frames: Optional[int] = None,
) -> Dict[str, Any]:
  """`atari.create_environment` keyword arguments of `protocol` (see the
  module docstring) with the given settings overriding it ({} for 'run'
  without overrides: the run's own settings).

  Raises:
    ValueError: an unknown protocol or a setting out of range.
  """
  if protocol not in PROTOCOLS:
    raise ValueError(
      f"unknown --protocol {protocol!r}; choose one of {', '.join(PROTOCOLS)}"
    )
  settings = dict(PROTOCOLS[protocol])
  if noop_max is not None:
    if noop_max < 0:
      raise ValueError(f"--noop_max must be >= 0, got {noop_max}")
    settings["noop_max"] = int(noop_max)
  if sticky_actions is not None:
    if not 0.0 <= sticky_actions <= 1.0:
      raise ValueError(
        f"--sticky_actions must be in [0, 1], got {sticky_actions}"
      )
    settings["repeat_action_probability"] = float(sticky_actions)
  if max_episode_frames is not None:
    if max_episode_frames < 1:
      raise ValueError(
        f"--max_episode_frames must be >= 1, got {max_episode_frames}"
      )
    settings["max_num_frames_per_episode"] = int(max_episode_frames)
  return settings


def protocol_report(name: str, env) -> Dict[str, Any]:
  """The JSON line's "protocol": what the Atari episodes were."""
  played = env.settings
  return {
    "name": name,
    "noop_max": played["noop_max"],
    "sticky_actions": played["repeat_action_probability"],
    "max_episode_frames": played["max_num_frames_per_episode"],
    "frameskip": played["frameskip"],
    "use_fire_reset": played["use_fire_reset"],
    "full_games": played["full_games"],
  }


def _settings(args: argparse.Namespace) -> Dict[str, Any]:
  return atari_settings(
    args.protocol, args.noop_max, args.sticky_actions, args.max_episode_frames
  )


class AtariEvaluation(EvaluationProtocol):
  """--protocol and its overrides; the game, the settings played and the
  human-normalised score; the colour screen, scaled 2x, in real time."""

  name = "Atari"
  flags = ("protocol", "noop_max", "sticky_actions", "max_episode_frames")
  render_scale = 2

  def add_flags(self, parser: argparse.ArgumentParser) -> None:
    atari = parser.add_argument_group(
      "Atari evaluation protocol (episodes are full games, all lives)"
    )
    atari.add_argument(
      "--protocol",
      choices=tuple(PROTOCOLS),
      default="run",
      help="run: the run's env settings; noop30: up to 30 no-op frames at "
      "each start, no sticky actions, 108,000-frame cap; sticky: sticky "
      "actions p = 0.25, no no-ops, 108,000-frame cap",
    )
    atari.add_argument(
      "--noop_max",
      type=int,
      default=None,
      help="override: up to N no-op frames at each episode start",
    )
    atari.add_argument(
      "--sticky_actions",
      type=float,
      default=None,
      metavar="P",
      help="override: repeat the previous action with probability P",
    )
    atari.add_argument(
      "--max_episode_frames",
      type=int,
      default=None,
      metavar="F",
      help="override: cap episodes at F emulator frames (F/4 agent steps "
      "after the no-op start), reported as truncation",
    )

  def check(self, args: argparse.Namespace) -> None:
    _settings(args)

  def env_overrides(self, args: argparse.Namespace) -> Dict[str, Any]:
    settings = _settings(args)
    if args.video and args.video_source == "game":
      settings["render_mode"] = "rgb_array"  # env 0's colour twin
    return settings

  def extra_fields(
    self, args: argparse.Namespace, env, mean_return: float
  ) -> Dict[str, Any]:
    return {
      "game": env.game,
      "protocol": protocol_report(args.protocol, env),
      "human_normalized_score": (
        scores.human_normalized(env.game, mean_return)
        if env.game in scores.GAMES
        else None
      ),
    }

  def video_fps(self, env) -> float:
    """Real time: 60 Hz over the frameskip."""
    return 60.0 / env.settings["frameskip"]


EVALUATION_PROTOCOL = AtariEvaluation()
