"""Builders the agent tests share, written once.

Test modules import them as `from tests.support.helpers import fake_unroll`.

- `act_inputs`, `random_act_inputs`: the ActInputs the runtime hands
  Agent.act.
- `fake_unroll`: a seeded random Unroll with one termination and one
  truncation; `pendulum_unroll` is the one SAC and TD3 train on, with
  Pendulum-v1's specs `PENDULUM_OBS` and `PENDULUM_ACT`, and
  `pendulum_critics_agree` compares two such agents' critics.
- `fill`: adds seeded unrolls to an agent.
- `gin_file_parsed`: a built-in gin file parsed as the learner parses it.
- `saved_logdir`: a logdir as the learner leaves it, with an untrained
  agent's checkpoint, for the tools that read runs (seed_rl.evaluate).
- `checkpoint_round_trip`: an agent's `checkpoint_objects()` saved and
  restored into a fresh agent, with what every agent's restore must bring
  back checked; agent-specific checks (outputs of the restored networks)
  stay in each agent's test.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from typing import Any, Callable, Dict, Iterator, List, Optional

import gin
import numpy as np

from seed_rl import gin_utils
from seed_rl import registry
from seed_rl.common.agent_api import ActInputs, Unroll
from seed_rl.common.specs import ArraySpec

# Pendulum-v1's specs: 3-d observation, one torque in [-2, 2].
PENDULUM_OBS = ArraySpec((3,), "float32", name="observation")
PENDULUM_ACT = ArraySpec(
  (1,),
  "float32",
  name="action",
  minimum=np.asarray(-2.0),
  maximum=np.asarray(2.0),
)


def act_inputs(
  observation: np.ndarray,
  action_spec: Optional[ArraySpec] = None,
  *,
  eval_mask: Optional[np.ndarray] = None,
  core_state: Any = (),
) -> ActInputs:
  """ActInputs for `observation` [B, ...]: env ids 0..B-1, zero previous
  actions (shaped by `action_spec`; a [B] float32 vector without one, for
  agents that ignore them), rewards and dones, and every env training
  unless `eval_mask` [B] says otherwise."""
  batch = len(observation)
  if action_spec is None:
    prev_action = np.zeros(batch, np.float32)
  else:
    prev_action = np.zeros((batch,) + action_spec.shape, action_spec.dtype)
  return ActInputs(
    env_ids=np.arange(batch, dtype=np.int32),
    observation=observation,
    prev_action=prev_action,
    reward=np.zeros(batch, np.float32),
    done=np.zeros(batch, bool),
    core_state=core_state,
    eval_mask=np.zeros(batch, bool) if eval_mask is None else eval_mask,
  )


def random_act_inputs(
  observation_shape: tuple,
  action_spec: ArraySpec,
  batch: int,
  *,
  eval_mask: Optional[np.ndarray] = None,
  seed: int = 0,
) -> ActInputs:
  """`act_inputs` for `batch` unit-Gaussian float32 observations."""
  observation = np.random.default_rng(seed).normal(
    size=(batch,) + tuple(observation_shape)
  )
  return act_inputs(
    observation.astype(np.float32), action_spec, eval_mask=eval_mask
  )


def _random_actions(rng, action_spec: ArraySpec, shape: tuple, gaussian: bool):
  """(action, raw): uniform discrete actions, or continuous ones uniform over
  the spec's bounds ([-1, 1] where it has none) or, with `gaussian`, a unit
  Gaussian sample `raw` clipped to them."""
  if action_spec.is_discrete:
    action = rng.integers(0, action_spec.num_values, shape).astype(np.int32)
    return action, action
  shape = shape + action_spec.shape
  low = -1.0 if action_spec.minimum is None else action_spec.minimum
  high = 1.0 if action_spec.maximum is None else action_spec.maximum
  if gaussian:
    raw = rng.normal(size=shape).astype(np.float32)
    return np.clip(raw, low, high).astype(np.float32), raw
  action = rng.uniform(low, high, size=shape).astype(np.float32)
  return action, action


def fake_unroll(
  observation_shape: tuple,
  action_spec: ArraySpec,
  *,
  batch: int = 4,
  t1: int = 6,
  seed: int = 0,
  reward_fn: Optional[Callable[[np.ndarray], np.ndarray]] = None,
  bootstrap: float = 1.5,
  gaussian: bool = False,
  extras_fn: Optional[Callable[[Any, np.ndarray], Dict[str, Any]]] = None,
) -> Unroll:
  """A random Unroll [batch >= 2, t1]: env 0 terminates at step 2, env 1 is
  truncated at step 3 (bootstrap value `bootstrap`), nothing else ends.

  Draws from default_rng(seed), in this order: the actions (uniform; with
  `gaussian`, continuous actions are a Gaussian policy's samples clipped to
  the bounds, the raw sample in extras['raw_action'] as A2C and PPO send
  it), the rewards (unit Gaussian, unless `reward_fn(action)` gives them),
  the observations (unit Gaussian), then `extras_fn(rng, action)`'s extras.
  """
  rng = np.random.default_rng(seed)
  action, raw = _random_actions(rng, action_spec, (batch, t1), gaussian)
  extras: Dict[str, Any] = {}
  if gaussian and not action_spec.is_discrete:
    from seed_rl.agents.queue_fed import RAW_ACTION  # imports TensorFlow

    extras[RAW_ACTION] = raw
  terminated = np.zeros((batch, t1), bool)
  truncated = np.zeros((batch, t1), bool)
  terminated[0, 2] = True
  truncated[1, 3] = True
  reward = (
    rng.normal(size=(batch, t1)) if reward_fn is None else reward_fn(action)
  )
  observation = rng.normal(size=(batch, t1) + tuple(observation_shape))
  if extras_fn is not None:
    extras.update(extras_fn(rng, action))
  return Unroll(
    env_ids=np.arange(batch, dtype=np.int32),
    observation=observation.astype(np.float32),
    reward=reward.astype(np.float32),
    terminated=terminated,
    truncated=truncated,
    bootstrap_value=np.where(truncated, bootstrap, 0.0).astype(np.float32),
    prev_action=np.zeros_like(action),
    action=action,
    value=np.zeros((batch, t1), np.float32),
    extras=extras,
    core_state=(),
    policy_version=np.zeros((batch, t1), np.int64),
  )


def pendulum_unroll(batch: int = 4, steps: int = 5, seed: int = 0) -> Unroll:
  """A Pendulum-shaped `fake_unroll`: actions uniform over [-2, 2], the
  truncated env bootstrapping from -7."""
  return fake_unroll(
    PENDULUM_OBS.shape,
    PENDULUM_ACT,
    batch=batch,
    t1=steps,
    seed=seed,
    bootstrap=-7.0,
  )


def pendulum_critics_agree(restored, agent) -> np.ndarray:
  """Checks that `restored`'s critics and target critics (SAC, TD3) give
  `agent`'s Q-values, i.e. compute with the restored weights, on 5
  Pendulum observations; returns those observations."""
  x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
  a = np.zeros((5, 1), np.float32)
  for mine, theirs in zip(
    restored.critics + restored.target_critics,
    agent.critics + agent.target_critics,
    strict=True,
  ):
    np.testing.assert_allclose(mine(x, a).numpy(), theirs(x, a).numpy())
  return x


def fill(agent, make_unroll: Callable[..., Unroll], rounds: int = 2) -> None:
  """Adds `make_unroll(seed=i)` for i in range(rounds) to `agent`."""
  for i in range(rounds):
    agent.add_unrolls(make_unroll(seed=i))


@contextlib.contextmanager
def gin_file_parsed(env: str, agent: str) -> Iterator[None]:
  """The built-in gin file of the pair (env, agent), parsed as the learner
  parses it (the pair checked, the env's and the learner's configurables
  imported first) for the body of the `with`; the gin config is cleared
  before and after."""
  registry.check_pair(env, agent)
  registry.env_module(env)
  for module in registry.LEARNER_GIN_MODULES:  # LearnerConfig, torsos
    importlib.import_module(module)
  gin.clear_config()
  try:
    gin_utils.parse([registry.gin_file(env, agent)], [])
    yield
  finally:
    gin.clear_config()


def saved_logdir(
  logdir: str, env: str, agent: str, num_envs: int = 4, env_steps: int = 0
) -> str:
  """Writes into `logdir` what the learner leaves there: the checkpoint of
  an untrained `agent` built from the pair's gin file (with `env_steps`),
  operative_config.gin and run.json. Returns `logdir`."""
  from seed_rl.common import learner as learner_lib
  from seed_rl.common import saved_run
  from seed_rl.common.checkpoints import Checkpointer
  from seed_rl.common.env_state import stacked_observation_spec

  gin.clear_config()
  with gin.unlock_config():
    env_module = registry.env_module(env)
    agent_module = registry.agent_module(agent)
    for name in registry.learner_gin_modules(env):
      importlib.import_module(name)
  try:
    gin_utils.parse([registry.gin_file(env, agent)], [])
    config = learner_lib.LearnerConfig()
    with env_module.create_environment(num_envs=1, seed=0) as probe:
      obs_spec, action_spec = probe.observation_spec, probe.action_spec
    the_agent = agent_module.create_agent(
      stacked_observation_spec(obs_spec, config.frame_stack),
      action_spec,
      num_envs,
    )
    Checkpointer(
      os.path.join(logdir, "checkpoints"), the_agent.checkpoint_objects()
    ).save(env_steps=env_steps)
    gin_utils.write_operative_config(logdir)
    saved_run.write_run_spec(logdir, env, agent, num_envs, 0, 0, [], [])
  finally:
    gin.clear_config()
  return logdir


def _checkpointed_values(obj) -> List[np.ndarray]:
  """The values of what a checkpoint object holds: an optimizer's iteration
  count (a Keras optimizer may build its slots only at its first update, so
  they are left to the agents' own tests), a Keras network's trainable weights (other state, such as
  noisy layers' noise, is restored only where the agent lists the variables
  explicitly, as DQN does), a tf.Module's variables, or a variable."""
  if isinstance(obj, (list, tuple)):
    return [value for item in obj for value in _checkpointed_values(item)]
  if hasattr(obj, "iterations"):
    return [np.array(obj.iterations.numpy())]
  if hasattr(obj, "trainable_weights"):
    return [np.array(v.numpy()) for v in obj.trainable_weights]
  if hasattr(obj, "variables"):
    return [np.array(v.numpy()) for v in obj.variables]
  return [np.array(obj.numpy())]


def checkpoint_round_trip(
  agent,
  make_agent: Callable[[], Any],
  tmp_path,
  *,
  after_save: Optional[Callable[[], None]] = None,
):
  """Saves `agent.checkpoint_objects()` under tmp_path, calls `after_save`
  (e.g. to train on, so the restore must not see the agent's later state),
  restores into `make_agent()` and returns that agent.

  Checks that the fresh agent checkpoints the same objects, that the
  restore matched every object in the file (assert_consumed) and that every
  value saved came back: the learner step, each optimizer's iteration
  count, the networks' weights, the normalizers and the variables listed.
  """
  import tensorflow as tf

  objects = agent.checkpoint_objects()
  saved = {name: _checkpointed_values(obj) for name, obj in objects.items()}
  path = tf.train.Checkpoint(**objects).save(str(tmp_path / "ckpt"))
  if after_save is not None:
    after_save()
  restored = make_agent()
  fresh = restored.checkpoint_objects()
  assert set(fresh) == set(objects)
  tf.train.Checkpoint(**fresh).restore(path).assert_consumed()
  for name, values in saved.items():
    assert values, f"{name}: nothing to compare"
    got = _checkpointed_values(fresh[name])
    assert len(got) == len(values), name
    for mine, theirs in zip(got, values):
      np.testing.assert_array_equal(mine, theirs, err_msg=name)
  return restored


def runtime_stacks(rng, batch, steps, depth=4, size=3):
  """Unrolls as the runtime stacks them: [B, T+1, H, W, k] uint8 with zeros
  in the slots older than each episode's first step, and their done flags."""
  done = rng.random((batch, steps)) < 0.15
  stream = rng.integers(1, 255, (batch, steps + depth - 1, size, size))
  # Episode starts inside the k-1 steps before step 0 are invisible in done;
  # keep those slots nonzero so the layout is the runtime's.
  obs = np.zeros((batch, steps, size, size, depth), np.uint8)
  for b in range(batch):
    start = -depth  # no episode start seen yet
    for t in range(steps):
      if done[b, t]:
        start = t
      for c in range(depth):
        age = depth - 1 - c
        if t - age >= start:
          obs[b, t, ..., c] = stream[b, t + c]
  return obs, done
