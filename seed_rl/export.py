"""Export a trained policy: `python -m seed_rl.export --logdir DIR --out DIR`.

Writes a TensorFlow SavedModel that runs the run's greedy policy without
seed_rl (TensorFlow alone loads it), frame stacking and observation
normalisation included. The policy is the agent's own
(`Agent.greedy_policy`, seed_rl/common/agent_api.py): every built-in agent
has one (vtrace, ppo, a2c, acer, dqn, r2d2, sac, td3 and ddpg); an agent
without it is refused with a message naming it.

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
from typing import Any, Dict, Tuple

from seed_rl.common import agent_api
from seed_rl.common import saved_run
from seed_rl.common import tf_startup
# TensorFlow is imported inside the functions that use it, once main() has
# imported it without its start-up lines (common/tf_startup.py).

# name -> (shape after B, dtype) of each state tensor of a policy.
StateSpecs = Dict[str, Tuple[Tuple[int, ...], Any]]


def greedy_policy(agent) -> Tuple[agent_api.GreedyStep, bool]:
  """(step, recurrent) of the agent's own greedy policy
  (`agent_api.Agent.greedy_policy`: `act` with eval_mask, R2D2 without
  its evaluation epsilon).

  Raises:
    ValueError: naming what to implement if the agent has no greedy policy.
  """
  method = getattr(type(agent), "greedy_policy", None)
  if method is None or method is agent_api.Agent.greedy_policy:
    raise ValueError(
      f"seed_rl.export cannot export {type(agent).__module__}."
      f"{type(agent).__name__}: it does not implement greedy_policy(self) "
      "-> (step, recurrent), the deterministic policy to export (see "
      "Agent.greedy_policy in seed_rl/common/agent_api.py)"
    )
  return agent.greedy_policy()


def make_policy_module(run) -> Tuple[Any, Dict[str, Any]]:
  """(tf.Module with `policy` and `initial_state`, its description) for a
  saved_run.LoadedRun."""
  import tensorflow as tf

  agent = run.agent
  step, recurrent = greedy_policy(agent)
  state_specs = _state_specs(run, recurrent)
  input_signature = _input_signature(run.observation_spec, state_specs)
  num_cores = sum(name.startswith("state_core_") for name in state_specs)

  class ExportedPolicy(tf.Module):
    def __init__(self):
      super().__init__(name="seed_rl_policy")
      # Tracked so that the SavedModel holds the weights (and normalizer).
      self.checkpoint_objects = dict(agent.checkpoint_objects())

    @tf.function(input_signature=[input_signature])
    def policy(self, inputs):
      return _policy(inputs, step, recurrent, run, num_cores)

    @tf.function(
      input_signature=[tf.TensorSpec([], tf.int32, name="batch_size")]
    )
    def initial_state(self, batch_size):
      return {
        name: tf.zeros(tf.concat([[batch_size], _dims(shape)], 0), dtype)
        for name, (shape, dtype) in state_specs.items()
      }

  return ExportedPolicy(), _description(run, input_signature, state_specs)


def _state_specs(run, recurrent: bool) -> StateSpecs:
  """The policy's state: the previous k-1 frames (k = the run's frame
  stack, if > 1) and, for recurrent agents, the previous action and the
  core state (LSTM h, c)."""
  import tensorflow as tf

  obs_spec, act_spec, k = run.observation_spec, run.action_spec, run.frame_stack
  core_shapes = [tuple(s.shape[1:]) for s in run.agent.initial_core_state(1)]
  state_specs: StateSpecs = {}
  if k > 1:
    state_specs["state_frames"] = (
      tuple(obs_spec.shape) + (k - 1,),
      obs_spec.dtype,
    )
  if recurrent:
    state_specs["state_prev_action"] = (tuple(act_spec.shape), act_spec.dtype)
    for i, shape in enumerate(core_shapes):
      state_specs[f"state_core_{i}"] = (shape, tf.float32)
  return state_specs


def _input_signature(obs_spec, state_specs: StateSpecs) -> Dict[str, Any]:
  """name -> tf.TensorSpec [B, ...] of the policy's inputs (the names become
  the signature's keyword arguments)."""
  import tensorflow as tf

  shapes_and_dtypes = {
    "observation": (tuple(obs_spec.shape), obs_spec.dtype),
    "first": ((), tf.bool),
    "reward": ((), tf.float32),
    **state_specs,
  }
  return {
    name: tf.TensorSpec((None,) + shape, dtype, name=name)
    for name, (shape, dtype) in shapes_and_dtypes.items()
  }


