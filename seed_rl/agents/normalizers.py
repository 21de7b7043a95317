"""Running statistics for observation normalisation and reward scaling.

Both are tf.Modules whose statistics live in tf.Variables, so a checkpoint of
the agent saves and restores them with the weights: a restored policy sees
inputs scaled exactly as when it was saved.

Statistics use float64: counts reach 1e8 steps on long runs, where float32
merges lose the small batch contributions.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import numpy as np
import tensorflow as tf


class RunningMeanStd(tf.Module):
  """Mean and (population) variance of a stream of [N, *shape] batches.

  Batches are merged with the parallel-variance formula (Chan, Golub &
  LeVeque 1979), so the statistics equal numpy's mean/var over the
  concatenation of every batch seen, whatever the batch sizes.

  Args:
    shape: per-sample shape, e.g. (17,) for HalfCheetah observations, () for
      scalar returns.
    epsilon: added to the variance before the square root (keeps constant
      features from dividing by zero).
    clip: normalised values are clipped to [-clip, clip]; None disables.
  """

  def __init__(
    self,
    shape: Sequence[int],
    epsilon: float = 1e-8,
    clip: Optional[float] = 10.0,
    name: str = "running_mean_std",
  ):
    super().__init__(name=name)
    if not epsilon > 0:
      raise ValueError(
        f"{name}: epsilon must be > 0 (it guards a division by "
        f"the std), got {epsilon}"
      )
    if clip is not None and not clip > 0:
      raise ValueError(f"{name}: clip must be > 0 or None, got {clip}")
    self.shape = tuple(int(d) for d in shape)
    self.epsilon = float(epsilon)
    self.clip = None if clip is None else float(clip)
    with self.name_scope:
      self.count = tf.Variable(
        0.0, dtype=tf.float64, trainable=False, name="count"
      )
      # Before any update the transform is the identity (mean 0, var 1).
      self.mean = tf.Variable(
        tf.zeros(self.shape, tf.float64), trainable=False, name="mean"
      )
      self.var = tf.Variable(
        tf.ones(self.shape, tf.float64), trainable=False, name="var"
      )

  def update(self, batch) -> None:
    """Merges a batch [N, *shape] into the statistics (N may be 0)."""
    batch = tf.cast(tf.convert_to_tensor(batch), tf.float64)
    if batch.shape.rank != len(self.shape) + 1 or (
      not batch.shape[1:].is_compatible_with(self.shape)
    ):
      raise ValueError(
        f"{self.name}.update: batch must be [N, "
        f"*{list(self.shape)}], got shape {batch.shape}"
      )
    n = tf.cast(tf.shape(batch)[0], tf.float64)
    safe_n = tf.maximum(n, 1.0)
    batch_mean = tf.reduce_sum(batch, axis=0) / safe_n
    batch_var = tf.reduce_sum(tf.square(batch - batch_mean), axis=0) / safe_n
    total = self.count + n
    safe_total = tf.maximum(total, 1.0)
    delta = batch_mean - self.mean
    new_mean = self.mean + delta * (n / safe_total)
    m2 = (
      self.var * self.count
      + batch_var * n
      + tf.square(delta) * (self.count * n / safe_total)
    )
    new_var = m2 / safe_total
    has_data = total > 0
    self.mean.assign(tf.where(has_data, new_mean, self.mean))
    self.var.assign(tf.where(has_data, new_var, self.var))
    self.count.assign(total)

  @property
  def std(self) -> tf.Tensor:
    return tf.sqrt(self.var + self.epsilon)

  def normalize(self, x) -> tf.Tensor:
    """[..., *shape] -> float32 (x - mean) / sqrt(var + eps), clipped."""
    x = tf.cast(x, tf.float32)
    mean = tf.cast(self.mean, tf.float32)
    std = tf.cast(self.std, tf.float32)
    y = (x - mean) / std
    if self.clip is not None:
      y = tf.clip_by_value(y, -self.clip, self.clip)
    return y


class RewardScaler(tf.Module):
  """Divides rewards by the running std of per-env discounted returns.

  As OpenAI Baselines' VecNormalize and BatchPPO: each env keeps a return
  accumulator R <- gamma * R + r, reset to 0 after an episode end; the std of
  all R values seen scales rewards (the mean is not subtracted, which would
  change the sign of rewards and the optimal policy's incentives to end or
  prolong episodes).

  Args:
    num_envs: accumulators exist for env ids [0, num_envs).
    gamma: the agent's discount.
    epsilon: added to the variance before the square root.
    clip: scaled rewards are clipped to [-clip, clip]; None disables.
  """

  def __init__(
    self,
    num_envs: int,
    gamma: float,
    epsilon: float = 1e-8,
    clip: Optional[float] = 10.0,
    name: str = "reward_scaler",
  ):
    super().__init__(name=name)
    if num_envs < 1:
      raise ValueError(f"{name}: num_envs must be >= 1, got {num_envs}")
    if not 0.0 <= gamma <= 1.0:
      raise ValueError(f"{name}: gamma must be in [0, 1], got {gamma}")
    self.num_envs = int(num_envs)
    self.gamma = float(gamma)
    with self.name_scope:
      self.returns = tf.Variable(
        tf.zeros([self.num_envs], tf.float64), trainable=False, name="returns"
      )
      self.return_stats = RunningMeanStd(
        (), epsilon, clip=None, name="return_stats"
      )
    self.clip = None if clip is None else float(clip)

  def update(
    self, rewards: np.ndarray, dones: np.ndarray, env_ids: np.ndarray
  ) -> None:
    """Advances the accumulators over time-major rewards and merges the stats.

    Args:
      rewards: [T, B] raw rewards, in time order for each env.
      dones: bool [T, B] the transition of rewards[t] ended its episode.
      env_ids: int [B] which accumulator each column uses. An env may appear
        in several columns (consecutive unrolls of one env in one batch); its
        columns are then applied one after the other, in column order.
    """
    rewards = np.asarray(rewards, np.float64)
    dones = np.asarray(dones, bool)
    env_ids = np.asarray(env_ids)
    if (
      rewards.ndim != 2
      or dones.shape != rewards.shape
      or (env_ids.shape != rewards.shape[1:])
    ):
      raise ValueError(
        f"{self.name}.update: need rewards [T, B], dones "
        f"[T, B] and env_ids [B]; got {rewards.shape}, "
        f"{dones.shape}, {env_ids.shape}"
      )
    if env_ids.size and (env_ids.min() < 0 or env_ids.max() >= self.num_envs):
      raise ValueError(
        f"{self.name}.update: env ids must be in [0, "
        f"{self.num_envs}), got {env_ids.min()}..."
        f"{env_ids.max()}"
      )
    # Column k is in round r if env_ids[k] appeared r times before it; each
    # round has distinct envs and is processed after the previous one.
    rounds = np.zeros(env_ids.shape, np.int64)
    seen: Dict[int, int] = {}
    for k, env in enumerate(env_ids.tolist()):
      rounds[k] = seen.get(env, 0)
      seen[env] = rounds[k] + 1
    accumulators = self.returns.numpy()
    values = []
    for r in range(int(rounds.max()) + 1 if rounds.size else 0):
      cols = np.flatnonzero(rounds == r)
      ids = env_ids[cols]
      ret = accumulators[ids]
      for t in range(rewards.shape[0]):
        ret = ret * self.gamma + rewards[t, cols]
        values.append(ret)
        ret = np.where(dones[t, cols], 0.0, ret)
      accumulators[ids] = ret
    self.returns.assign(accumulators)
    if values:
      self.return_stats.update(np.concatenate(values))

  def scale(self, rewards) -> tf.Tensor:
    """Rewards [...] -> float32 rewards / std(returns), clipped."""
    scaled = tf.cast(rewards, tf.float32) / tf.cast(
      self.return_stats.std, tf.float32
    )
    if self.clip is not None:
      scaled = tf.clip_by_value(scaled, -self.clip, self.clip)
    return scaled
