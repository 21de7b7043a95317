"""Stable-Baselines3 PPO on Atari with the RL Zoo's settings: the peer a
user with one small machine compares this project with, run on this machine.

    benchmarks/peers/bin/python benchmarks/peer_sb3.py --game battle_zone \\
        --minutes 25 --seed 0 --logdir /work/logs/peers/sb3/battle_zone-s0

It needs its own virtual environment (PyTorch and SB3 are not dependencies
of this project): `python3 -m venv benchmarks/peers && benchmarks/peers/bin/pip
install -r benchmarks/requirements-peers.txt`.

The run is SB3's `make_atari_env` on the game's `NoFrameskip-v4` env (no
sticky actions; AtariWrapper: up to 30 no-op starts, frame skip 4 with
max-pooling, life-loss terminals, fire reset, rewards clipped to their
sign, grayscale 84x84), 4 stacked frames, and PPO with rl-baselines3-zoo's
`atari` hyperparameters (hyperparams/ppo.yml): 8 envs x 128 steps, 4
epochs of minibatches of 256, learning rate 2.5e-4 and clip range 0.1 both
annealed linearly over 10M agent steps, entropy cost 0.01, value cost 0.5.
Those are CleanRL ppo_atari's values too. It stops at --minutes of wall
clock, so the schedules are where a 10M-step run would be at that point.

`--emulator envpool` runs the same PPO on envpool's `GAME-v5` instead,
with the settings CleanRL's `ppo_atari_envpool*` scripts pass (8 envs,
life-loss episodes, rewards clipped to their sign; envpool's defaults for
the rest: up to 30 no-op starts, fire reset, no sticky actions, 84x84
grayscale, max-pooled frame skip 4, 4 stacked frames, 108,000-frame cap):
the environment CleanRL's published Atari curves were made on. envpool
0.8.4 needs NumPy 1 (under NumPy 2 it returns blank frames without an
error), so it runs from a venv of its own:
`python3 -m venv benchmarks/peers-envpool && benchmarks/peers-envpool/bin/pip
install -r benchmarks/requirements-peers-envpool.txt`.

Returns are whole games (SB3's Monitor sits under the life-loss wrapper;
with envpool, the raw rewards summed until `info["terminated"]`, the game's
end, or the time limit).
The logdir gets TensorBoard scalars under the names this project's learner
uses, at x = agent steps: `episode/return_last100` (mean of the last 100
finished games), `perf/elapsed_s` and `perf/env_steps_per_s`, so
`plot_curves.py` and `compare_reference.py` read it as they read ours.
SB3's own training scalars (`train/approx_kl`, `train/clip_fraction`,
`train/entropy_loss`, `train/explained_variance`, ...) go to `LOGDIR/sb3`,
to set beside this project's `policy/*` and `value/*`. The
last line printed is one JSON object: game, seed, minutes, agent_steps,
agent_steps_per_s, episodes, return_last100.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time
from typing import Deque

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import configure as configure_logger
from stable_baselines3.common.vec_env import VecEnv, VecFrameStack
from torch.utils.tensorboard import SummaryWriter

ZOO_TOTAL_STEPS = 10_000_000  # the zoo's n_timesteps: the schedules' length


def game_name(game: str) -> str:
  """'battle_zone' -> 'BattleZone', as gymnasium's and envpool's ids spell it."""
  return "".join(part.title() for part in game.split("_"))


def env_id(game: str) -> str:
  """'battle_zone' -> 'BattleZoneNoFrameskip-v4'."""
  return game_name(game) + "NoFrameskip-v4"


def linear(start: float):
  """The zoo's `lin_X`: X times the fraction of the 10M steps still ahead."""
  return lambda progress_remaining: start * progress_remaining


class EnvpoolGames(VecEnv):
  """envpool's vector env as an SB3 VecEnv: an env whose (life-loss)
  episode ended is reset at once, as SB3 expects, and whole-game returns
  of raw rewards are reported in `info["episode"]` as SB3's Monitor does."""

  def __init__(self, pool):
    self.pool = pool
    n = pool.spec.config.num_envs
    super().__init__(
      n,
      gym.spaces.Box(0, 255, pool.observation_space.shape, np.uint8),
      gym.spaces.Discrete(pool.action_space.n),
    )
    self.game_return = np.zeros(n)
    self.game_length = np.zeros(n, np.int64)

  def reset(self):
    obs, _ = self.pool.reset()
    return obs

  def step_async(self, actions):
    self.actions = np.asarray(actions, np.int32)

  def step_wait(self):
    obs, reward, terminated, truncated, info = self.pool.step(self.actions)
    self.game_return += info["reward"]  # raw; `reward` is clipped
    self.game_length += 1
    infos = [{} for _ in range(self.num_envs)]
    for i in np.flatnonzero(terminated | truncated):
      infos[i]["terminal_observation"] = obs[i].copy()
      infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
      if info["terminated"][i] or truncated[i]:  # the game ended
        infos[i]["episode"] = {
          "r": float(self.game_return[i]),
          "l": int(self.game_length[i]),
        }
        self.game_return[i] = 0.0
        self.game_length[i] = 0
      # envpool's reset starts the next life (the same game) or a new game.
      obs[i] = self.pool.reset(np.array([i]))[0][0]
    return obs, reward, terminated | truncated, infos

  def close(self):
    self.pool.close()

  def get_attr(self, attr_name, indices=None):
    return [None] * self.num_envs

  def set_attr(self, attr_name, value, indices=None):
    pass

  def env_method(self, method_name, *args, indices=None, **kwargs):
    return [None] * self.num_envs

  def env_is_wrapped(self, wrapper_class, indices=None):
    return [False] * self.num_envs


