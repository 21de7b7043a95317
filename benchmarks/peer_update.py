"""One PPO update of this project against Stable-Baselines3's, number for
number: the same initial weights, batch and minibatch order on both sides.

    python benchmarks/peer_update.py export --out /tmp/ppo_update.npz
    benchmarks/peers/bin/python benchmarks/peer_update.py compare \\
        --batch /tmp/ppo_update.npz

`export` (this project's environment) plays 8 Atari envs (default Battle
Zone) for 129 steps with random actions, builds a PPOAgent with the Nature
torso in CleanRL's and the RL Zoo's layout (8 x 128 transitions, 4 epochs
of 4 minibatches of 256, clip 0.1, lr 2.5e-4, entropy cost 0.01,
global-norm clip 0.5, GAE 0.95, gamma 0.99), lets its initial policy pick
the batch's actions, and writes the frames' stacks, actions, rewards,
life-loss terminals, behaviour log-probabilities, the 4 epochs' shuffled
orders, the targets, the first minibatch's gradient and the weights before
and after one update. The value loss is set to SB3's (value_cost 1.0 on
0.5 (V - R)^2, no value clip: SB3's 0.5 x mean squared error).

`compare` (the peers' environment: PyTorch, SB3) loads those weights into
SB3's `CnnPolicy` (Keras' NHWC kernels transposed to PyTorch's NCHW),
fills a RolloutBuffer with the batch, has `compute_returns_and_advantage`
and `PPO.train()` run with the exported minibatch orders, and prints one
JSON object: the largest differences of values, log-probabilities,
advantages and returns, the cosine of the first minibatch's gradients, and
per layer the relative difference of the two updates' weight changes.

With `--epsilon_form paper` (Adam's epsilon on the bias-corrected second
moment, as PyTorch's Adam) the two updates agree to about 1% per layer;
with 'tensorflow' (TensorFlow's kernel) the early Adam steps are damped and
the changes differ by up to ~2x (benchmarks/RESULTS.md, "One PPO update
against SB3's").
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

T, B, K, ACTIONS = 128, 8, 4, 18
LAYERS = (
  "conv0/kernel conv0/bias conv1/kernel conv1/bias conv2/kernel conv2/bias "
  "dense/kernel dense/bias logits/kernel logits/bias value/kernel value/bias"
).split()


def _play(game: str, seed: int):
  """Frames [K-1 + T+1, B, 84, 84] of random play (zero before step 0, as
  the learner's history at an episode start), sign-clipped rewards and
  terminals [T, B] (game over or a lost life, as life-loss episodes)."""
  from seed_rl.atari import env as atari_env

  envs = atari_env.create_environment(B, seed, game=game)
  rng = np.random.default_rng(seed)
  frames = [np.zeros((B, 84, 84), np.uint8)] * (K - 1) + [envs.reset()]
  rewards, terminated = [], []
  n = envs.action_spec.num_values
  for _ in range(T):
    step = envs.step(rng.integers(0, n, B))
    frames.append(step.observation)
    rewards.append(np.sign(step.reward))
    terminated.append(step.terminated | step.truncated | step.life_lost)
  envs.close()
  return (
    np.stack(frames).astype(np.uint8),
    np.stack(rewards).astype(np.float32),
    np.stack(terminated),
  )


def export(args) -> None:
  sys.path.insert(
    0, os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  )
  import tensorflow as tf

  from seed_rl.agents import frame_stacks
  from seed_rl.agents.ppo import update as update_lib
  from seed_rl.agents.ppo.agent import PPOAgent
  from seed_rl.agents.ppo.config import PPOConfig
  from seed_rl.common.specs import ArraySpec
  from seed_rl.networks.conv import atari_torso

  tf.keras.utils.set_random_seed(args.seed)
  frames, rewards, terminated = _play(args.game, args.seed)
  truncated = np.zeros_like(terminated)
  bootstrap = np.zeros_like(rewards)
  config = PPOConfig(
    unroll_length=T,
    batch_size=B,
    num_epochs=4,
    num_minibatches=4,
    reward_clipping="abs_one",
    entropy_cost=0.01,
    value_cost=1.0,  # SB3: vf_coef 0.5 x mean squared error
    value_clip=None,
    clip_ratio=0.1,
    learning_rate=2.5e-4,
    optimizer_epsilon=1e-5,
    optimizer_epsilon_form=args.epsilon_form,
    max_grad_norm=0.5,
    torso=lambda: atari_torso(kind="nature"),
    shared_torso=True,
    seed=args.seed,
  )
  obs_spec = ArraySpec((84, 84, K), "uint8", name="observation", frame_stack=K)
  action_spec = ArraySpec((), "int32", name="action", num_values=ACTIONS)
  agent = PPOAgent(obs_spec, action_spec, B, config)
  net = agent.network
  stacks = frame_stacks.observations(
    obs_spec,
    tf.constant(frames),
    tf.constant(terminated),
    tf.constant(truncated),
  ).numpy()
  params, values = net(tf.reshape(stacks, (-1, 84, 84, K)))
  logits = params.numpy().reshape(T + 1, B, ACTIONS)[:T].astype(np.float64)
  rng = np.random.default_rng(args.seed)
  actions = np.argmax(logits + rng.gumbel(size=logits.shape), -1)
  log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  behaviour = np.take_along_axis(log_softmax, actions[..., None], -1)[..., 0]
  inputs = [
    tf.constant(x)
    for x in (
      frames,
      actions.astype(np.int32),
      rewards,
      terminated,
      truncated,
      bootstrap,
    )
  ]
  behaviour = tf.constant(behaviour.astype(np.float32))
  order = np.stack([rng.permutation(T * B) for _ in range(4)]).astype(np.int32)
  _, advantages, returns, _, _ = agent._targets_fn(*inputs)
  # The first minibatch's gradient, before any step (the update's own code).
  update = update_lib.PPOUpdate(
    config,
    net,
    agent._distribution,
    agent._optimizer,
    agent._kl_coef,
    agent._preprocess,
    agent._time_major_signature(),
  )
  data = update._flat_targets(
    (tf.constant(stacks),) + tuple(inputs[1:]), behaviour
  )
  first = update_lib.Transitions(
    *[tf.gather(x, order[0, : T * B // 4]) for x in data]
  )
  gradients, _ = update._loss_and_gradients(first, tf.constant(0.1, tf.float32))
  before = [v.numpy() for v in net.trainable_variables]
  agent._optimizer.learning_rate.assign(np.float32(config.learning_rate))
  agent._update_fn(*inputs, behaviour, tf.constant(order), np.float32(0.1))
  after = [v.numpy() for v in net.trainable_variables]
  out = dict(
    stacks=stacks,
    actions=actions.astype(np.int64),
    rewards=rewards,
    terminated=terminated,
    behaviour_log_prob=behaviour.numpy(),
    values=values.numpy().reshape(T + 1, B),
    advantages=advantages.numpy(),
    returns=returns.numpy(),
    order=order,
  )
  for i, (w0, w1, g) in enumerate(zip(before, after, gradients)):
    out.update(
      {f"before_{i}": w0, f"after_{i}": w1, f"gradient_{i}": g.numpy()}
    )
  np.savez_compressed(args.out, **out)
  print(json.dumps({"out": args.out, "epsilon_form": args.epsilon_form}))


def _torch_weights(batch, prefix: str):
  """The exported Keras weights in PyTorch's layouts, in SB3's order."""
  import torch

  w = [batch[f"{prefix}_{i}"] for i in range(len(LAYERS))]
  conv = lambda k: np.transpose(k, (3, 2, 0, 1))  # HWIO -> OIHW
  # Flatten order: Keras' [7, 7, 64] (h, w, c) -> PyTorch's [64, 7, 7].
  dense = w[6].reshape(7, 7, 64, -1).transpose(2, 0, 1, 3).reshape(3136, -1)
  layouts = [conv(w[0]), w[1], conv(w[2]), w[3], conv(w[4]), w[5], dense.T]
  layouts += [w[7], w[8].T, w[9], w[10].T, w[11]]
  return [torch.tensor(np.ascontiguousarray(x)) for x in layouts]


def _sb3_ppo():
  """SB3's PPO in the exported layout and its parameters in LAYERS order."""
  import gymnasium as gym
  import torch
  from stable_baselines3 import PPO
  from stable_baselines3.common.logger import Logger
  from stable_baselines3.common.vec_env import DummyVecEnv

  torch.set_num_threads(1)

  class Spaces(gym.Env):
    observation_space = gym.spaces.Box(0, 255, (K, 84, 84), np.uint8)
    action_space = gym.spaces.Discrete(ACTIONS)

  model = PPO(
    "CnnPolicy",
    DummyVecEnv([Spaces] * B),
    n_steps=T,
    n_epochs=4,
    batch_size=T * B // 4,
    learning_rate=2.5e-4,
    clip_range=0.1,
    ent_coef=0.01,
    vf_coef=0.5,
    max_grad_norm=0.5,
    gae_lambda=0.95,
    gamma=0.99,
    device="cpu",
  )
  model.set_logger(Logger(folder=None, output_formats=[]))
  policy = model.policy
  cnn, linear = policy.features_extractor.cnn, policy.features_extractor.linear
  params = [cnn[0].weight, cnn[0].bias, cnn[2].weight, cnn[2].bias]
  params += [cnn[4].weight, cnn[4].bias, linear[0].weight, linear[0].bias]
  params += [policy.action_net.weight, policy.action_net.bias]
  params += [policy.value_net.weight, policy.value_net.bias]
  return model, params


def _fill_buffer(model, batch, obs, values, result) -> None:
  """The batch into SB3's RolloutBuffer, then SB3's GAE."""
  import torch

  policy, buffer, terminated = (
    model.policy,
    model.rollout_buffer,
    batch["terminated"],
  )
  buffer.reset()
  log_prob_diff = 0.0
  for t in range(T):
    actions = torch.tensor(batch["actions"][t])
    with torch.no_grad():
      value, log_prob, _ = policy.evaluate_actions(
        torch.tensor(obs[t]), actions
      )
    behaviour = batch["behaviour_log_prob"][t]
    log_prob_diff = max(
      log_prob_diff, float(np.abs(log_prob - behaviour).max())
    )
    # SB3 flags the step that starts an episode; the batch flags the
    # transition that ends one.
    starts = terminated[t - 1] if t else np.zeros(B, bool)
    buffer.add(
      obs[t],
      batch["actions"][t][:, None],
      batch["rewards"][t],
      starts.astype(np.float32),
      value.flatten(),
      torch.tensor(behaviour),
    )
  buffer.compute_returns_and_advantage(
    torch.tensor(values[T]), terminated[T - 1].astype(np.float32)
  )
  result["log_prob_max_abs_diff"] = log_prob_diff
  for name in ("advantages", "returns"):
    diff = np.abs(getattr(buffer, name) - batch[name]).max()
    result[f"{name}_max_abs_diff"] = float(diff)


def _train(model, params, order):
  """SB3's PPO.train() over the exported minibatch orders; returns the
  gradients of its first step (after SB3's clip)."""
  import stable_baselines3.common.buffers as sb3_buffers

  gradients = []
  step = model.policy.optimizer.step

  def record_and_step(*a, **k):
    gradients.append([p.grad.detach().clone().numpy() for p in params])
    return step(*a, **k)

  model.policy.optimizer.step = record_and_step
  # SB3 flattens [T, B] as b * T + t, the batch as t * B + b.
  orders = iter([(o % B) * T + o // B for o in order])
  permutation = sb3_buffers.np.random.permutation
  sb3_buffers.np.random.permutation = lambda n: next(orders)
  try:
    model._current_progress_remaining = 1.0
    model.train()
  finally:
    sb3_buffers.np.random.permutation = permutation
  return gradients[0]


def compare(args) -> None:
  import torch

  batch = np.load(args.batch)
  model, params = _sb3_ppo()
  with torch.no_grad():
    for p, w in zip(params, _torch_weights(batch, "before")):
      p.copy_(w)
    obs = np.transpose(batch["stacks"], (0, 1, 4, 2, 3))  # [T+1, B, K, H, W]
    _, values, _ = model.policy(torch.tensor(obs.reshape((-1, K, 84, 84))))
  values = values.numpy().reshape(T + 1, B)
  result: dict = {
    "values_max_abs_diff": float(np.abs(values - batch["values"]).max())
  }
  _fill_buffer(model, batch, obs, values, result)
  peer = _train(model, params, batch["order"])
  ours = [g.numpy() for g in _torch_weights(batch, "gradient")]
  result["first_gradient_cosine"] = float(
    sum((a * b).sum() for a, b in zip(ours, peer))
    / np.sqrt(
      sum((a * a).sum() for a in ours) * sum((b * b).sum() for b in peer)
    )
  )
  before = _torch_weights(batch, "before")
  after = _torch_weights(batch, "after")
  layers = {}
  for name, p, w0, w1 in zip(LAYERS, params, before, after):
    peer_change = p.detach().numpy() - w0.numpy()
    our_change = w1.numpy() - w0.numpy()
    layers[name] = {
      "change_norm_ratio": float(
        np.linalg.norm(our_change) / np.linalg.norm(peer_change)
      ),
      "relative_difference": float(
        np.linalg.norm(our_change - peer_change) / np.linalg.norm(peer_change)
      ),
    }
  result["layers"] = layers
  result["max_relative_difference"] = max(
    v["relative_difference"] for v in layers.values()
  )
  print(json.dumps(result))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  modes = parser.add_subparsers(dest="mode", required=True)
  ex = modes.add_parser("export", help="this project's update (its venv)")
  ex.add_argument("--out", required=True)
  ex.add_argument("--game", default="battle_zone")
  ex.add_argument("--seed", type=int, default=0)
  ex.add_argument(
    "--epsilon_form", choices=("tensorflow", "paper"), default="paper"
  )
  cmp = modes.add_parser("compare", help="SB3's update (the peers' venv)")
  cmp.add_argument("--batch", required=True)
  args = parser.parse_args()
  export(args) if args.mode == "export" else compare(args)


if __name__ == "__main__":
  main()
