"""Export a trained policy: `python -m seed_rl.export --logdir DIR --out DIR`.

Writes a TensorFlow SavedModel that runs the run's greedy policy without
seed_rl (TensorFlow alone loads it), frame stacking and observation
normalisation included. Supported: vtrace (feed-forward or LSTM), ppo
(discrete and continuous), dqn and r2d2 (LSTM); other agents are refused.

Signatures (B = batch of envs; k = the run's frame stack):

  policy(observation, first, reward, state_*) -> {action, state_*}
    observation: [B, *frame] one env observation (an 84x84 uint8 frame for
      Atari), as the environment returns it: NOT stacked.
    first: bool [B], true where this observation starts an episode (resets
      the frame stack and the recurrent state).
    reward: float32 [B], reward of the transition into this observation
      (recurrent agents' input; ignored by the others).
    state_frames: [B, *frame, k-1] the previous k-1 frames (only if k > 1).
    state_prev_action: [B, *action] previous action (recurrent agents).
    state_core_0, state_core_1, ...: recurrent state (LSTM h, c).
    action: [B, *action] the greedy action (argmax; the mean, squashed or
      clipped into the action Box as the agent's policy maps it).
  initial_state(batch_size) -> {state_*}: zeros for a fresh batch (only
    for policies with state: frame stacking or a recurrent core).

Example (no seed_rl import):

  policy = tf.saved_model.load(out).signatures["policy"]
  state = tf.saved_model.load(out).signatures["initial_state"](
      batch_size=tf.constant(1))
  out = policy(observation=obs[None], first=tf.constant([True]),
               reward=tf.constant([0.0]), **state)
  action, state = out.pop("action"), out

`<out>/seed_rl_export.json` describes the inputs and outputs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Dict, Tuple

SUPPORTED_AGENTS = ("vtrace", "ppo", "dqn", "r2d2")


def _greedy_step(agent) -> Tuple[Callable, bool]:
  """(fn(observation, prev_action, reward, done, core) -> (action, core),
  recurrent) for the agent's greedy policy, as its `act` with eval_mask
  (R2D2 without its evaluation epsilon)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def is_a(name: str, class_name: str) -> bool:
    # Only the run's agent module is imported (gin refuses new
    # configurables once the config is locked).
    module = sys.modules.get(f"seed_rl.agents.{name}.agent")
    return module is not None and isinstance(agent, getattr(module, class_name))

  action_dtype = agent.action_spec.dtype
  if is_a("vtrace", "VtraceAgent"):
    vtrace_lib = sys.modules["seed_rl.agents.vtrace.agent"]
    network = agent.network
    distribution = vtrace_lib.policy_distribution(agent.action_spec)

    def vtrace_step(observation, prev_action, reward, done, core):
      params, _, core = network.step(
        observation, prev_action, reward, done, core
      )
      return tf.cast(distribution.mode(params)[0], action_dtype), core

    return vtrace_step, bool(agent.config.use_lstm)
  if is_a("ppo", "PPOAgent"):
    network, normalizer = agent.network, agent.observation_normalizer
    distribution = agent.distribution

    def ppo_step(observation, prev_action, reward, done, core):
      del prev_action, reward, done
      if normalizer is not None:
        observation = normalizer.normalize(observation)
      params, _ = network(observation)
      return tf.cast(distribution.mode(params)[0], action_dtype), core

    return ppo_step, False
  if is_a("dqn", "DQNAgent"):
    online, noisy = agent.online_network, agent.config.noisy is not None

    def dqn_step(observation, prev_action, reward, done, core):
      del prev_action, reward, done
      q = (
        online(observation, deterministic=True)
        if noisy
        else online(observation)
      )
      return tf.cast(tf.argmax(q, axis=-1), action_dtype), core

    return dqn_step, False
  if is_a("r2d2", "R2D2Agent"):
    online = agent.online_network

    def r2d2_step(observation, prev_action, reward, done, core):
      q, core = online.step(observation, prev_action, reward, done, core)
      return tf.cast(tf.argmax(q, axis=-1), action_dtype), tuple(core)

    return r2d2_step, True
  raise ValueError(
    f"seed_rl.export supports the agents {', '.join(SUPPORTED_AGENTS)}; "
    f"not {type(agent).__module__}.{type(agent).__name__}"
  )


