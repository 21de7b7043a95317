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

Replay, the random phase, acting and the learner step are shared with TD3
(seed_rl.agents.off_policy), and so is training on several devices
(LearnerConfig.training_devices): each of the critic, policy and
temperature updates runs on every device's shard of the batch.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import tensorflow as tf

from seed_rl.agents import continuous
from seed_rl.agents import multi_device
from seed_rl.agents import off_policy
from seed_rl.agents.sac import loss as loss_lib
from seed_rl.agents.sac import networks
from seed_rl.agents.sac.config import SACConfig
from seed_rl.agents import target_network
from seed_rl.common.specs import ArraySpec

# Trains on several devices when LearnerConfig.training_devices is set (see
# seed_rl/agents/off_policy.py and seed_rl/agents/multi_device.py).
SUPPORTS_TRAINING_DEVICES = True


class SACAgent(off_policy.OffPolicyAgent):
  """SAC with twin critics, target critics and a learned temperature."""

  def __init__(
    self,
    observation_spec: ArraySpec,
    action_spec: ArraySpec,
    num_envs: int,
    config: Optional[SACConfig] = None,
  ):
    super().__init__(observation_spec, action_spec, num_envs)
    self.box = continuous.BoxScaling(action_spec, "SAC")
    cfg = self.config = config if config is not None else SACConfig()
    self.action_size = self.box.action_size
    self.target_entropy = (
      float(cfg.target_entropy)
      if cfg.target_entropy is not None
      else -float(self.action_size)
    )
    self._init_placement("SACConfig")
    # Mirrored on every training device under a strategy.
    with self._training_scope():
      self._build_networks()
      self._log_alpha = tf.Variable(
        math.log(cfg.initial_temperature),
        dtype=tf.float32,
        trainable=cfg.learn_temperature,
        name="log_alpha",
      )

      self._critic_optimizer = self._adam(
        cfg.learning_rate, self._critic_variables
      )
      self._actor_optimizer = self._adam(
        cfg.policy_learning_rate, self._policy.trainable_variables
      )
      # CleanRL and softlearning step the temperature at the critics' rate.
      self._alpha_optimizer = self._adam(cfg.learning_rate, [self._log_alpha])
    self._optimizers = (
      self._critic_optimizer,
      self._actor_optimizer,
      self._alpha_optimizer,
    )
    self._init_replay(num_envs)
    self._act_fn = self._make_act_fn()
    self._train_fns = {
      True: self._make_train_fn(cfg.policy_delay),
      False: self._make_train_fn(0),
    }

  def _build_networks(self) -> None:
    """The policy, the twin critics and their targets (equal at start)."""
    cfg, observation_spec = self.config, self.observation_spec
    self._policy = networks.GaussianPolicy(
      cfg.torso,
      self.action_size,
      cfg.head_hidden,
      cfg.min_log_std,
      cfg.max_log_std,
      name="sac_policy",
    )
    continuous.build(self._policy, observation_spec)
    self._critics: List[continuous.QNetwork] = []
    self._target_critics: List[continuous.QNetwork] = []
    for i in (1, 2):
      for kind, group in (
        ("critic", self._critics),
        ("target", self._target_critics),
      ):
        critic = continuous.QNetwork(
          cfg.torso, cfg.head_hidden, name=f"sac_{kind}_{i}"
        )
        continuous.build(critic, observation_spec, self.action_size)
        group.append(critic)
    self._critic_variables = [
      v for c in self._critics for v in c.trainable_variables
    ]
    self._target_variables = [
      v for c in self._target_critics for v in c.trainable_variables
    ]
    target_network.hard_update(self._critic_variables, self._target_variables)

  # ---- Agent API ---------------------------------------------------------

  @property
  def policy(self) -> networks.GaussianPolicy:
    return self._policy

  @property
  def log_alpha(self) -> tf.Variable:
    return self._log_alpha

  def checkpoint_objects(self) -> Dict[str, Any]:
    objects = self._checkpoint_critics()
    objects.update(
      {
        "policy": self._policy,
        "policy_variables": list(self._policy.variables),
        "log_alpha": self._log_alpha,
        "critic_optimizer": self._critic_optimizer,
        "actor_optimizer": self._actor_optimizer,
        "alpha_optimizer": self._alpha_optimizer,
      }
    )
    return objects

  # ---- compiled functions ------------------------------------------------

  def _greedy_action(self, observation: tf.Tensor) -> tf.Tensor:
    """The tanh of the policy's mean (`act` for evaluation rows)."""
    mean, _ = self._policy(observation)
    return tf.tanh(mean)

  def _make_act_fn(self):
    policy, (critic_1, critic_2) = self._policy, self._critics
    generator, log_alpha = self._act_generator, self._log_alpha

    @tf.function(input_signature=self._act_signature())
    def act_fn(observation, eval_mask, random_phase):
      """-> action [B, A] in [-1, 1], soft value [B]."""
      with self._inference_scope():
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
        action = self._behaviour_action(
          tf.tanh(mean), sampled, random_phase, eval_mask
        )
        return action, value

    return act_fn

  def _make_train_fn(self, actor_updates: int):
    """One learner step: critics, then `actor_updates` policy (and
    temperature) updates on the same batch, then the target critics."""
    cfg = self.config
    b, a = cfg.batch_size, self.action_size
    policy_variables = self._policy.trainable_variables

    @tf.function(input_signature=self._train_signature())
    def train_fn(*batch):
      """batch: observation, action, return, discount, next_observation."""
      with self._training_scope():
        critic_grads, metrics = self._critic_update(
          batch,
          self._train_generator.normal([b, a]),
          self._soft_q_target,
          lambda q, y: loss_lib.critic_loss(q[0], q[1], y),
        )
        total_loss = metrics["loss/critic"]
        grads, variables = critic_grads, list(self._critic_variables)
        for _ in range(actor_updates):
          actor_grads, actor_metrics = self._actor_update(batch[0])
          metrics.update(actor_metrics)
        if actor_updates:
          total_loss += metrics["loss/actor"] + metrics["loss/temperature"]
          grads += actor_grads
          variables += list(policy_variables)
        target_network.soft_update(
          self._critic_variables, self._target_variables, cfg.tau
        )
        metrics["sac/temperature"] = tf.exp(self._log_alpha)
        return self._finish_train_step(metrics, total_loss, grads, variables)

    return train_fn

  def _soft_q_target(self, returns, discount, next_observation, noise):
    """y [B] = R + d (min_j Q'_j(s', a') - alpha log pi(a'|s')), a' ~ pi
    from noise [B, A] ~ N(0, I); alpha as it is now."""
    target_1, target_2 = self._target_critics
    next_mean, next_log_std = self._policy(next_observation)
    next_action, next_log_prob = loss_lib.sample_action(
      next_mean, next_log_std, noise
    )
    return loss_lib.soft_q_target(
      returns,
      discount,
      target_1(next_observation, next_action),
      target_2(next_observation, next_action),
      next_log_prob,
      tf.exp(self._log_alpha),
    )

  def _actor_update(self, observation):
    """One policy step and (learn_temperature) one temperature step, both
    on the log pi of one sample per state, with alpha as it is before them.

    Returns the policy's gradients (for grad/* norms) and metrics
    'loss/actor', 'loss/temperature' and 'policy/entropy'.
    """
    cfg, b, a = self.config, self.config.batch_size, self.action_size
    policy, (critic_1, critic_2) = self._policy, self._critics
    policy_variables = list(policy.trainable_variables)
    log_alpha = self._log_alpha
    learned = [log_alpha] if cfg.learn_temperature else []

    def loss_and_gradients(observation, noise):
      alpha = tf.exp(log_alpha)
      with tf.GradientTape() as tape:
        mean, log_std = policy(observation)
        new_action, log_prob = loss_lib.sample_action(mean, log_std, noise)
        actor_loss = loss_lib.policy_loss(
          critic_1(observation, new_action),
          critic_2(observation, new_action),
          log_prob,
          alpha,
        )
      gradients = list(tape.gradient(actor_loss, policy_variables))
      with tf.GradientTape() as tape:
        temperature_loss = loss_lib.temperature_loss(
          log_alpha, log_prob, self.target_entropy
        )
      if learned:
        gradients += tape.gradient(temperature_loss, learned)
      metrics = {
        "loss/actor": actor_loss,
        "loss/temperature": temperature_loss,
        "policy/entropy": -tf.reduce_mean(log_prob),
      }
      return gradients, metrics, ()

    # The policy's noise for the whole batch, split with it.
    noise = self._train_generator.normal([b, a])
    gradients, norm_gradients, metrics, _ = multi_device.run_sharded(
      self._strategy,
      loss_and_gradients,
      (observation, noise),
      policy_variables + learned,
    )
    k = len(policy_variables)
    self._actor_optimizer.apply_gradients(zip(gradients[:k], policy_variables))
    if learned:
      # The temperature's gradient does not depend on the policy step.
      self._alpha_optimizer.apply_gradients(zip(gradients[k:], learned))
    return norm_gradients[:k], metrics


def create_agent(
  observation_spec: ArraySpec, action_spec: ArraySpec, num_envs: int
) -> SACAgent:
  """Builds the agent with the gin-bound SACConfig (continuous actions in a
  bounded Box)."""
  return SACAgent(observation_spec, action_spec, num_envs, SACConfig())