def make_envs(game: str, seed: int, emulator: str, full_games: bool) -> VecEnv:
  """8 envs of `game` as the RL Zoo (ale-py) or CleanRL (envpool) make them."""
  if emulator == "envpool":
    import envpool

    return EnvpoolGames(
      envpool.make(
        game_name(game) + "-v5",
        env_type="gym",
        num_envs=8,
        episodic_life=not full_games,
        reward_clip=True,
        seed=seed,
      )
    )
  import ale_py
  from stable_baselines3.common.env_util import make_atari_env

  gym.register_envs(ale_py)
  return VecFrameStack(
    make_atari_env(
      env_id(game),
      n_envs=8,
      seed=seed,
      wrapper_kwargs={"terminal_on_life_loss": not full_games},
    ),
    n_stack=4,
  )


def _versions(emulator: str) -> dict:
  versions = {
    "stable_baselines3": __import__("stable_baselines3").__version__,
    "torch": torch.__version__,
    "numpy": np.__version__,
  }
  module = "envpool" if emulator == "envpool" else "ale_py"
  versions[module] = __import__(module).__version__
  return versions


class WallClock(BaseCallback):
  """Logs whole-game returns against agent steps; stops at the deadline."""

  def __init__(self, logdir: str, seconds: float):
    super().__init__()
    self.writer = SummaryWriter(logdir)
    self.seconds = seconds
    self.start = time.time()
    self.returns: Deque[float] = collections.deque(maxlen=100)
    self.episodes = 0
    self.last_log = 0.0

  def _on_step(self) -> bool:
    step = self.num_timesteps
    elapsed = time.time() - self.start
    finished = [
      i["episode"]["r"] for i in self.locals["infos"] if "episode" in i
    ]
    for ret in finished:
      self.returns.append(float(ret))
      self.episodes += 1
    if finished:
      self.writer.add_scalar(
        "episode/return_last100", sum(self.returns) / len(self.returns), step
      )
    if elapsed - self.last_log >= 10.0:
      self.last_log = elapsed
      self.writer.add_scalar("perf/elapsed_s", elapsed, step)
      self.writer.add_scalar("perf/env_steps_per_s", step / elapsed, step)
      mean = sum(self.returns) / len(self.returns) if self.returns else None
      print(
        f"[{elapsed:7.1f}s] agent steps {step:,} "
        f"({step / elapsed:,.0f}/s) games {self.episodes} return(last100) "
        f"{mean}",
        flush=True,
      )
    return elapsed < self.seconds

  def _on_training_end(self) -> None:
    elapsed = time.time() - self.start
    self.writer.add_scalar("perf/elapsed_s", elapsed, self.num_timesteps)
    self.writer.close()


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--game", default="battle_zone")
  parser.add_argument("--minutes", type=float, default=60.0)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--logdir", required=True)
  parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
  parser.add_argument(
    "--full_games",
    action="store_true",
    help="no life-loss terminals (AtariWrapper terminal_on_life_loss=False, "
    "envpool episodic_life=False), as this project's default; a "
    "diagnostic, not the zoo's setting",
  )
  parser.add_argument(
    "--emulator",
    choices=("ale-py", "envpool"),
    default="ale-py",
    help="ale-py: gymnasium's NoFrameskip-v4 with SB3's AtariWrapper (the "
    "RL Zoo's); envpool: envpool's v5 env as CleanRL's envpool scripts "
    "make it (see the module docstring)",
  )
  parser.add_argument(
    "--vf_coef",
    type=float,
    default=0.5,
    help="SB3's value loss weight (its value loss is the mean squared error, "
    "so 0.5 weighs it as 0.5 x MSE; CleanRL and this project weigh "
    "0.25 x MSE, i.e. --vf_coef 0.25); a diagnostic, the zoo's is 0.5",
  )
  args = parser.parse_args()
  torch.set_num_threads(args.threads)
  os.makedirs(args.logdir, exist_ok=True)
  envs = make_envs(args.game, args.seed, args.emulator, args.full_games)
  model = PPO(
    "CnnPolicy",
    envs,
    n_steps=128,
    n_epochs=4,
    batch_size=256,
    learning_rate=linear(2.5e-4),
    clip_range=linear(0.1),
    ent_coef=0.01,
    vf_coef=args.vf_coef,
    seed=args.seed,
    device="cpu",
    verbose=0,
  )
  model.set_logger(
    configure_logger(os.path.join(args.logdir, "sb3"), ["tensorboard"])
  )
  clock = WallClock(args.logdir, args.minutes * 60.0)
  model.learn(total_timesteps=ZOO_TOTAL_STEPS, callback=clock)
  returns = list(clock.returns)
  result = {
    "peer": "sb3-ppo-zoo",
    "game": args.game,
    "seed": args.seed,
    "minutes": args.minutes,
    "life_loss_terminals": not args.full_games,
    "emulator": args.emulator,
    "vf_coef": args.vf_coef,
    "agent_steps": int(model.num_timesteps),
    "agent_steps_per_s": model.num_timesteps / (time.time() - clock.start),
    "episodes": clock.episodes,
    "return_last100": sum(returns) / len(returns) if returns else None,
    "versions": _versions(args.emulator),
  }
  with open(os.path.join(args.logdir, "result.json"), "w") as f:
    json.dump(result, f)
  print(json.dumps(result))


if __name__ == "__main__":
  main()
