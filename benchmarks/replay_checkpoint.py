"""What keeping the replay in checkpoints costs: bytes on disk and seconds
to save and to restore (LearnerConfig.checkpoint_replay).

    python benchmarks/replay_checkpoint.py                  # every shape
    python benchmarks/replay_checkpoint.py --only dqn_atari --dir /tmp/x

Each shape is a replay as an agent's default Atari or CartPole config holds
it, filled to capacity with random data: R2D2's sequences (frames stored
once) and DQN's transitions (frame blocks). One JSON line per shape:
items, the replay's bytes in memory, the archive's bytes, seconds to copy
out and write (fsync included) and to read and put back.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Callable, Dict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from seed_rl.common import replay_state  # noqa: E402
from seed_rl.common.replay import PrioritizedReplay  # noqa: E402
from seed_rl.common.transitions import TransitionReplay  # noqa: E402


def r2d2_sequences(capacity: int, steps: int, frame: tuple) -> Callable:
  """A prioritized replay of `capacity` sequences of `steps` frames
  (R2D2 with frames stored once: [k-1 + T+1, H, W] uint8 per sequence);
  `make(seed, fill=False)` gives it empty."""

  def make(seed: int, fill: bool = True) -> PrioritizedReplay:
    rng = np.random.default_rng(seed)
    replay = PrioritizedReplay(capacity, 0.9, 0.6, seed=seed)
    if not fill:
      return replay
    batch = 64
    for start in range(0, capacity, batch):
      n = min(batch, capacity - start)
      replay.insert(
        {
          "observation": rng.integers(0, 255, (n, steps) + frame, np.uint8),
          "reward": rng.normal(size=(n, steps)).astype(np.float32),
          "action": rng.integers(0, 18, (n, steps)).astype(np.int32),
          "core_h": rng.normal(size=(n, 512)).astype(np.float32),
          "core_c": rng.normal(size=(n, 512)).astype(np.float32),
        },
        rng.uniform(0.1, 2.0, n),
      )
    return replay

  return make


def dqn_transitions(capacity: int) -> Callable:
  """DQN's Atari transition replay (frame blocks of 41-step unrolls)."""

  def make(seed: int, fill: bool = True) -> TransitionReplay:
    rng = np.random.default_rng(seed)
    replay = TransitionReplay(
      capacity, 32, 1, 1e-9, 1e12, 16, 40, 0.99, 3, seed=seed,
      prioritized=True, frame_stack_shape=(84, 84, 4),
    )  # fmt: skip
    from seed_rl.common.agent_api import Unroll

    steps = 41
    while fill and len(replay.replay) < capacity:
      frames = rng.integers(1, 255, (16, steps + 3, 84, 84), np.uint8)
      stacks = np.stack([frames[:, c : c + steps] for c in range(4)], -1)
      zeros = np.zeros((16, steps), np.float32)
      replay.add(
        Unroll(
          env_ids=np.arange(16, dtype=np.int32), observation=stacks,
          reward=zeros, terminated=np.zeros((16, steps), bool),
          truncated=np.zeros((16, steps), bool), bootstrap_value=zeros,
          prev_action=np.zeros((16, steps), np.int32),
          action=np.zeros((16, steps), np.int32), value=zeros, extras={},
          core_state=(), policy_version=np.zeros((16, steps), np.int64),
        )
      )  # fmt: skip
    return replay

  return make


SHAPES: Dict[str, Callable] = {
  # seed_rl/atari/gin/r2d2.gin's replay: 4,000 sequences of T+1 = 41
  # steps, frames stored once (3 older frames + 41), LSTM state 2 x 512.
  "r2d2_atari_4k": r2d2_sequences(4_000, 3 + 41, (84, 84)),
  # A fifth of seed_rl/atari/gin/dqn.gin's 500,000 transitions (costs
  # grow linearly with the items).
  "dqn_atari_100k": dqn_transitions(100_000),
  "r2d2_cartpole_4k": r2d2_sequences(4_000, 21, (4,)),
}


def measure(name: str, directory: str) -> Dict:
  make = SHAPES[name]
  replay = make(0)
  holder = replay.state_dict
  start = time.monotonic()
  written = replay_state.write(os.path.join(directory, f"{name}.npz"), holder)
  save_s = time.monotonic() - start
  fresh = make(1, fill=False)
  start = time.monotonic()
  fresh.load_state_dict(replay_state.read(written.path))
  load_s = time.monotonic() - start
  memory = getattr(replay, "replay", replay).nbytes
  frames = getattr(replay, "frames", None)
  memory += frames.nbytes if frames is not None else 0
  os.remove(written.path)
  return {
    "shape": name,
    "items": len(getattr(replay, "replay", replay)),
    "memory_mib": round(memory / 2**20, 1),
    "archive_mib": round(written.bytes / 2**20, 1),
    "save_s": round(save_s, 2),
    "restore_s": round(load_s, 2),
  }


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--only", default=",".join(SHAPES))
  parser.add_argument("--dir", default=None, help="where archives go")
  args = parser.parse_args(argv)
  names = args.only.split(",")
  unknown = sorted(set(names) - set(SHAPES))
  if unknown:
    parser.error(f"--only {unknown}: one of {', '.join(SHAPES)}")
  with tempfile.TemporaryDirectory(dir=args.dir) as directory:
    for name in names:
      print(json.dumps(measure(name, directory)), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
