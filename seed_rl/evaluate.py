"""Score and watch a trained agent: `python -m seed_rl.evaluate --logdir DIR`.

Loads the newest checkpoint of a run (its run.json and operative_config.gin
say which env and agent), plays N episodes in this process (no gRPC, no
actors) through the runtime's own per-env state (`EnvStateTable`: frame
stacking, recurrent state, previous action) and the agent's `act`, greedy
by default (`eval_mask`: argmax / mean action; R2D2 keeps its evaluation
epsilon), and prints one JSON line:

  {"episodes": N, "mean_return": ..., "std_return": ..., "min_return": ...,
   "max_return": ..., "returns": [...], "episode_lengths": [...],
   "learner_step": ..., "env_steps": ..., "checkpoint": "...", ...}

Atari runs: --protocol picks the episodes the papers score (the envs
always play full games, all lives, raw rewards):

  run     the run's own env settings (its gin config; the default)
  noop30  up to 30 no-op frames at each start (ale_py draws 0-29), no
          sticky actions, episodes capped at 108,000 frames (Mnih et al.,
          2015; SEED RL's setup)
  sticky  sticky actions with p = 0.25, no no-op starts, 108,000-frame cap
          (Machado et al., 2018; Dopamine)

and --noop_max N, --sticky_actions P, --max_episode_frames F override one
setting on top of it. --episodes states the number of episodes (e.g. 30).
The JSON line then also has "game", "protocol" (the settings played:
noop_max, sticky_actions, max_episode_frames, ...) and
"human_normalized_score": (mean_return - random) / (human - random) with
the random and human scores of seed_rl.atari.scores (null for a game
outside its 57).

--video FILE.mp4 records the first episode of env 0: gymnasium envs
(classic, MuJoCo) render RGB frames; Atari records the game's colour
screen (ALE's 210x160 frames, scaled 2x; the same game as the scored env 0,
played by a twin env with its seed and actions) or, with
--video_source agent, the 84x84 grayscale frames the agent sees, scaled 4x
(as envs that cannot render but see images always are). Atari videos play
in real time by default (15 fps: 60 Hz over frameskip 4). Needs the
`video` extra: pip install -e '.[video]'.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from seed_rl.common import saved_run
from seed_rl.common import tf_startup

VIDEO_EXTRA_HINT = "pip install -e '.[video]'"
ATARI_ENV_MODULE = "seed_rl.atari.env"
MAX_EPISODE_FRAMES = 108_000  # 30 minutes of play at 60 Hz
# --protocol: create_environment overrides of Atari runs ('run': none).
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
VIDEO_SOURCES = ("game", "agent")
DEFAULT_FPS = 30.0


def _video_writer(path: str, fps: float):
  """An imageio ffmpeg writer, or a clear error naming the extra."""
  try:
    import imageio.v2 as imageio
    import imageio_ffmpeg  # noqa: F401
  except ImportError as e:
    raise RuntimeError(
      f"--video needs imageio with its ffmpeg plugin ({e}); install the "
      f"video extra: {VIDEO_EXTRA_HINT}"
    ) from None
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  # macro_block_size=1: keep the frame size (frames are cropped to even
  # sizes, which H.264 with yuv420p needs).
  return imageio.get_writer(path, fps=fps, macro_block_size=1)


def observation_frame(observation: np.ndarray, scale: int = 4) -> np.ndarray:
  """An image observation ([H, W] or [H, W, 1|3] uint8) as RGB, upscaled."""
  frame = np.asarray(observation)
  if frame.ndim == 3 and frame.shape[-1] == 1:
    frame = frame[..., 0]
  if frame.ndim == 2:
    frame = np.stack([frame] * 3, axis=-1)
  return np.repeat(np.repeat(frame, scale, axis=0), scale, axis=1)


def _even(frame: np.ndarray) -> np.ndarray:
  h, w = frame.shape[0] // 2 * 2, frame.shape[1] // 2 * 2
  return np.ascontiguousarray(frame[:h, :w, :3])


def is_atari(run) -> bool:
  """Whether `run` (a saved_run.LoadedRun) plays seed_rl's Atari envs."""
  return getattr(run.env_module, "__name__", None) == ATARI_ENV_MODULE


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


def _create_env(
  run,
  num_envs: int,
  seed: int,
  settings: Dict[str, Any],
  video: bool,
  video_source: str,
):
  """The run's env with `settings` (Atari runs), rendering for `video`."""
  from seed_rl.actors import factory

  if not is_atari(run):
    if settings:
      raise ValueError(
        "--protocol, --noop_max, --sticky_actions and --max_episode_frames "
        f"apply to Atari runs; this run's env is {run.env}"
      )
    if not video:
      return run.create_environment(num_envs, seed)
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame, headless
    with factory.rendering("rgb_array"):
      return run.create_environment(num_envs, seed)
  kwargs = dict(settings)
  if video and video_source == "game":
    kwargs["render_mode"] = "rgb_array"
  # Explicit arguments win over the run's gin bindings.
  return run.env_module.create_environment(
    num_envs=num_envs, seed=seed, **kwargs
  )


