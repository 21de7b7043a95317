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
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional

import numpy as np

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
  return spec.dtype == np.uint8 and (
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
  from seed_rl.common.agent_api import ActInputs  # pylint: disable=g-import-not-at-top
  from seed_rl.common.env_state import EnvStateTable  # pylint: disable=g-import-not-at-top

  if episodes < 1 or num_envs < 1:
    raise ValueError("--episodes and --num_envs must be >= 1")
  n = min(num_envs, episodes)
  quota = np.array([episodes // n + (i < episodes % n) for i in range(n)])
  agent = run.agent
  writer = _video_writer(video, fps) if video else None
  if writer is not None:
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame, headless
    with factory.rendering("rgb_array"):
      env = run.create_environment(n, seed)
  else:
    env = run.create_environment(n, seed)
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
  returns: List[float] = []
  lengths: List[int] = []
  done_count = np.zeros(n, np.int64)
  ep_return = np.zeros(n, np.float64)
  ep_length = np.zeros(n, np.int64)
  frames_written = 0
  recording = writer is not None
  start = time.monotonic()
  try:
    observation = env.reset()
    reward = np.zeros(n, np.float32)
    new_episode = np.ones(n, bool)
    while (done_count < quota).any():
      if recording and writer is not None:
        frame = env.render()
        if frame is None:
          if not is_image(run.observation_spec):
            raise RuntimeError(
              f"the {run.env} environment cannot render and its "
              "observations are not images; no video"
            )
          frame = observation_frame(observation[0])
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
      ep_return += result.reward
      ep_length += 1
      ended = result.terminated | result.truncated
      for i in np.flatnonzero(ended):
        if done_count[i] < quota[i]:
          returns.append(float(ep_return[i]))
          lengths.append(int(ep_length[i]))
          done_count[i] += 1
        if i == 0:
          recording = False
        ep_return[i], ep_length[i] = 0.0, 0
      observation, reward, new_episode = (
        result.observation,
        result.reward,
        ended,
      )
  finally:
    env.close()
    if writer is not None:
      writer.close()
  r = np.asarray(returns, np.float64)
  out_json: Dict[str, Any] = {
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
    "seconds": round(time.monotonic() - start, 2),
  }
  if video:
    out_json["video"] = os.path.abspath(video)
    out_json["video_frames"] = frames_written
  return out_json


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
    prog="python -m seed_rl.evaluate",
    description=__doc__,
    formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  p.add_argument("--logdir", required=True, help="the run's --logdir")
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
  p.add_argument("--env", default=None, help="for logdirs without run.json")
  p.add_argument("--agent", default=None, help="for logdirs without run.json")
  return p


def main(argv=None) -> int:
  args = build_parser().parse_args(argv)
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from seed_rl.common import saved_run  # pylint: disable=g-import-not-at-top

  tf.random.set_seed(args.seed)
  try:
    run = saved_run.load_run(args.logdir, args.env, args.agent)
    result = evaluate(
      run,
      args.episodes,
      greedy=args.greedy,
      seed=args.seed,
      num_envs=args.num_envs,
      video=args.video,
      fps=args.fps,
    )
  except (ValueError, RuntimeError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(json.dumps(result), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
