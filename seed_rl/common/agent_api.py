"""The contract between the learner runtime and an algorithm.

The runtime (seed_rl/common/learner.py) owns the gRPC server, the dynamic
inference batcher, per-environment state (run ids, recurrent core state,
previous action, frame stacks) and unroll assembly. An algorithm owns its
networks, what it stores (queue or replay) and how it trains.

Threads: `act` runs on the inference thread; `add_unrolls` on the inference
thread too (it may block to apply back-pressure); `train_step` runs on the
training thread, concurrently with `act`. Shapes use B for a batch of
environments and T for the unroll length (an unroll holds T+1 steps).
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from seed_rl.common.specs import ArraySpec

CoreState = Tuple[np.ndarray, ...]  # each [B, ...]; () for feed-forward agents

# The step of an agent's greedy policy (Agent.greedy_policy): TensorFlow ops
# (observation, prev_action, reward, done, core) -> (action, core).
GreedyStep = Callable[..., Tuple[Any, Tuple[Any, ...]]]


@dataclasses.dataclass
class ActInputs:
  """Inputs of one batched inference call (NumPy, batch-major).

  env_ids: int32 [B] global env ids (e.g. for per-env epsilon in R2D2).
  observation: [B, *obs_shape] what the agent sees (frames already stacked).
    Read-only, and valid only during `act`: the runtime may hand a view of
    its own per-env tables and change them at the next step (copy what
    must be kept).
  prev_action: [B, *action_shape] action taken before this step (zeros at an
    episode start).
  reward: float32 [B] reward of the previous transition (raw, unclipped).
  done: bool [B] this observation starts a new episode (core_state was
    already reset by the runtime for these rows).
  core_state: CoreState, each [B, ...].
  eval_mask: bool [B] rows belonging to evaluation environments (act
    greedily / deterministically there).
  """

  env_ids: np.ndarray
  observation: np.ndarray
  prev_action: np.ndarray
  reward: np.ndarray
  done: np.ndarray
  core_state: CoreState
  eval_mask: np.ndarray


@dataclasses.dataclass
class ActOutputs:
  """Outputs of one batched inference call.

  action: [B, *action_shape] in the action spec's dtype.
  value: float32 [B] the agent's value estimate of this observation (V(s) for
    actor-critics, max_a Q(s, a) for value-based agents). The runtime stores it
    as `bootstrap_value` when the observation was the final one of a
    truncated episode.
  extras: per-step arrays [B, ...] stored in unrolls under the same names
    (e.g. 'logits', 'log_prob').
  core_state: CoreState after this step, each [B, ...].
  """

  action: np.ndarray
  value: np.ndarray
  extras: Dict[str, np.ndarray]
  core_state: CoreState


@dataclasses.dataclass
class Unroll:
  """A batch of B unrolls of T+1 consecutive steps (batch-major, NumPy).

  Step 0 repeats the last `overlap` steps of the previous unroll of the same
  env (overlap=1: step 0 is the previous unroll's last step, as in SEED RL).
  Per-step fields describe step t: the observation seen, the reward and
  episode-end flags of the transition that led to it (SEED's EnvOutput), and
  the agent's output on it.

  env_ids: int32 [B].
  observation: [B, T+1, *obs_shape].
  reward: float32 [B, T+1] raw reward of the transition into step t.
  terminated: bool [B, T+1] the transition into step t ended the previous
    episode by termination (observation[t] is the next episode's first).
  truncated: bool [B, T+1] same, by truncation (time limit).
  bootstrap_value: float32 [B, T+1] where truncated[t], the behaviour value of
    the ended episode's final observation (0 elsewhere). Targets for step t-1
    bootstrap from it instead of from value(observation[t]).
  prev_action: [B, T+1, *action_shape].
  action: [B, T+1, *action_shape] action taken at step t.
  value: float32 [B, T+1] behaviour value at step t.
  extras: name -> [B, T+1, ...] from ActOutputs.extras.
  core_state: CoreState at the start of step 0 (before observation 0).
  policy_version: int64 [B, T+1] learner step whose weights acted at step t.
  frame_stack: k. 1: `observation` holds what the agent sees. k > 1 (for an
    agent with `trains_on_frames`): observations are stacks of k frames
    [*frame_shape, k] and `observation` holds each frame once,
    [B, k-1 + T+1, *frame_shape]: the k-1 frames before step 0, zero where
    older than an episode start at or before step 0, then step t's newest
    frame at k-1+t. Stacks are rebuilt from it and the episode starts
    (terminated or truncated at step t >= 1): common/frames.py in NumPy,
    agents/frame_stacks.py in the training step.
  """

  env_ids: np.ndarray
  observation: np.ndarray
  reward: np.ndarray
  terminated: np.ndarray
  truncated: np.ndarray
  bootstrap_value: np.ndarray
  prev_action: np.ndarray
  action: np.ndarray
  value: np.ndarray
  extras: Dict[str, np.ndarray]
  core_state: CoreState
  policy_version: np.ndarray
  frame_stack: int = 1

  @property
  def batch_size(self) -> int:
    return int(self.env_ids.shape[0])


class Agent(abc.ABC):
  """An algorithm as the learner runtime drives it.

  Constructed by its gin-configurable factory with the specs the learner
  announces (`observation_spec` is what `act` sees, after learner-side frame
  stacking) and the total number of environments.
  """

  # Unrolls carry `unroll_length + 1` steps; consecutive unrolls of one env
  # share `unroll_overlap` steps (1 for on-policy agents, burn-in + 1 or more
  # for R2D2-style sequence replay).
  unroll_length: int
  unroll_overlap: int = 1
  # True: the agent takes unrolls of frames (`Unroll.frame_stack` > 1) when
  # the learner stacks frames, and rebuilds the stacks where it trains;
  # False: the runtime rebuilds them before `add_unrolls`.
  trains_on_frames: bool = False
  # True: the agent keeps a replay that `replay_state` copies out for a
  # checkpoint (LearnerConfig.checkpoint_replay) and `load_replay_state`
  # puts back in a resumed run.
  keeps_replay: bool = False
  # Unrolls one training step takes from a queue (queue-fed on-policy
  # agents; LearnerConfig.synchronous needs it); None for replay agents.
  batch_unrolls: Optional[int] = None

  def __init__(
    self, observation_spec: ArraySpec, action_spec: ArraySpec, num_envs: int
  ):
    self.observation_spec = observation_spec
    self.action_spec = action_spec
    self.num_envs = num_envs

  def initial_core_state(self, batch_size: int) -> CoreState:
    """Zero recurrent state for `batch_size` envs; () if feed-forward."""
    del batch_size
    return ()

  @abc.abstractmethod
  def act(self, inputs: ActInputs) -> ActOutputs:
    """Batched inference with the latest weights. Thread: inference."""

  @abc.abstractmethod
  def add_unrolls(self, unrolls: Unroll) -> None:
    """Takes completed unrolls (queue or replay). May block (back-pressure)."""

  @abc.abstractmethod
  def train_step(self) -> Mapping[str, float]:
    """Runs one learner step; blocks until enough data is ready.

    Returns scalar metrics named by namespace ('loss/policy', ...). Must return
    promptly (with an empty dict) once `stop()` was called.
    """

  @property
  @abc.abstractmethod
  def step_counter(self) -> Any:
    """tf.Variable int64: learner steps done (checkpointed, drives schedules)."""

  @abc.abstractmethod
  def checkpoint_objects(self) -> Dict[str, Any]:
    """Trackables for tf.train.Checkpoint (networks, optimizer, normalizers)."""

  def replay_state(self) -> Dict[str, np.ndarray]:
    """What the replay holds, name -> NumPy array (no objects), consistent
    at one instant; only agents that keep a replay have one."""
    raise ValueError(f"{type(self).__name__} keeps no replay")

  def load_replay_state(self, state: Mapping[str, np.ndarray]) -> None:
    """Puts a `replay_state` back; ValueError naming what differs from
    this agent's replay settings."""
    del state
    raise ValueError(f"{type(self).__name__} keeps no replay")

  def stop(self) -> None:  # noqa: B027 (a no-op unless the agent blocks)
    """Unblocks `train_step` and `add_unrolls` at shutdown."""

  def greedy_policy(self) -> Tuple[GreedyStep, bool]:
    """The deterministic policy `seed_rl.export` saves: (step, recurrent).

    step(observation, prev_action, reward, done, core) -> (action, core)
    runs TensorFlow ops (traced into the SavedModel) on [B, ...] tensors as
    `act` gets them (frames stacked by the caller; prev_action, reward,
    done and the tuple `core` as in ActInputs) and returns the action `act`
    gives evaluation rows (`eval_mask`; with no exploration left, e.g.
    R2D2's eval_epsilon), in the action spec's dtype, and the new core state (`core` unchanged for
    feed-forward agents). `recurrent`: the step reads prev_action, reward,
    done and core (the export then carries them as state). Optional: an
    agent without it trains and evaluates but cannot be exported.
    """
    raise NotImplementedError(
      f"{type(self).__name__} does not implement greedy_policy(self) -> "
      "(step, recurrent) (seed_rl/common/agent_api.py)"
    )


# ---- helpers shared by agents (NumPy only, like the rest of this module) ---


def check_act_inputs(
  inputs: ActInputs,
  observation_spec: ArraySpec,
  action_spec: Optional[ArraySpec] = None,
  num_core_arrays: int = 0,
) -> ActInputs:
  """Validates one inference call's inputs and gives them canonical dtypes.

  Args:
    inputs: what the runtime passed to `Agent.act`.
    observation_spec: observation must be [B, *obs_shape] of its dtype.
    action_spec: when given (agents that feed the previous action to their
      network), prev_action must be [B, *action_shape] of its dtype.
    num_core_arrays: arrays the agent's core state holds (0: feed-forward).

  Returns:
    The inputs with reward float32 [B], done and eval_mask bool [B] and each
    core_state array float32.

  Raises:
    ValueError: naming the field, the shape or dtype found and the expected.
  """
  batch_size = int(inputs.observation.shape[0])
  observation_spec.check_batch(
    inputs.observation, batch_size, "ActInputs.observation"
  )
  if action_spec is not None:
    action_spec.check_batch(
      inputs.prev_action, batch_size, "ActInputs.prev_action"
    )
  converted: Dict[str, Any] = {}
  for name, dtype in (
    ("reward", np.float32),
    ("done", np.bool_),
    ("eval_mask", np.bool_),
  ):
    array = np.asarray(getattr(inputs, name), dtype)
    if array.shape != (batch_size,):
      raise ValueError(
        f"ActInputs.{name}: shape {list(array.shape)}, expected [{batch_size}]"
      )
    converted[name] = array
  if len(inputs.core_state) != num_core_arrays:
    raise ValueError(
      f"ActInputs.core_state has {len(inputs.core_state)} arrays, expected "
      f"{num_core_arrays} (use initial_core_state(B))"
    )
  converted["core_state"] = tuple(
    np.asarray(s, np.float32) for s in inputs.core_state
  )
  return dataclasses.replace(inputs, **converted)


def check_unroll(
  unroll: Unroll,
  unroll_length: int,
  observation_spec: ArraySpec,
  action_spec: ArraySpec,
  required_extras: Optional[Mapping[str, Tuple[int, ...]]] = None,
  core_state_shapes: Sequence[Tuple[int, ...]] = (),
  trains_on_frames: bool = False,
) -> None:
  """Raises ValueError unless `unroll` holds B unrolls of T+1 steps.

  Every per-step field must be [B, T+1, ...] with T = unroll_length;
  observation, prev_action and action also carry their spec's dtype,
  terminated and truncated are bool, and discrete actions lie in
  [0, num_values). Messages name the field, what was found and what was
  expected.

  Args:
    unroll: what the runtime passed to `Agent.add_unrolls`.
    unroll_length: T.
    observation_spec, action_spec: the agent's specs.
    required_extras: name -> per-step shape after [B, T+1] of the extras the
      agent's `act` stores and its training reads.
    core_state_shapes: shape after [B] of each core_state array; () for
      feed-forward agents.
    trains_on_frames: the agent's `trains_on_frames`: with frame stacking
      (`observation_spec.frame_stack` > 1) it takes unrolls of frames only.
  """
  b, t1 = unroll.batch_size, unroll_length + 1
  k = observation_spec.frame_stack
  if trains_on_frames and k > 1 and unroll.frame_stack != k:
    raise ValueError(
      f"Unroll.frame_stack is {unroll.frame_stack}, but this agent trains on "
      f"unrolls of frames (observation spec frame_stack {k}): the learner "
      "hands them over as frames when its LearnerConfig.frame_stack matches"
    )
  _check_unroll_steps(unroll, b, t1, observation_spec, action_spec)
  _check_action_range(unroll, action_spec)
  _check_unroll_extras(unroll, b, t1, required_extras or {})
  _check_unroll_core_state(unroll, b, t1, core_state_shapes)


def _check_unroll_field(name, array, shape, b, t1, dtype=None) -> None:
  """Raises ValueError unless Unroll.`name` has `shape` (and `dtype`)."""
  array = np.asarray(array)
  if tuple(array.shape) != tuple(shape):
    raise ValueError(
      f"Unroll.{name}: shape {list(array.shape)}, expected "
      f"{list(shape)} (batch {b}, unroll_length + 1 = {t1})"
    )
  if dtype is not None and array.dtype != np.dtype(dtype):
    raise ValueError(
      f"Unroll.{name}: dtype {array.dtype.name}, expected "
      f"{np.dtype(dtype).name}"
    )


def _check_unroll_steps(
  unroll: Unroll,
  b: int,
  t1: int,
  observation_spec: ArraySpec,
  action_spec: ArraySpec,
) -> None:
  """env_ids [B] and the per-step fields [B, T+1, ...] of the dataclass."""
  _check_unroll_field("env_ids", unroll.env_ids, (b,), b, t1)
  k = unroll.frame_stack
  if k > 1 and (
    observation_spec.frame_stack != k or observation_spec.shape[-1:] != (k,)
  ):
    raise ValueError(
      f"Unroll.frame_stack is {k} (unrolls of frames), but the agent's "
      f"observation spec {list(observation_spec.shape)} has frame_stack "
      f"{observation_spec.frame_stack}: the learner and the agent must be "
      "built with the same LearnerConfig.frame_stack"
    )
  _check_unroll_field(
    "observation",
    unroll.observation,
    (b, t1 + k - 1) + observation_spec.shape[: -1 if k > 1 else None],
    b,
    t1,
    observation_spec.dtype,
  )
  for name in ("prev_action", "action"):
    _check_unroll_field(
      name,
      getattr(unroll, name),
      (b, t1) + action_spec.shape,
      b,
      t1,
      action_spec.dtype,
    )
  for name in ("reward", "bootstrap_value", "value", "policy_version"):
    _check_unroll_field(name, getattr(unroll, name), (b, t1), b, t1)
  for name in ("terminated", "truncated"):
    _check_unroll_field(name, getattr(unroll, name), (b, t1), b, t1, np.bool_)


def _check_action_range(unroll: Unroll, action_spec: ArraySpec) -> None:
  """Discrete actions lie in [0, num_values)."""
  action = np.asarray(unroll.action)
  if (
    action_spec.is_discrete
    and action.size
    and (action.min() < 0 or action.max() >= action_spec.num_values)
  ):
    raise ValueError(
      f"Unroll.action: values must lie in [0, "
      f"{action_spec.num_values}), got range [{action.min()}, "
      f"{action.max()}]"
    )


def _check_unroll_extras(
  unroll: Unroll,
  b: int,
  t1: int,
  required_extras: Mapping[str, Tuple[int, ...]],
) -> None:
  """Each required extra is present, [B, T+1, *shape]."""
  for name, shape in required_extras.items():
    if name not in unroll.extras:
      raise ValueError(
        f"Unroll.extras lacks {name!r} (stored by the agent's "
        f"act()); has {sorted(unroll.extras)}"
      )
    _check_unroll_field(
      f"extras[{name!r}]", unroll.extras[name], (b, t1) + tuple(shape), b, t1
    )


def _check_unroll_core_state(
  unroll: Unroll, b: int, t1: int, core_state_shapes: Sequence[Tuple[int, ...]]
) -> None:
  """As many core_state arrays as shapes, each [B, *shape]."""
  if len(unroll.core_state) != len(core_state_shapes):
    raise ValueError(
      f"Unroll.core_state has {len(unroll.core_state)} "
      f"arrays, expected {len(core_state_shapes)}"
    )
  for i, (state, shape) in enumerate(zip(unroll.core_state, core_state_shapes)):
    _check_unroll_field(f"core_state[{i}]", state, (b,) + tuple(shape), b, t1)


# train_step may return this metric: how many transitions the step trained
# on (counted again when data is reused); the learner sums it into
# perf/samples_per_env_step instead of averaging it.
SAMPLES_METRIC = "perf/samples_trained"


def policy_lag(learner_step: int, policy_version: np.ndarray) -> float:
  """perf/policy_lag: learner steps between the weights that acted and now.

  On-policy agents see how far actors trail the learner; replay agents the
  mean age of the sampled data.
  """
  return float(learner_step) - float(np.mean(policy_version))


def unroll_rows(unroll: Unroll, rows: Any) -> Unroll:
  """The unrolls at `rows` of the batch axis, every field alike.

  `rows` is anything NumPy indexes one axis with: a slice (views, no copies),
  an index array or a boolean mask [B] (copies).
  """
  fields = {}
  for field in dataclasses.fields(Unroll):
    value = getattr(unroll, field.name)
    if field.name == "extras":
      value = {name: array[rows] for name, array in value.items()}
    elif field.name == "core_state":
      value = tuple(array[rows] for array in value)
    elif field.name != "frame_stack":
      value = value[rows]
    fields[field.name] = value
  return Unroll(**fields)


def time_major(array: np.ndarray, dtype: Any = None) -> np.ndarray:
  """Batch-major [B, T+1, ...] -> time-major [T+1, B, ...] (a view), cast
  to `dtype` when given (without a copy when it already has it)."""
  array = np.swapaxes(np.asarray(array), 0, 1)
  return array if dtype is None else array.astype(dtype, copy=False)


def check_time_major(fn: str, name: str, tensor, reference) -> None:
  """Raises ValueError unless `tensor` is [T, B] like `reference` (a tensor
  named 'values' in the caller `fn`); used by the return/advantage maths."""
  if tensor.shape.rank != 2:
    raise ValueError(
      f"{fn}: {name} must be time-major [T, B], got shape {tensor.shape}"
    )
  if not tensor.shape.is_compatible_with(reference.shape):
    raise ValueError(
      f"{fn}: {name} has shape {tensor.shape}, but values has "
      f"{reference.shape}; all inputs must be [T, B]"
    )
