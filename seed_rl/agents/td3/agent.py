"""TD3 (and DDPG) as the learner runtime drives it.

Data flow: `act` (inference thread) returns the actor's action plus Gaussian
exploration noise for training envs (uniform over the Box for the first
`random_steps` env steps, the noise-free action for evaluation envs) and
reports min_j Q_j(s, mu(s)) (Q_1 without twins), which the runtime keeps as
the bootstrap value of truncated episodes; `add_unrolls` (inference thread)
cuts unrolls into n-step transitions (seed_rl.common.transitions:
terminations never bootstrap, truncations bootstrap from that value) into
uniform replay behind the rate limiter; `train_step` (training thread)
updates the critics every learner step and, on steps divisible by
`policy_delay`, the actor and then all target networks (Polyak). One
learner step is one compiled graph call.

Replay, the random phase, acting and the learner step are shared with SAC
(seed_rl.agents.off_policy), and so is training on several devices
(LearnerConfig.training_devices): the critic and actor updates each run on
every device's shard of the batch.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import tensorflow as tf

from seed_rl.agents import continuous
from seed_rl.agents import multi_device
from seed_rl.agents import off_policy
from seed_rl.agents.td3 import loss as loss_lib
from seed_rl.agents.td3 import networks
from seed_rl.agents.td3.config import TD3Config
from seed_rl.agents import target_network
from seed_rl.common.specs import ArraySpec

# Trains on several devices when LearnerConfig.training_devices is set (see
# seed_rl/agents/off_policy.py and seed_rl/agents/multi_device.py).
SUPPORTS_TRAINING_DEVICES = True


class TD3Agent(off_policy.OffPolicyAgent):
  """TD3: twin critics, target policy smoothing, delayed actor updates;
  DDPG when the config turns those off."""

  def __init__(
    self,
    observation_spec: ArraySpec,
    action_spec: ArraySpec,
    num_envs: int,
    config: Optional[TD3Config] = None,
  ):
    super().__init__(observation_spec, action_spec, num_envs)
    cfg = self.config = config if config is not None else TD3Config()
    self.box = continuous.BoxScaling(
      action_spec, "DDPG" if cfg.is_ddpg else "TD3"
    )
    self.action_size = self.box.action_size
    self._init_placement("TD3Config")
    # Mirrored on every training device under a strategy.
    with self._training_scope():
      self._build_networks()
      self._critic_optimizer = self._adam(
        cfg.learning_rate, self._critic_variables
      )
      self._actor_optimizer = self._adam(
        cfg.policy_learning_rate, self._actor.trainable_variables
      )
    self._optimizers = (self._critic_optimizer, self._actor_optimizer)
    self._init_replay(num_envs)
    self._act_fn = self._make_act_fn()
    self._train_fns = {
      True: self._make_train_fn(update_actor=True),
      False: self._make_train_fn(update_actor=False),
    }

  def _make_actor(self, name: str) -> networks.DeterministicPolicy:
    """A built deterministic policy named `name`."""
    cfg = self.config
    network = networks.DeterministicPolicy(
      cfg.torso, self.action_size, cfg.head_hidden, name=name
    )
    continuous.build(network, self.observation_spec)
    return network

  def _make_critic(self, name: str) -> continuous.QNetwork:
    """A built Q network named `name`."""
    cfg = self.config
    network = continuous.QNetwork(cfg.torso, cfg.head_hidden, name=name)
    continuous.build(network, self.observation_spec, self.action_size)
    return network

  def _build_networks(self) -> None:
    """The actor, the critics (two with twin_critics) and their targets
    (equal at start)."""
    self._actor = self._make_actor("td3_actor")
    self._target_actor = self._make_actor("td3_target_actor")
    num_critics = 2 if self.config.twin_critics else 1
    self._critics = [
      self._make_critic(f"td3_critic_{i + 1}") for i in range(num_critics)
    ]
    self._target_critics = [
      self._make_critic(f"td3_target_critic_{i + 1}")
      for i in range(num_critics)
    ]
    self._critic_variables = [
      v for c in self._critics for v in c.trainable_variables
    ]
    # Online -> target pairs, actor first: what one Polyak update moves.
    self._online_variables = (
      list(self._actor.trainable_variables) + self._critic_variables
    )
    self._target_variables = list(self._target_actor.trainable_variables) + [
      v for c in self._target_critics for v in c.trainable_variables
    ]
    target_network.hard_update(self._online_variables, self._target_variables)

  # ---- Agent API ---------------------------------------------------------

  @property
  def actor(self) -> networks.DeterministicPolicy:
    return self._actor

  @property
  def target_actor(self) -> networks.DeterministicPolicy:
    return self._target_actor

  def checkpoint_objects(self) -> Dict[str, Any]:
    objects = self._checkpoint_critics()
    objects.update(
      {
        "actor": self._actor,
        "target_actor": self._target_actor,
        "actor_variables": list(self._actor.variables),
        "target_actor_variables": list(self._target_actor.variables),
        "critic_optimizer": self._critic_optimizer,
        "actor_optimizer": self._actor_optimizer,
      }
    )
    return objects

  # ---- compiled functions ------------------------------------------------

  def _min_q(self, critics, observation, action) -> tf.Tensor:
    """min_j Q_j(s, a) [B] over the given critics (one: Q_1)."""
    q = critics[0](observation, action)
    for critic in critics[1:]:
      q = tf.minimum(q, critic(observation, action))
    return q

  def _greedy_action(self, observation: tf.Tensor) -> tf.Tensor:
    """The actor's action (`act` for evaluation rows)."""
    return self._actor(observation)

  def _make_act_fn(self):
    cfg = self.config
    actor, critics = self._actor, self._critics
    generator = self._act_generator

    @tf.function(input_signature=self._act_signature())
    def act_fn(observation, eval_mask, random_phase):
      """-> action [B, A] in [-1, 1], value [B]."""
      with self._inference_scope():
        mu = actor(observation)
        value = self._min_q(critics, observation, mu)
        noisy = loss_lib.exploration_action(
          mu, generator.normal(tf.shape(mu)), cfg.exploration_noise
        )
        action = self._behaviour_action(mu, noisy, random_phase, eval_mask)
        return action, value

    return act_fn

  def _make_train_fn(self, update_actor: bool):
    """One learner step: the critics, then (update_actor) the actor and the
    Polyak averaging of every target network."""
    cfg = self.config
    b, a = cfg.batch_size, self.action_size
    actor, target_actor = self._actor, self._target_actor
    critics, target_critics = self._critics, self._target_critics
    actor_variables = list(self._actor.trainable_variables)
    generator = self._train_generator

    def critic_target(returns, discount, next_observation, noise):
      next_action = loss_lib.smoothed_target_action(
        target_actor(next_observation), noise, cfg.policy_noise, cfg.noise_clip
      )
      next_q = [t(next_observation, next_action) for t in target_critics]
      return loss_lib.td3_target(returns, discount, *next_q)

    def actor_loss_and_gradients(observation):
      with tf.GradientTape() as tape:
        actor_loss = loss_lib.actor_loss(
          critics[0](observation, actor(observation))
        )
      gradients = tape.gradient(actor_loss, actor_variables)
      return gradients, {"loss/actor": actor_loss}, ()

    @tf.function(input_signature=self._train_signature())
    def train_fn(*batch):
      """batch: observation, action, return, discount, next_observation."""
      with self._training_scope():
        critic_grads, metrics = self._critic_update(
          batch,
          # The smoothing noise for the whole batch, split with it.
          generator.normal([b, a]),
          critic_target,
          lambda q, y: loss_lib.critic_loss(q[0], y, *q[1:]),
        )
        total_loss = metrics["loss/critic"]
        grads, variables = critic_grads, list(self._critic_variables)
        if update_actor:
          # The critics just updated, on every shard of the states.
          actor_grads, norm_grads, actor_metrics, _ = multi_device.run_sharded(
            self._strategy,
            actor_loss_and_gradients,
            (batch[0],),
            actor_variables,
          )
          self._actor_optimizer.apply_gradients(
            zip(actor_grads, actor_variables)
          )
          target_network.soft_update(
            self._online_variables, self._target_variables, cfg.tau
          )
          metrics.update(actor_metrics)
          total_loss += actor_metrics["loss/actor"]
          grads += norm_grads
          variables += actor_variables
        return self._finish_train_step(metrics, total_loss, grads, variables)

    return train_fn


def create_agent(
  observation_spec: ArraySpec, action_spec: ArraySpec, num_envs: int
) -> TD3Agent:
  """Builds the agent with the gin-bound TD3Config (continuous actions in a
  bounded Box); the ddpg.gin files configure DDPG."""
  return TD3Agent(observation_spec, action_spec, num_envs, TD3Config())
