"""What the transition-replay agents share: `transition_replay` (DQN, SAC,
TD3/DDPG), and `OffPolicyAgent` with `check_off_policy`, the checks of its
config fields (the continuous-control ones, SAC and TD3).

SAC and TD3 keep n-step transitions in uniform replay behind the rate limiter
(seed_rl.common.transitions), act uniformly at random over the action Box
for the first `random_steps` env steps, act through a compiled
`_act_fn(observation, eval_mask, random_phase) -> (action in [-1, 1], value)`
and train through `_train_fns[update_actor]`, one compiled graph call per
learner step with the actor updated every `policy_delay` steps.

Random steps are counted as transitions inserted into replay (one per env
step of a training env), kept in a checkpointed variable: the count is exact
whatever the number of envs and evaluation actors, and a resumed run does not
start acting randomly again. It trails the env steps by at most one unroll
per env.

With LearnerConfig.training_devices each update of a learner step (critics,
actor, temperature) runs on every device's shard of the batch and applies its
optimizer once to every copy (seed_rl/agents/multi_device.py, `run_sharded`);
the networks, log alpha and the optimizers' slots are mirrored, the step and
env-step counters and the random generators are not (the training noise is
drawn for the whole batch and split with it).
"""

from __future__ import annotations

from typing import (
  Any,
  Callable,
  Dict,
  List,
  Mapping,
  Optional,
  Sequence,
  Tuple,
)

import tensorflow as tf

from seed_rl.agents import learning
from seed_rl.agents import multi_device
from seed_rl.common import agent_api
from seed_rl.agents import config_checks as checks
from seed_rl.common import devices
from seed_rl.agents import diagnostics
from seed_rl.common import optimizers
from seed_rl.common import transitions
from seed_rl.common.agent_api import ActInputs, ActOutputs, Agent, Unroll


def transition_replay(
  config: Any, num_envs: int, **kwargs: Any
) -> transitions.TransitionReplay:
  """The n-step transition replay a config describes (replay_capacity,
  batch_size, min_replay_size, samples_per_insert,
  rate_limiter_error_buffer, unroll_length, discount, n_step, seed);
  `kwargs` go to TransitionReplay as they are (e.g. DQN's prioritization)."""
  cfg = config
  return transitions.TransitionReplay(
    cfg.replay_capacity,
    cfg.batch_size,
    cfg.min_replay_size,
    cfg.samples_per_insert,
    cfg.rate_limiter_error_buffer,
    num_envs,
    cfg.unroll_length,
    cfg.discount,
    cfg.n_step,
    seed=cfg.seed,
    **kwargs,
  )


def check_off_policy(config) -> None:
  """Checks the config fields SAC and TD3 share (SACConfig, TD3Config):
  data/replay, discount, tau, optimizer and torso."""
  checks.positive_ints(
    config,
    "unroll_length",
    "batch_size",
    "replay_capacity",
    "min_replay_size",
    "n_step",
    "policy_delay",
  )
  if config.unroll_length < config.n_step:
    checks.fail(
      config,
      f"unroll_length ({config.unroll_length}) must be >= n_step "
      f"({config.n_step}): an unroll of unroll_length + 1 steps overlapping "
      f"the previous one by n_step steps would hold no new transition",
    )
  checks.min_replay_size(config)
  if config.min_replay_size < config.batch_size:
    checks.fail(
      config,
      f"min_replay_size ({config.min_replay_size}) must be >= batch_size "
      f"({config.batch_size}) so the first batch is not mostly duplicates",
    )
  checks.positive(config, "samples_per_insert", why="0 would never train")
  checks.rate_limiter_error_buffer(config, config.rate_limiter_error_buffer)
  if isinstance(config.random_steps, bool) or not (
    isinstance(config.random_steps, int) and config.random_steps >= 0
  ):
    checks.fail(
      config,
      f"random_steps must be an integer >= 0 (env steps), got "
      f"{config.random_steps!r}",
    )
  checks.discount(config)
  if not 0 < config.tau <= 1:
    checks.fail(
      config,
      f"tau must be in (0, 1] (1 copies the online weights each update, 0 "
      f"never moves the targets), got {config.tau}",
    )
  checks.positive(config, "learning_rate")
  if config.actor_learning_rate is not None:
    checks.positive(config, "actor_learning_rate")
  checks.optimizer_epsilon(config, "optimizer_epsilon")
  checks.max_grad_norm(config)
  checks.torso_factory(config)


def make_generator(seed: Optional[int], stream: int) -> tf.random.Generator:
  """A TF generator per thread (inference, training) so the two never share
  one state; None seeds from the OS."""
  if seed is None:
    return tf.random.Generator.from_non_deterministic_state()
  return tf.random.Generator.from_seed(seed * 2 + stream)


