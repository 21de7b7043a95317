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

--episodes states the number of episodes (e.g. 30). The episodes are
played with the run's own env settings unless the run's domain has an
evaluation protocol (seed_rl.common.evaluation: its flags, env settings
and JSON fields). Atari's (seed_rl/atari/evaluation.py) scores as the
papers do: --protocol noop30|sticky (default run: the run's settings),
--noop_max N, --sticky_actions P, --max_episode_frames F; the JSON line
then adds "game", "protocol" and "human_normalized_score".

--video FILE.mp4 records the first episode of env 0: gymnasium envs
(classic, MuJoCo) render RGB frames, Atari its colour screen (scaled 2x,
in real time: 15 fps); with --video_source agent, the image observations
the agent sees, scaled 4x (as envs that cannot render but see images
always are). Needs the `video` extra: pip install -e '.[video]'.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from seed_rl.common import evaluation
from seed_rl.common import saved_run
from seed_rl.common import tf_startup

VIDEO_EXTRA_HINT = "pip install -e '.[video]'"
VIDEO_SOURCES = ("game", "agent")


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


def _create_env(
  run, num_envs: int, seed: int, overrides: Dict[str, Any], render: bool
):
  """The run's env with the protocol's `overrides` (keyword arguments that
  win over the run's gin bindings), rendering RGB frames if `render`."""
  from seed_rl.actors import factory

  if render:
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame, headless
  with factory.rendering("rgb_array") if render else contextlib.nullcontext():
    return run.env_module.create_environment(
      num_envs=num_envs, seed=seed, **overrides
    )


def is_image(spec) -> bool:
  shape = tuple(spec.shape)
  return np.dtype(spec.dtype) == np.uint8 and (
    len(shape) == 2 or (len(shape) == 3 and shape[-1] in (1, 3))
  )


def evaluate(run, args: argparse.Namespace) -> Dict[str, Any]:
  """Plays `args.episodes` episodes with `run.agent` (a saved_run.LoadedRun)
  as `args` (build_parser's flags) say, under the evaluation protocol of
  the run's domain.

  Env i plays its share of the episodes (so short episodes are not
  over-counted); the video shows env 0's first episode at `args.fps`, or
  the protocol's `video_fps` (Atari: real time, 15; else 30).
  """
  episodes, seed, video = args.episodes, args.seed, args.video
  if episodes < 1 or args.num_envs < 1:
    raise ValueError("--episodes and --num_envs must be >= 1")
  if args.video_source not in VIDEO_SOURCES:
    raise ValueError(
      f"--video_source {args.video_source!r}; choose one of "
      f"{', '.join(VIDEO_SOURCES)}"
    )
  protocol = evaluation.domain_protocol(run.env)
  protocol.check(args)
  n = min(args.num_envs, episodes)
  quota = np.array([episodes // n + (i < episodes % n) for i in range(n)])
  render = bool(video) and args.video_source == "game"
  env = _create_env(run, n, seed, protocol.env_overrides(args), render)
  writer = None
  start = time.monotonic()
  try:
    if video:
      writer = _video_writer(video, args.fps or protocol.video_fps(env))
    returns, lengths, frames_written = _play(
      run,
      env,
      quota,
      args.greedy,
      writer,
      lambda observation: _video_frame(
        run, env, observation, args.video_source, protocol.render_scale
      ),
    )
  finally:
    env.close()
    if writer is not None:
      writer.close()
  result = _summary(run, returns, lengths, args.greedy, seed)
  result.update(protocol.extra_fields(args, env, result["mean_return"]))
  result["seconds"] = round(time.monotonic() - start, 2)
  if video:
    result["video"] = os.path.abspath(video)
    result["video_source"] = args.video_source
    result["video_frames"] = frames_written
  return result


def _play(
  run,
  env,
  quota: np.ndarray,
  greedy: bool,
  writer,
  video_frame: Callable[[np.ndarray], np.ndarray],
) -> Tuple[List[float], List[int], int]:
  """Steps the [N] envs of `env` until env i has finished quota[i] episodes,
  through the runtime's per-env state (frame stacks, recurrent state,
  previous actions) and the agent's `act`; `writer` (if any) gets the
  `video_frame(observation)` of env 0's first episode.

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
      frame = video_frame(observation)
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
  run, env, observation: np.ndarray, video_source: str, render_scale: int
) -> np.ndarray:
  """Env 0's rendered RGB frame, scaled `render_scale` times (Atari's colour
  screen: 2), else (video_source 'agent', or an env that cannot render)
  its image observation, scaled 4x."""
  if video_source == "game":
    frame = env.render()
    if frame is not None:
      return (
        observation_frame(frame, render_scale) if render_scale > 1 else frame
      )
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


def build_parser(
  protocols: Optional[List[evaluation.EvaluationProtocol]] = None,
) -> argparse.ArgumentParser:
  """The command line: episodes, video, the flags of the evaluation
  `protocols` (default: the built-in domains', e.g. Atari's --protocol)
  and play flags."""
  p = saved_run.tool_parser("python -m seed_rl.evaluate", __doc__)
  p.add_argument("--episodes", type=int, default=10)
  _add_video_flags(p)
  if protocols is None:
    protocols = evaluation.builtin_protocols()
  for protocol in protocols:
    protocol.add_flags(p)
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
    help="the env's rendered frames (Atari: the game's colour screen; the "
    "default) or the agent's image input (Atari: 84x84 grayscale)",
  )
  p.add_argument(
    "--fps",
    type=float,
    default=None,
    help="video frame rate (default: real time for Atari, 15; else 30)",
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


def _run_env(argv: Optional[Sequence[str]]) -> Optional[str]:
  """The env of the run that --logdir (its run.json) or --env names, read
  before the full command line (None if neither says)."""
  pre = argparse.ArgumentParser(add_help=False)
  pre.add_argument("--logdir")
  pre.add_argument("--env")
  known, _ = pre.parse_known_args(argv)
  if known.env or not known.logdir:
    return known.env
  try:
    return saved_run.read_run_spec(known.logdir).get("env")
  except (OSError, ValueError):  # the run's load says what is wrong
    return None


def main(argv=None) -> int:
  env = _run_env(argv)
  protocols = evaluation.builtin_protocols()
  try:  # a plugin domain's protocol adds its flags
    own = evaluation.domain_protocol(env) if env else evaluation.PLAIN
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if own is not evaluation.PLAIN and own not in protocols:
    protocols.append(own)
  parser = build_parser(protocols)
  args = parser.parse_args(argv)
  try:  # out-of-range settings fail before the run loads
    evaluation.check_flags(parser, args, protocols, env)
  except ValueError as e:
    parser.error(str(e))
  tf = tf_startup.import_tensorflow()

  tf.random.set_seed(args.seed)
  return saved_run.run_tool(
    args, lambda run: evaluate(run, args), errors=(ValueError, RuntimeError)
  )


if __name__ == "__main__":
  sys.exit(main())