def is_image(spec) -> bool:
  shape = tuple(spec.shape)
  return np.dtype(spec.dtype) == np.uint8 and (
    len(shape) == 2 or (len(shape) == 3 and shape[-1] in (1, 3))
  )


def evaluate(  # noqa: PLR0913 (the evaluation protocol's options)
  run,
  episodes: int,
  greedy: bool = True,
  seed: int = 0,
  num_envs: int = 1,
  video: Optional[str] = None,
  fps: Optional[float] = None,
  protocol: str = "run",
  noop_max: Optional[int] = None,
  sticky_actions: Optional[float] = None,
  max_episode_frames: Optional[int] = None,
  video_source: str = "game",
) -> Dict[str, Any]:
  """Plays `episodes` episodes with `run.agent` (a saved_run.LoadedRun).

  Env i plays its share of the episodes (so short episodes are not
  over-counted); the video shows env 0's first episode. `protocol` and the
  settings after it apply to Atari runs (see the module docstring);
  `fps` None: real time for Atari (15), else 30.
  """
  if episodes < 1 or num_envs < 1:
    raise ValueError("--episodes and --num_envs must be >= 1")
  if video_source not in VIDEO_SOURCES:
    raise ValueError(
      f"--video_source {video_source!r}; choose one of "
      f"{', '.join(VIDEO_SOURCES)}"
    )
  settings = atari_settings(
    protocol, noop_max, sticky_actions, max_episode_frames
  )
  n = min(num_envs, episodes)
  quota = np.array([episodes // n + (i < episodes % n) for i in range(n)])
  env = _create_env(run, n, seed, settings, bool(video), video_source)
  writer = None
  start = time.monotonic()
  try:
    if video:
      writer = _video_writer(video, fps or _natural_fps(run, env))
    returns, lengths, frames_written = _play(
      run, env, quota, greedy, writer, video_source
    )
  finally:
    env.close()
    if writer is not None:
      writer.close()
  result = _summary(run, returns, lengths, greedy, seed)
  if is_atari(run):
    from seed_rl.atari import scores

    result["game"] = env.game
    result["protocol"] = protocol_report(protocol, env)
    result["human_normalized_score"] = (
      scores.human_normalized(env.game, result["mean_return"])
      if env.game in scores.GAMES
      else None
    )
  result["seconds"] = round(time.monotonic() - start, 2)
  if video:
    result["video"] = os.path.abspath(video)
    result["video_source"] = video_source
    result["video_frames"] = frames_written
  return result


def _natural_fps(run, env) -> float:
  """Real time for Atari (60 Hz over the frameskip), else DEFAULT_FPS."""
  if is_atari(run):
    return 60.0 / env.settings["frameskip"]
  return DEFAULT_FPS


def _play(
  run,
  env,
  quota: np.ndarray,
  greedy: bool,
  writer,
  video_source: str = "game",
) -> Tuple[List[float], List[int], int]:
  """Steps the [N] envs of `env` until env i has finished quota[i] episodes,
  through the runtime's per-env state (frame stacks, recurrent state,
  previous actions) and the agent's `act`; `writer` (if any) gets the frames
  of env 0's first episode.

  Returns:
    (returns, lengths) of the counted episodes, in the order they ended, and
    the number of video frames written.
  """
  from seed_rl.common.agent_api import ActInputs
  from seed_rl.common.env_state import EnvStateTable

  agent, n = run.agent, len(quota)
  state = EnvStateTable(
    n,
    run.observation_spec,
    run.action_spec,
    agent.initial_core_state,
    run.frame_stack,
  )
  ids = np.arange(n)
  # R2D2's per-env epsilons (sampling mode) are indexed by training env id.
  agent_ids = (ids % max(int(agent.num_envs), 1)).astype(np.int32)
  eval_mask = np.full(n, greedy)
  episodes = _Episodes(quota)
  frames_written = 0
  recording = writer is not None
  observation = env.reset()
  reward = np.zeros(n, np.float32)
  new_episode = np.ones(n, bool)
  while not episodes.complete:
    if recording and writer is not None:
      frame = _video_frame(run, env, observation, video_source)
      writer.append_data(_even(frame))
      frames_written += 1
    state.reset(ids[new_episode])
    core, prev_action = state.gather(ids)
    stacked = state.stacked(ids, observation)
    out = agent.act(
      ActInputs(
        env_ids=agent_ids,
        observation=stacked,
        prev_action=prev_action,
        reward=reward,
        done=new_episode,
        core_state=core,
        eval_mask=eval_mask,
      )
    )
    action = np.asarray(out.action, run.action_spec.dtype)
    state.scatter(ids, tuple(out.core_state), action)
    result = env.step(action)
    ended = result.terminated | result.truncated
    episodes.add(result.reward, ended)
    recording = recording and not ended[0]
    observation, reward, new_episode = (
      result.observation,
      result.reward,
      ended,
    )
  return episodes.returns, episodes.lengths, frames_written


class _Episodes:
  """Running return and length of each of N envs; keeps the first quota[i]
  episodes env i finishes (returns and lengths in the order they end)."""

  def __init__(self, quota: np.ndarray):
    n = len(quota)
    self.quota = quota
    self.returns: List[float] = []
    self.lengths: List[int] = []
    self._done = np.zeros(n, np.int64)
    self._return = np.zeros(n, np.float64)
    self._length = np.zeros(n, np.int64)

  @property
  def complete(self) -> bool:
    return not (self._done < self.quota).any()

  def add(self, reward: np.ndarray, ended: np.ndarray) -> None:
    """One step of every env: reward [N], ended [N] bool."""
    self._return += reward
    self._length += 1
    for i in np.flatnonzero(ended):
      if self._done[i] < self.quota[i]:
        self.returns.append(float(self._return[i]))
        self.lengths.append(int(self._length[i]))
        self._done[i] += 1
      self._return[i], self._length[i] = 0.0, 0


def _video_frame(
  run, env, observation: np.ndarray, video_source: str = "game"
) -> np.ndarray:
  """Env 0's rendered RGB frame (Atari's colour screen, scaled 2x), else
  (video_source 'agent', or an env that cannot render) its image
  observation, scaled 4x."""
  if video_source == "game":
    frame = env.render()
    if frame is not None:
      return observation_frame(frame, scale=2) if is_atari(run) else frame
  if not is_image(run.observation_spec):
    if video_source == "agent":
      raise RuntimeError(
        f"--video_source agent shows image observations; the {run.env} "
        "environment's are not images"
      )
    raise RuntimeError(
      f"the {run.env} environment cannot render and its "
      "observations are not images; no video"
    )
  return observation_frame(observation[0])


def _summary(
  run, returns: List[float], lengths: List[int], greedy: bool, seed: int
) -> Dict[str, Any]:
  """The JSON line's statistics of the episodes and the run's identity."""
  r = np.asarray(returns, np.float64)
  return {
    "env": run.env,
    "agent": run.agent_name,
    "episodes": len(returns),
    "mode": "greedy" if greedy else "sample",
    "mean_return": float(r.mean()),
    "std_return": float(r.std()),
    "min_return": float(r.min()),
    "max_return": float(r.max()),
    "mean_length": float(np.mean(lengths)),
    "returns": [round(x, 4) for x in returns],
    "episode_lengths": lengths,
    "learner_step": run.learner_step,
    "env_steps": run.env_steps,
    "checkpoint": run.checkpoint,
    "seed": seed,
  }


def build_parser() -> argparse.ArgumentParser:
  """The command line: episodes, video, Atari protocol and play flags."""
  p = saved_run.tool_parser("python -m seed_rl.evaluate", __doc__)
  p.add_argument("--episodes", type=int, default=10)
  _add_video_flags(p)
  _add_atari_flags(p)
  _add_play_flags(p)
  return p


def _add_video_flags(p: argparse.ArgumentParser) -> None:
  """--video and how it is recorded (--video_source, --fps)."""
  p.add_argument(
    "--video", default=None, help="write the first episode to this .mp4"
  )
  p.add_argument(
    "--video_source",
    choices=VIDEO_SOURCES,
    default="game",
    help="Atari video: the game's colour screen (default) or the agent's "
    "84x84 grayscale input",
  )
  p.add_argument(
    "--fps",
    type=float,
    default=None,
    help="video frame rate (default: real time for Atari, 15; else 30)",
  )


def _add_atari_flags(p: argparse.ArgumentParser) -> None:
  """The Atari evaluation protocol and its overrides (a flag group)."""
  atari = p.add_argument_group(
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


def _add_play_flags(p: argparse.ArgumentParser) -> None:
  """How the episodes are played: --greedy/--sample, --seed, --num_envs."""
  mode = p.add_mutually_exclusive_group()
  mode.add_argument(
    "--greedy",
    dest="greedy",
    action="store_true",
    default=True,
    help="deterministic actions, as --num_eval_actors (default)",
  )
  mode.add_argument(
    "--sample",
    dest="greedy",
    action="store_false",
    help="actions as training envs draw them",
  )
  p.add_argument("--seed", type=int, default=0, help="env (and TF) seed")
  p.add_argument(
    "--num_envs",
    type=int,
    default=1,
    help="envs played side by side (each plays its share of episodes)",
  )


def main(argv=None) -> int:
  parser = build_parser()
  args = parser.parse_args(argv)
  try:  # out-of-range settings fail before the run loads
    atari_settings(
      args.protocol, args.noop_max, args.sticky_actions, args.max_episode_frames
    )
  except ValueError as e:
    parser.error(str(e))
  tf = tf_startup.import_tensorflow()

  tf.random.set_seed(args.seed)
  return saved_run.run_tool(
    args,
    lambda run: evaluate(
      run,
      args.episodes,
      greedy=args.greedy,
      seed=args.seed,
      num_envs=args.num_envs,
      video=args.video,
      fps=args.fps,
      protocol=args.protocol,
      noop_max=args.noop_max,
      sticky_actions=args.sticky_actions,
      max_episode_frames=args.max_episode_frames,
      video_source=args.video_source,
    ),
    errors=(ValueError, RuntimeError),
  )


if __name__ == "__main__":
  sys.exit(main())