class OffPolicyAgent(Agent):
  """Replay, random phase, acting and the learner step of SAC and TD3.

  Subclasses set `config`, `box` (continuous.BoxScaling), `action_size`,
  call `_init_placement(config_name)`, then inside `_training_scope()` set
  `_critics` and `_target_critics`, `_critic_variables` (theirs, trained by
  `_critic_optimizer`), `_optimizers` (every optimizer, the critics' first),
  then call `_init_replay(num_envs)` (outside that scope), and build
  `_act_fn` (acting inside `_inference_scope()`) and `_train_fns` ({True:
  with the actor update, False: critics only}, each step inside
  `_training_scope()`) from the pieces below; `_greedy_action` gives the
  exported (greedy) policy.
  """

  config: Any
  box: Any
  action_size: int
  _critics: List[Any]
  _target_critics: List[Any]
  _critic_variables: List[tf.Variable]
  _critic_optimizer: optimizers.Optimizer
  _optimizers: Tuple[optimizers.Optimizer, ...]
  _act_fn: Any
  _train_fns: Dict[bool, Any]
  # The learner's devices (seed_rl/common/devices.py; `_init_placement`).
  _placement = devices.Placement()

  def _init_placement(self, config_name: str) -> None:
    """Takes the learner's placement; with training devices the batch
    must split into equal shards, one per device."""
    self._placement = devices.current()
    if self._placement.strategy is not None:
      devices.shard_size(
        self.config.batch_size, self._placement, f"{config_name}.batch_size"
      )

  @property
  def _strategy(self) -> Optional[tf.distribute.Strategy]:
    return self._placement.strategy

  def _training_scope(self) -> Any:
    """Variables built inside are mirrored on every training device."""
    return multi_device.training_scope(self._strategy)

  def _inference_scope(self) -> Any:
    """Acting on LearnerConfig.inference_device, if set."""
    return multi_device.device_scope(self._placement.inference_device)

  def _init_replay(self, num_envs: int) -> None:
    cfg = self.config
    self.unroll_length = cfg.unroll_length
    self.unroll_overlap = cfg.unroll_overlap
    self._step_counter = optimizers.learner_step_counter()
    self._env_steps = tf.Variable(
      0, dtype=tf.int64, trainable=False, name="inserted_env_steps"
    )
    self._data = transition_replay(cfg, num_envs)
    self._act_generator = make_generator(cfg.seed, 0)
    self._train_generator = make_generator(cfg.seed, 1)

  keeps_replay = True

  def replay_state(self) -> Dict[str, Any]:
    return self._data.state_dict()

  def load_replay_state(self, state: Mapping[str, Any]) -> None:
    self._data.load_state_dict(dict(state))

  def _adam(self, learning_rate: float, variables) -> optimizers.Optimizer:
    return learning.adam(self.config, learning_rate, variables)

  # ---- Agent API ---------------------------------------------------------

  @property
  def step_counter(self) -> tf.Variable:
    return self._step_counter

  @property
  def critics(self):
    return tuple(self._critics)

  @property
  def target_critics(self):
    return tuple(self._target_critics)

  @property
  def replay(self):
    return self._data.replay

  @property
  def env_steps(self) -> int:
    """Env steps counted so far (transitions inserted into replay)."""
    return int(self._env_steps.numpy())

  def random_phase(self) -> bool:
    return self.env_steps < self.config.random_steps

  def act(self, inputs: ActInputs) -> ActOutputs:
    inputs = agent_api.check_act_inputs(inputs, self.observation_spec)
    action, value = self._act_fn(
      inputs.observation, inputs.eval_mask, tf.constant(self.random_phase())
    )
    return ActOutputs(
      action=self.box.to_env(action.numpy()),
      value=value.numpy(),
      extras={},
      core_state=(),
    )

  def add_unrolls(self, unrolls: Unroll) -> None:
    agent_api.check_unroll(
      unrolls, self.unroll_length, self.observation_spec, self.action_spec
    )
    # Counted before the insert, which may block on the rate limiter.
    self._env_steps.assign_add(
      unrolls.batch_size * (self.unroll_length + 1 - self.unroll_overlap)
    )
    self._data.add(unrolls, action=self.box.from_env(unrolls.action))

  def train_step(self) -> Mapping[str, float]:
    cfg = self.config
    items = self._data.sample()
    if items is None:
      return {}
    step = int(self._step_counter.numpy())
    train_fn = self._train_fns[step % cfg.policy_delay == 0]
    metrics = train_fn(
      items["observation"],
      items["action"],
      items["return"],
      items["discount"],
      items["next_observation"],
    )
    result = {name: float(value) for name, value in metrics.items()}
    result[agent_api.SAMPLES_METRIC] = float(cfg.batch_size)
    result.update(self._data.metrics())
    result["perf/policy_lag"] = agent_api.policy_lag(
      step, items["policy_version"]
    )
    return result

  def greedy_policy(self) -> Tuple[agent_api.GreedyStep, bool]:
    """`_greedy_action` (SAC: the tanh of the mean; TD3: the actor) mapped
    into the Box, as `act` for evaluation rows."""
    greedy, box = self._greedy_action, self.box

    def step(observation, prev_action, reward, done, core):
      del prev_action, reward, done
      return box.to_env_tensor(greedy(observation)), core

    return step, False

  def _greedy_action(self, observation: tf.Tensor) -> tf.Tensor:
    """The deterministic action [B, A] in [-1, 1] (TensorFlow ops); each
    agent on this base defines it (SAC: tanh of the mean; TD3: the actor)."""
    raise NotImplementedError(
      f"{type(self).__name__} must define _greedy_action(observation) for "
      f"greedy_policy() (seed_rl.export)"
    )

  def _checkpoint_critics(self) -> Dict[str, Any]:
    """Step, random-phase counter and every critic; replay contents are not
    checkpointed (a restored run refills replay before training resumes).
    Variable lists are explicit as in DQN: the target critics have no
    optimizer that would reach their variables otherwise."""
    objects: Dict[str, Any] = {
      "step": self._step_counter,
      "inserted_env_steps": self._env_steps,
    }
    pairs = zip(self._critics, self._target_critics)
    for i, (critic, target) in enumerate(pairs):
      objects[f"critic_{i + 1}"] = critic
      objects[f"target_critic_{i + 1}"] = target
      objects[f"critic_{i + 1}_variables"] = list(critic.variables)
      objects[f"target_critic_{i + 1}_variables"] = list(target.variables)
    return objects

  def stop(self) -> None:
    self._data.stop()

  # ---- pieces of the compiled functions ----------------------------------

  def _act_signature(self) -> List[tf.TensorSpec]:
    """act_fn(observation [B, ...], eval_mask [B], random_phase [])."""
    obs_spec = self.observation_spec
    return [
      tf.TensorSpec((None,) + obs_spec.shape, obs_spec.dtype),
      tf.TensorSpec([None], tf.bool),
      tf.TensorSpec([], tf.bool),
    ]

  def _behaviour_action(
    self, greedy: tf.Tensor, explore: tf.Tensor, random_phase, eval_mask
  ) -> tf.Tensor:
    """The action [B, A] in [-1, 1]: `greedy` for evaluation rows; for the
    others uniform over [-1, 1]^A in the random phase, else `explore`."""
    uniform = self._act_generator.uniform(tf.shape(greedy), -1.0, 1.0)
    explore = tf.where(random_phase, uniform, explore)
    return tf.where(eval_mask[:, None], greedy, explore)

  def _train_signature(self) -> List[tf.TensorSpec]:
    """train_fn(observation, action [B, A], return [B], discount [B],
    next_observation) of a replay batch, B = batch_size."""
    obs_spec, b = self.observation_spec, self.config.batch_size
    observation = tf.TensorSpec((b,) + obs_spec.shape, obs_spec.dtype)
    return [
      observation,
      tf.TensorSpec([b, self.action_size], tf.float32),
      tf.TensorSpec([b], tf.float32),
      tf.TensorSpec([b], tf.float32),
      observation,
    ]

  def _critic_update(
    self,
    batch: Sequence[tf.Tensor],
    noise: tf.Tensor,
    critic_target: Callable[..., tf.Tensor],
    critic_loss: Callable[[List[tf.Tensor], tf.Tensor], tf.Tensor],
  ) -> Tuple[List[tf.Tensor], Dict[str, tf.Tensor]]:
    """One step of the critics' optimizer on critic_loss([Q_j(s, a)], y).

    Args:
      batch: the train_fn arguments (observation, action, return, discount,
        next_observation), each [B, ...].
      noise: [B, A] N(0, I) for the target's next actions.
      critic_target: (return, discount, next_observation, noise) -> y [B].
      critic_loss: a mean over the batch (split over training devices).

    Returns the critics' gradients (for grad/* norms) and metrics
    'loss/critic', 'q/mean' (of the critics' mean), 'q/target_mean' and
    'q/td_error' (mean over critics of |y - Q_j|).
    """
    variables = self._critic_variables

    def loss_and_gradients(
      observation, action, returns, discount, next_observation, noise
    ):
      target = critic_target(returns, discount, next_observation, noise)
      with tf.GradientTape() as tape:
        q = [critic(observation, action) for critic in self._critics]
        loss = critic_loss(q, target)
      metrics = {
        "loss/critic": loss,
        "q/mean": tf.reduce_mean(tf.add_n(q) / len(q)),
        "q/target_mean": tf.reduce_mean(target),
        "q/td_error": tf.reduce_mean(
          tf.add_n([tf.abs(target - qj) for qj in q]) / len(q)
        ),
      }
      return tape.gradient(loss, variables), metrics, ()

    gradients, norm_gradients, metrics, _ = multi_device.run_sharded(
      self._strategy, loss_and_gradients, (*batch, noise), variables
    )
    self._critic_optimizer.apply_gradients(zip(gradients, variables))
    return norm_gradients, metrics

  def _finish_train_step(
    self, metrics, total_loss, gradients, variables
  ) -> Dict[str, tf.Tensor]:
    """Adds grad/* of every network trained this step, 'loss/total' and
    learning.finish_update's metrics (the learner step is counted)."""
    metrics.update(diagnostics.gradient_norms(gradients, variables))
    metrics["loss/total"] = total_loss
    return learning.finish_update(metrics, self._step_counter, self._optimizers)
