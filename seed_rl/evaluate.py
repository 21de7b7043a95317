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

--video FILE.mp4 records the first episode of env 0: gymnasium envs
(classic, MuJoCo) render RGB frames; envs that cannot render but see images
(Atari) are shown as the frames the agent sees, scaled up 4x. Needs the
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

VIDEO_EXTRA_HINT = "pip install -e '.[video]'"


def _video_writer(path: str, fps: float):
  """An imageio ffmpeg writer, or a clear error naming the extra."""
  try:
    import imageio.v2 as imageio  # pylint: disable=g-import-not-at-top
    import imageio_ffmpeg  # noqa: F401  # pylint: disable=g-import-not-at-top,unused-import
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


def is_image(spec) -> bool:
  shape = tuple(spec.shape)
  return np.dtype(spec.dtype) == np.uint8 and (
    len(shape) == 2 or (len(shape) == 3 and shape[-1] in (1, 3))
  )


def evaluate(
  run,
  episodes: int,
  greedy: bool = True,
  seed: int = 0,
  num_envs: int = 1,
  video: Optional[str] = None,
  fps: float = 30.0,
) -> Dict[str, Any]:
  """Plays `episodes` episodes with `run.agent` (a saved_run.LoadedRun).

  Env i plays its share of the episodes (so short episodes are not
  over-counted); the video shows env 0's first episode.
  """
  from seed_rl.actors import factory  # pylint: disable=g-import-not-at-top

  if episodes < 1 or num_envs < 1:
    raise ValueError("--episodes and --num_envs must be >= 1")
  n = min(num_envs, episodes)
  quota = np.array([episodes // n + (i < episodes % n) for i in range(n)])
  writer = _video_writer(video, fps) if video else None
  if writer is not None:
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame, headless
    with factory.rendering("rgb_array"):
      env = run.create_environment(n, seed)
  else:
    env = run.create_environment(n, seed)
  start = time.monotonic()
  try:
    returns, lengths, frames_written = _play(run, env, quota, greedy, writer)
  finally:
    env.close()
    if writer is not None:
      writer.close()
  result = _summary(run, returns, lengths, greedy, seed)
  result["seconds"] = round(time.monotonic() - start, 2)
  if video:
    result["video"] = os.path.abspath(video)
    result["video_frames"] = frames_written
  return result


def _play(
  run, env, quota: np.ndarray, greedy: bool, writer
) -> Tuple[List[float], List[int], int]:
  """Steps the [N] envs of `env` until env i has finished quota[i] episodes,
  through the runtime's per-env state (frame stacks, recurrent state,
  previous actions) and the agent's `act`; `writer` (if any) gets the frames
  of env 0's first episode.

  Returns:
    (returns, lengths) of the counted episodes, in the order they ended, and
    the number of video frames written.
  """
  from seed_rl.common.agent_api import ActInputs  # pylint: disable=g-import-not-at-top
  from seed_rl.common.env_state import EnvStateTable  # pylint: disable=g-import-not-at-top

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
      writer.append_data(_even(_video_frame(run, env, observation)))
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


def _video_frame(run, env, observation: np.ndarray) -> np.ndarray:
  """Env 0's rendered RGB frame, or its image observation scaled up."""
  frame = env.render()
  if frame is None:
    if not is_image(run.observation_spec):
      raise RuntimeError(
        f"the {run.env} environment cannot render and its "
        "observations are not images; no video"
      )
    frame = observation_frame(observation[0])
  return frame


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
  p = saved_run.tool_parser("python -m seed_rl.evaluate", __doc__)
  p.add_argument("--episodes", type=int, default=10)
  p.add_argument(
    "--video", default=None, help="write the first episode to this .mp4"
  )
  p.add_argument("--fps", type=float, default=30.0, help="video frame rate")
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
  return p


def main(argv=None) -> int:
  args = build_parser().parse_args(argv)
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

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
    ),
    errors=(ValueError, RuntimeError),
  )


if __name__ == "__main__":
  sys.exit(main())
