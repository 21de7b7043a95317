"""Soft Actor-Critic as the learner runtime drives it.

Data flow: `act` (inference thread) samples squashed-Gaussian actions for
training envs (uniform over the Box for the first `random_steps` env steps,
the tanh of the mean for evaluation envs) and reports the soft value
V(s) = min_j Q_j(s, a) - alpha log pi(a|s) of a sampled a, which the runtime
keeps as the bootstrap value of truncated episodes; `add_unrolls`
(inference thread) cuts unrolls into n-step transitions (seed_rl.common.
transitions: terminations never bootstrap, truncations bootstrap from that
value), stores them in uniform replay and applies the rate limiter's
back-pressure; `train_step` (training thread) samples a batch, updates both
critics against the soft target, then (every `policy_delay` steps) the
policy and the temperature, then Polyak-averages the target critics. One
learner step is one compiled graph call.

Random steps are counted as transitions inserted into replay (one per env
step of a training env), kept in a checkpointed variable: the count is exact
whatever the number of envs and evaluation actors, and a resumed run does not
start acting randomly again. It trails the env steps by at most one unroll
per env.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional

import tensorflow as tf

from seed_rl.agents.sac import loss as loss_lib
from seed_rl.agents.sac import networks
from seed_rl.agents.sac.config import SACConfig
from seed_rl.common import agent_api
from seed_rl.common import diagnostics
from seed_rl.common import optimizers
from seed_rl.common import target_network
from seed_rl.common import transitions
from seed_rl.common.agent_api import ActInputs, ActOutputs, Agent, Unroll
from seed_rl.common.specs import ArraySpec


def make_generator(seed: Optional[int], stream: int) -> tf.random.Generator:
  """A TF generator per thread (inference, training) so the two never share
  one state; None seeds from the OS."""
  if seed is None:
    return tf.random.Generator.from_non_deterministic_state()
  return tf.random.Generator.from_seed(seed * 2 + stream)


class SACAgent(Agent):
  """SAC with twin critics, target critics and a learned temperature."""

  def __init__(
    self,
    observation_spec: ArraySpec,
    action_spec: ArraySpec,
    num_envs: int,
    config: Optional[SACConfig] = None,
  ):
    super().__init__(observation_spec, action_spec, num_envs)
    self.box = networks.BoxScaling(action_spec, "SAC")
    cfg = self.config = config if config is not None else SACConfig()
    self.unroll_length = cfg.unroll_length
    self.unroll_overlap = cfg.unroll_overlap
    self.action_size = self.box.action_size
    self.target_entropy = (
      float(cfg.target_entropy)
      if cfg.target_entropy is not None
      else -float(self.action_size)
    )
    self._policy = networks.GaussianPolicy(
      cfg.torso,
      self.action_size,
      cfg.head_hidden,
      cfg.min_log_std,
      cfg.max_log_std,
      name="sac_policy",
    )
    networks.build(self._policy, observation_spec)
    self._critics: List[networks.QNetwork] = []
    self._targets: List[networks.QNetwork] = []
    for i in (1, 2):
      for kind, group in (("critic", self._critics), ("target", self._targets)):
        critic = networks.QNetwork(
          cfg.torso, cfg.head_hidden, name=f"sac_{kind}_{i}"
        )
        networks.build(critic, observation_spec, self.action_size)
        group.append(critic)
    self._critic_variables = [
      v for c in self._critics for v in c.trainable_variables
    ]
    self._target_variables = [
      v for c in self._targets for v in c.trainable_variables
    ]
    target_network.hard_update(self._critic_variables, self._target_variables)
    self._log_alpha = tf.Variable(
      math.log(cfg.initial_temperature),
      dtype=tf.float32,
      trainable=cfg.learn_temperature,
      name="log_alpha",
    )

    def adam(learning_rate, variables):
      return optimizers.make_optimizer(
        "adam",
        learning_rate,
        epsilon=cfg.optimizer_epsilon,
        max_grad_norm=cfg.max_grad_norm,
        variables=variables,
      )

    self._critic_optimizer = adam(cfg.learning_rate, self._critic_variables)
    self._actor_optimizer = adam(
      cfg.policy_learning_rate, self._policy.trainable_variables
    )
    # CleanRL and softlearning step the temperature at the critics' rate.
    self._alpha_optimizer = adam(cfg.learning_rate, [self._log_alpha])
    self._optimizers = (
      self._critic_optimizer,
      self._actor_optimizer,
      self._alpha_optimizer,
    )
    self._step_counter = optimizers.learner_step_counter()
    self._env_steps = tf.Variable(
      0, dtype=tf.int64, trainable=False, name="inserted_env_steps"
    )
    self._data = transitions.TransitionReplay(
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
    )
    self._act_generator = make_generator(cfg.seed, 0)
    self._train_generator = make_generator(cfg.seed, 1)
    self._act_fn = self._make_act_fn()
    self._train_fns = {
      True: self._make_train_fn(cfg.policy_delay),
      False: self._make_train_fn(0),
    }

  # ---- Agent API ---------------------------------------------------------

  @property
  def step_counter(self) -> tf.Variable:
    return self._step_counter

  @property
  def policy(self) -> networks.GaussianPolicy:
    return self._policy

  @property
  def critics(self):
    return tuple(self._critics)

  @property
  def target_critics(self):
    return tuple(self._targets)

  @property
  def log_alpha(self) -> tf.Variable:
    return self._log_alpha

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

  def checkpoint_objects(self) -> Dict[str, Any]:
    # Replay contents are not checkpointed: a restored run refills replay
    # (min_replay_size transitions) before training resumes. Variable lists
    # are explicit as in DQN: the target critics have no optimizer that
    # would reach their variables otherwise.
    objects: Dict[str, Any] = {
      "policy": self._policy,
      "policy_variables": list(self._policy.variables),
      "log_alpha": self._log_alpha,
      "critic_optimizer": self._critic_optimizer,
      "actor_optimizer": self._actor_optimizer,
      "alpha_optimizer": self._alpha_optimizer,
      "step": self._step_counter,
      "inserted_env_steps": self._env_steps,
    }
    for i, (critic, target) in enumerate(zip(self._critics, self._targets)):
      objects[f"critic_{i + 1}"] = critic
      objects[f"target_critic_{i + 1}"] = target
      objects[f"critic_{i + 1}_variables"] = list(critic.variables)
      objects[f"target_critic_{i + 1}_variables"] = list(target.variables)
    return objects

  def stop(self) -> None:
    self._data.stop()

  # ---- compiled functions ------------------------------------------------

  def _make_act_fn(self):
    obs_spec = self.observation_spec
    policy, (critic_1, critic_2) = self._policy, self._critics
    generator, log_alpha = self._act_generator, self._log_alpha

    @tf.function(
      input_signature=[
        tf.TensorSpec((None,) + obs_spec.shape, obs_spec.dtype),
        tf.TensorSpec([None], tf.bool),
        tf.TensorSpec([], tf.bool),
      ]
    )
    def act_fn(observation, eval_mask, random_phase):
      """-> action [B, A] in [-1, 1], soft value [B]."""
      mean, log_std = policy(observation)
      sampled, log_prob = loss_lib.sample_action(
        mean, log_std, generator.normal(tf.shape(mean))
      )
      # V(s) = E_a~pi[min_j Q_j(s, a) - alpha log pi(a|s)], one sample.
      value = (
        tf.minimum(
          critic_1(observation, sampled), critic_2(observation, sampled)
        )
        - tf.exp(log_alpha) * log_prob
      )
      uniform = generator.uniform(tf.shape(mean), -1.0, 1.0)
      explore = tf.where(random_phase, uniform, sampled)
      action = tf.where(eval_mask[:, None], tf.tanh(mean), explore)
      return action, value

    return act_fn

  def _make_train_fn(self, actor_updates: int):
    """One learner step: critics, then `actor_updates` policy (and
    temperature) updates on the same batch, then the target critics."""
    cfg = self.config
    obs_spec, b, a = self.observation_spec, cfg.batch_size, self.action_size
    obs_signature = tf.TensorSpec((b,) + obs_spec.shape, obs_spec.dtype)
    policy, (critic_1, critic_2) = self._policy, self._critics
    target_1, target_2 = self._targets
    critic_variables = self._critic_variables
    policy_variables = self._policy.trainable_variables
    log_alpha, generator = self._log_alpha, self._train_generator
    target_entropy = self.target_entropy

    @tf.function(
      input_signature=[
        obs_signature,
        tf.TensorSpec([b, a], tf.float32),
        tf.TensorSpec([b], tf.float32),
        tf.TensorSpec([b], tf.float32),
        obs_signature,
      ]
    )
    def train_fn(observation, action, returns, discount, next_observation):
      alpha = tf.exp(log_alpha)
      next_mean, next_log_std = policy(next_observation)
      next_action, next_log_prob = loss_lib.sample_action(
        next_mean, next_log_std, generator.normal([b, a])
      )
      target = loss_lib.soft_q_target(
        returns,
        discount,
        target_1(next_observation, next_action),
        target_2(next_observation, next_action),
        next_log_prob,
        alpha,
      )
      with tf.GradientTape() as tape:
        q1 = critic_1(observation, action)
        q2 = critic_2(observation, action)
        critic_loss = loss_lib.critic_loss(q1, q2, target)
      critic_grads = tape.gradient(critic_loss, critic_variables)
      self._critic_optimizer.apply_gradients(
        zip(critic_grads, critic_variables)
      )
      total_loss = critic_loss
      metrics = {
        "loss/critic": critic_loss,
        "q/mean": tf.reduce_mean(0.5 * (q1 + q2)),
        "q/target_mean": tf.reduce_mean(target),
        "q/td_error": tf.reduce_mean(
          0.5 * (tf.abs(target - q1) + tf.abs(target - q2))
        ),
      }
      grads, variables = list(critic_grads), list(critic_variables)
      for _ in range(actor_updates):
        with tf.GradientTape() as tape:
          mean, log_std = policy(observation)
          new_action, log_prob = loss_lib.sample_action(
            mean, log_std, generator.normal([b, a])
          )
          actor_loss = loss_lib.policy_loss(
            critic_1(observation, new_action),
            critic_2(observation, new_action),
            log_prob,
            alpha,
          )
        actor_grads = tape.gradient(actor_loss, policy_variables)
        self._actor_optimizer.apply_gradients(
          zip(actor_grads, policy_variables)
        )
        with tf.GradientTape() as tape:
          temperature_loss = loss_lib.temperature_loss(
            log_alpha, log_prob, target_entropy
          )
        if cfg.learn_temperature:
          alpha_grads = tape.gradient(temperature_loss, [log_alpha])
          self._alpha_optimizer.apply_gradients(zip(alpha_grads, [log_alpha]))
          alpha = tf.exp(log_alpha)
        metrics["loss/actor"] = actor_loss
        metrics["loss/temperature"] = temperature_loss
        metrics["policy/entropy"] = -tf.reduce_mean(log_prob)
      if actor_updates:
        total_loss += metrics["loss/actor"] + metrics["loss/temperature"]
        grads += list(actor_grads)
        variables += list(policy_variables)
      target_network.soft_update(
        self._critic_variables, self._target_variables, cfg.tau
      )
      self._step_counter.assign_add(1)
      metrics.update(diagnostics.gradient_norms(grads, variables))
      metrics.update(
        {
          "loss/total": total_loss,
          "sac/temperature": tf.exp(log_alpha),
          "opt/learning_rate": tf.convert_to_tensor(
            self._critic_optimizer.learning_rate
          ),
          "errors/nonfinite_updates": tf.cast(
            tf.add_n([o.nonfinite_updates for o in self._optimizers]),
            tf.float32,
          ),
        }
      )
      return metrics

    return train_fn


def create_agent(
  observation_spec: ArraySpec, action_spec: ArraySpec, num_envs: int
) -> SACAgent:
  """Builds the agent with the gin-bound SACConfig (continuous actions in a
  bounded Box)."""
  return SACAgent(observation_spec, action_spec, num_envs, SACConfig())