def make_policy_module(run) -> Tuple[Any, Dict[str, Any]]:
  """(tf.Module with `policy` and `initial_state`, its description) for a
  saved_run.LoadedRun."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  agent = run.agent
  if run.agent_name.rsplit(".", 1)[-1] not in SUPPORTED_AGENTS:
    raise ValueError(
      f"seed_rl.export supports the agents {', '.join(SUPPORTED_AGENTS)}; "
      f"not {run.agent_name!r}"
    )
  step, recurrent = _greedy_step(agent)
  obs_spec, act_spec, k = run.observation_spec, run.action_spec, run.frame_stack
  frame_shape, action_shape = tuple(obs_spec.shape), tuple(act_spec.shape)
  core_shapes = [tuple(s.shape[1:]) for s in agent.initial_core_state(1)]
  # name -> (shape after B, dtype) of each state tensor.
  state_specs: Dict[str, Tuple[Tuple[int, ...], Any]] = {}
  if k > 1:
    state_specs["state_frames"] = (frame_shape + (k - 1,), obs_spec.dtype)
  if recurrent:
    state_specs["state_prev_action"] = (action_shape, act_spec.dtype)
    for i, shape in enumerate(core_shapes):
      state_specs[f"state_core_{i}"] = (shape, tf.float32)

  input_signature = {
    "observation": tf.TensorSpec((None,) + frame_shape, obs_spec.dtype),
    "first": tf.TensorSpec([None], tf.bool),
    "reward": tf.TensorSpec([None], tf.float32),
  }
  for name, (shape, dtype) in state_specs.items():
    input_signature[name] = tf.TensorSpec((None,) + shape, dtype)
  # The names become the signature's keyword arguments.
  input_signature = {
    name: tf.TensorSpec(spec.shape, spec.dtype, name=name)
    for name, spec in input_signature.items()
  }

  def dims(shape):
    return tf.constant(list(shape), tf.int32, shape=[len(shape)])

  def keep(first, x):
    """x with the rows where `first` zeroed (a fresh episode's state)."""
    mask = tf.reshape(tf.logical_not(first), [-1] + [1] * (x.shape.rank - 1))
    return tf.where(mask, x, tf.zeros_like(x))

  class ExportedPolicy(tf.Module):
    def __init__(self):
      super().__init__(name="seed_rl_policy")
      # Tracked so that the SavedModel holds the weights (and normalizer).
      self.checkpoint_objects = dict(agent.checkpoint_objects())

    @tf.function(input_signature=[input_signature])
    def policy(self, inputs):
      first = inputs["first"]
      observation = inputs["observation"]
      out = {}
      if k > 1:
        # As the learner's EnvStateTable: zeros before an episode's first
        # frame, the newest frame last.
        frames = keep(first, inputs["state_frames"])
        observation = tf.concat([frames, observation[..., None]], axis=-1)
        out["state_frames"] = observation[..., 1:]
      prev_action = tf.zeros(
        tf.concat([tf.shape(first), dims(action_shape)], 0), act_spec.dtype
      )
      core: Tuple[Any, ...] = ()
      if recurrent:
        prev_action = keep(first, inputs["state_prev_action"])
        core = tuple(
          keep(first, inputs[f"state_core_{i}"])
          for i in range(len(core_shapes))
        )
      action, core = step(
        observation, prev_action, inputs["reward"], first, core
      )
      out["action"] = action
      if recurrent:
        out["state_prev_action"] = action
        for i, c in enumerate(core):
          out[f"state_core_{i}"] = c
      return out

    @tf.function(
      input_signature=[tf.TensorSpec([], tf.int32, name="batch_size")]
    )
    def initial_state(self, batch_size):
      return {
        name: tf.zeros(tf.concat([[batch_size], dims(shape)], 0), dtype)
        for name, (shape, dtype) in state_specs.items()
      }

  description = {
    "env": run.env,
    "agent": run.agent_name,
    "checkpoint": run.checkpoint,
    "learner_step": run.learner_step,
    "env_steps": run.env_steps,
    "frame_stack": k,
    "inputs": {
      name: {"shape": [None] + list(spec.shape[1:]), "dtype": spec.dtype.name}
      for name, spec in input_signature.items()
    },
    "outputs": ["action"] + list(state_specs),
    "action": {
      "shape": list(action_shape),
      "dtype": str(act_spec.dtype),
      "num_values": act_spec.num_values,
    },
  }
  return ExportedPolicy(), description


def export(run, out_dir: str) -> Dict[str, Any]:
  """Writes the SavedModel of `run` (a saved_run.LoadedRun) to `out_dir`."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  module, description = make_policy_module(run)
  signatures = {"policy": module.policy.get_concrete_function()}
  if description["outputs"][1:]:  # a policy with state
    signatures["initial_state"] = module.initial_state.get_concrete_function()
  tf.saved_model.save(module, out_dir, signatures=signatures)
  description["saved_model"] = os.path.abspath(out_dir)
  with open(
    os.path.join(out_dir, "seed_rl_export.json"), "w", encoding="utf-8"
  ) as f:
    json.dump(description, f, indent=1)
  return description


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
    prog="python -m seed_rl.export",
    description=__doc__,
    formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  p.add_argument("--logdir", required=True, help="the run's --logdir")
  p.add_argument("--out", required=True, help="SavedModel directory")
  p.add_argument("--env", default=None, help="for logdirs without run.json")
  p.add_argument("--agent", default=None, help="for logdirs without run.json")
  return p


def main(argv=None) -> int:
  args = build_parser().parse_args(argv)
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  from seed_rl.common import saved_run  # pylint: disable=g-import-not-at-top

  try:
    run = saved_run.load_run(args.logdir, args.env, args.agent)
    description = export(run, args.out)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(json.dumps(description), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
