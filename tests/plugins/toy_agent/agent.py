"""An agent added from outside seed_rl, exactly as README's recipe says.

Advantage actor-critic with n-step returns bootstrapped at the end of each
unroll (A2C without V-trace's corrections), a small MLP, on-policy batches
from the runtime's unroll queue. Ships its own gin file for the classic
domain in gin/classic.gin.
"""

from typing import Any, Dict

import gin
import keras
import numpy as np
import tensorflow as tf

from seed_rl.common import agent_api
from seed_rl.common import optimizers
from seed_rl.common.agent_api import ActOutputs, Agent
from seed_rl.common.unroll_queue import UnrollQueue


@gin.configurable
class ToyA2C(Agent):
  unroll_overlap = 1

  def __init__(
    self,
    observation_spec,
    action_spec,
    num_envs,
    unroll_length: int = 16,
    batch_size: int = 16,
    learning_rate: float = 3e-3,
    discount: float = 0.99,
    entropy_cost: float = 0.01,
  ):
    super().__init__(observation_spec, action_spec, num_envs)
    self.unroll_length = unroll_length
    self.batch_size, self.discount = batch_size, discount
    self.entropy_cost = entropy_cost
    n = int(action_spec.num_values)
    self._net = keras.Sequential(
      [keras.layers.Dense(64, activation="tanh"), keras.layers.Dense(n + 1)]
    )
    self._net.build((None,) + observation_spec.shape)
    self._optimizer = optimizers.make_optimizer(
      "adam",
      learning_rate,
      epsilon=1e-5,
      max_grad_norm=1.0,
      variables=self._net.trainable_variables,
    )
    self._step = optimizers.learner_step_counter()
    self._queue = UnrollQueue(4 * batch_size, batch_size)
    self._rng = np.random.default_rng(0)

  @property
  def step_counter(self):
    return self._step

  def act(self, inputs):
    out = self._net(inputs.observation.astype(np.float32)).numpy()
    logits, value = out[:, :-1], out[:, -1]
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    action = np.array([self._rng.choice(len(q), p=q) for q in p], np.int32)
    greedy = logits.argmax(1).astype(np.int32)
    action = np.where(inputs.eval_mask, greedy, action)
    return ActOutputs(action=action, value=value, extras={}, core_state=())

  def add_unrolls(self, unrolls):
    self._queue.put(unrolls)

  def train_step(self):
    batch = self._queue.get_batch()
    if batch is None:
      return {}
    tm = agent_api.time_major
    obs = tm(batch.observation, np.float32)  # [T+1, B, ...]
    action, reward = tm(batch.action), tm(batch.reward, np.float32)
    term, trunc = tm(batch.terminated), tm(batch.truncated)
    boot = tm(batch.bootstrap_value, np.float32)
    metrics = self._train(obs, action, reward, term, trunc, boot)
    out = {k: float(v) for k, v in metrics.items()}
    out[agent_api.SAMPLES_METRIC] = float(self.unroll_length * self.batch_size)
    return out

  @tf.function
  def _train(self, obs, action, reward, term, trunc, boot):
    variables = self._net.trainable_variables
    with tf.GradientTape() as tape:
      t1, b = obs.shape[0], obs.shape[1]
      out = self._net(tf.reshape(obs, [t1 * b, -1]))
      out = tf.reshape(out, [t1, b, -1])
      logits, value = out[..., :-1], out[..., -1]
      # n-step returns backwards over the unroll; episode ends cut them.
      ret = tf.stop_gradient(value[-1])
      returns = []
      for t in reversed(range(self.unroll_length)):
        nxt = tf.where(trunc[t + 1], boot[t + 1], ret)
        nxt = tf.where(term[t + 1], 0.0, nxt)
        ret = reward[t + 1] + self.discount * nxt
        returns.append(ret)
      returns = tf.stack(returns[::-1])
      adv = tf.stop_gradient(returns - value[:-1])
      logp = tf.nn.log_softmax(logits[:-1])
      taken = tf.reduce_sum(logp * tf.one_hot(action[:-1], logp.shape[-1]), -1)
      entropy = -tf.reduce_mean(tf.reduce_sum(tf.exp(logp) * logp, -1))
      loss = (
        -tf.reduce_mean(taken * adv)
        + 0.5 * tf.reduce_mean(tf.square(returns - value[:-1]))
        - self.entropy_cost * entropy
      )
    grads = tape.gradient(loss, variables)
    norm = self._optimizer.apply_gradients(zip(grads, variables))
    self._step.assign_add(1)
    return {"loss/total": loss, "policy/entropy": entropy, "grad/norm": norm}

  def checkpoint_objects(self) -> Dict[str, Any]:
    return {
      "network": self._net,
      "optimizer": self._optimizer,
      "step": self._step,
    }

  def stop(self):
    self._queue.stop()


def create_agent(observation_spec, action_spec, num_envs):
  return ToyA2C(observation_spec, action_spec, num_envs)