def _policy(inputs, step, recurrent: bool, run, num_cores: int):
  """One greedy step of the exported policy: {action, state_*} [B, ...] for
  the inputs {observation, first, reward, state_*} (see the module
  docstring); `step` and `recurrent` as greedy_policy returns them."""
  import tensorflow as tf

  act_spec, k = run.action_spec, run.frame_stack
  first = inputs["first"]
  observation = inputs["observation"]
  out = {}
  if k > 1:
    # As the learner's EnvStateTable: zeros before an episode's first
    # frame, the newest frame last.
    frames = _keep(first, inputs["state_frames"])
    observation = tf.concat([frames, observation[..., None]], axis=-1)
    out["state_frames"] = observation[..., 1:]
  prev_action = tf.zeros(
    tf.concat([tf.shape(first), _dims(tuple(act_spec.shape))], 0),
    act_spec.dtype,
  )
  core: Tuple[Any, ...] = ()
  if recurrent:
    prev_action = _keep(first, inputs["state_prev_action"])
    core = tuple(
      _keep(first, inputs[f"state_core_{i}"]) for i in range(num_cores)
    )
  action, core = step(observation, prev_action, inputs["reward"], first, core)
  out["action"] = action
  if recurrent:
    out["state_prev_action"] = action
    for i, c in enumerate(core):
      out[f"state_core_{i}"] = c
  return out


def _dims(shape):
  """A shape as an int32 vector, for tf.zeros of a dynamic batch."""
  import tensorflow as tf

  return tf.constant(list(shape), tf.int32, shape=[len(shape)])


def _keep(first, x):
  """x [B, ...] with the rows where `first` [B] zeroed (a fresh episode's
  state)."""
  import tensorflow as tf

  mask = tf.reshape(tf.logical_not(first), [-1] + [1] * (x.shape.rank - 1))
  return tf.where(mask, x, tf.zeros_like(x))


def _description(
  run, input_signature: Dict[str, Any], state_specs: StateSpecs
) -> Dict[str, Any]:
  """What seed_rl_export.json says about the policy's inputs and outputs."""
  act_spec = run.action_spec
  return {
    "env": run.env,
    "agent": run.agent_name,
    "checkpoint": run.checkpoint,
    "learner_step": run.learner_step,
    "env_steps": run.env_steps,
    "frame_stack": run.frame_stack,
    "inputs": {
      name: {"shape": [None] + list(spec.shape[1:]), "dtype": spec.dtype.name}
      for name, spec in input_signature.items()
    },
    "outputs": ["action"] + list(state_specs),
    "action": {
      "shape": list(act_spec.shape),
      "dtype": str(act_spec.dtype),
      "num_values": act_spec.num_values,
    },
  }


def export(run, out_dir: str) -> Dict[str, Any]:
  """Writes the SavedModel of `run` (a saved_run.LoadedRun) to `out_dir`."""
  import tensorflow as tf

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
  p = saved_run.tool_parser("python -m seed_rl.export", __doc__)
  p.add_argument("--out", required=True, help="SavedModel directory")
  return p


def main(argv=None) -> int:
  args = build_parser().parse_args(argv)
  tf_startup.import_tensorflow()
  return saved_run.run_tool(args, lambda run: export(run, args.out))


if __name__ == "__main__":
  sys.exit(main())
