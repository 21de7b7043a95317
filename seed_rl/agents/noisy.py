"""NoisyNet dense layers (Fortunato et al. 2017, "Noisy Networks for
Exploration", arXiv 1706.10295) as Keras 3 layers.

y = (mu_w + sigma_w * eps_w) x + mu_b + sigma_b * eps_b, with learned mu and
sigma and noise eps:
  'ig' independent Gaussian: one N(0, 1) sample per weight and per bias
    (Sec. 3.2 (a)); mu ~ U(+-sqrt(3/p)), sigma = sigma0 = 0.017.
  'fg' factorised Gaussian: eps_w[i, j] = f(e_in[i]) f(e_out[j]),
    eps_b[j] = f(e_out[j]), f(x) = sign(x) sqrt(|x|) (Sec. 3.2 (b));
    mu ~ U(+-1/sqrt(p)), sigma = sigma0 / sqrt(p), sigma0 = 0.5.
p is the number of inputs (Sec. 3.2, "Initialisation of Noisy Networks").

The noise lives in non-trainable variables and changes only on
`reset_noise()` (so acting and training can share one sample, as in the
paper's DQN where noise is resampled once per learner step), or on every call
with `resample_every_call=True`. `call(x, deterministic=True)` uses mu only
(evaluation).
"""

from __future__ import annotations

import math
from typing import Optional

import keras
import tensorflow as tf

NOISE_TYPES = ("ig", "fg")
DEFAULT_SIGMA0 = {"ig": 0.017, "fg": 0.5}


def _scale_noise(x: tf.Tensor) -> tf.Tensor:
  """f(x) = sign(x) sqrt(|x|) of the factorised noise."""
  return tf.sign(x) * tf.sqrt(tf.abs(x))


class NoisyDense(keras.layers.Layer):
  """A dense layer with learned parametric Gaussian noise. [B, p] -> [B, q].

  Args:
    units: q, number of outputs.
    noise_type: 'ig' (independent) or 'fg' (factorised).
    sigma0: noise scale; None for the paper's default of the noise type.
    activation: Keras activation name or callable, applied last.
    resample_every_call: draw fresh noise in every non-deterministic call
      instead of using the stored sample.
  """

  def __init__(
    self,
    units: int,
    noise_type: str = "fg",
    sigma0: Optional[float] = None,
    activation=None,
    resample_every_call: bool = False,
    **kwargs,
  ):
    super().__init__(**kwargs)
    if units < 1:
      raise ValueError(f"NoisyDense units must be >= 1, got {units}")
    if noise_type not in NOISE_TYPES:
      raise ValueError(
        f"NoisyDense noise_type must be one of {NOISE_TYPES}, "
        f"got {noise_type!r}"
      )
    if sigma0 is not None and not sigma0 > 0:
      raise ValueError(f"NoisyDense sigma0 must be > 0, got {sigma0}")
    self.units = int(units)
    self.noise_type = noise_type
    self.sigma0 = DEFAULT_SIGMA0[noise_type] if sigma0 is None else sigma0
    self.activation = keras.activations.get(activation)
    self.resample_every_call = resample_every_call

  def build(self, input_shape):
    p = int(input_shape[-1])
    q = self.units
    if self.noise_type == "ig":
      bound = math.sqrt(3.0 / p)
      sigma = self.sigma0
    else:
      bound = 1.0 / math.sqrt(p)
      sigma = self.sigma0 / math.sqrt(p)
    mu_init = keras.initializers.RandomUniform(-bound, bound)
    sigma_init = keras.initializers.Constant(sigma)
    self.kernel_mu = self.add_weight(
      shape=(p, q), initializer=mu_init, name="kernel_mu"
    )
    self.kernel_sigma = self.add_weight(
      shape=(p, q), initializer=sigma_init, name="kernel_sigma"
    )
    self.bias_mu = self.add_weight(
      shape=(q,), initializer=mu_init, name="bias_mu"
    )
    self.bias_sigma = self.add_weight(
      shape=(q,), initializer=sigma_init, name="bias_sigma"
    )
    if self.noise_type == "ig":
      noise_shapes = {"kernel_noise": (p, q), "bias_noise": (q,)}
    else:
      noise_shapes = {"input_noise": (p,), "output_noise": (q,)}
    self._noise = {
      name: self.add_weight(
        shape=shape, initializer="zeros", trainable=False, name=name
      )
      for name, shape in noise_shapes.items()
    }
    self.reset_noise()

  def _sample_noise(self):
    """A fresh (kernel noise [p, q], bias noise [q]) pair."""
    if self.noise_type == "ig":
      return (
        tf.random.normal(self.kernel_mu.shape),
        tf.random.normal(self.bias_mu.shape),
      )
    e_in = _scale_noise(tf.random.normal(self.kernel_mu.shape[:1]))
    e_out = _scale_noise(tf.random.normal(self.bias_mu.shape))
    return e_in, e_out

  def _stored_noise(self):
    if self.noise_type == "ig":
      return self._noise["kernel_noise"], self._noise["bias_noise"]
    return self._noise["input_noise"], self._noise["output_noise"]

  def reset_noise(self) -> None:
    """Draws new noise into the stored sample (works inside tf.function)."""
    first, second = self._sample_noise()
    stored_first, stored_second = self._stored_noise()
    stored_first.assign(first)
    stored_second.assign(second)

  def noise(self):
    """The stored (kernel noise [p, q], bias noise [q]) as used by `call`."""
    first, second = self._stored_noise()
    return self._expand(first, second)

  def _expand(self, first, second):
    if self.noise_type == "ig":
      return tf.convert_to_tensor(first), tf.convert_to_tensor(second)
    # Factorised: p + q samples give the p x q kernel noise.
    return (
      tf.expand_dims(first, 1) * tf.expand_dims(second, 0),
      tf.convert_to_tensor(second),
    )

  def call(self, inputs, deterministic: bool = False):
    if deterministic:
      kernel, bias = self.kernel_mu, self.bias_mu
    else:
      if self.resample_every_call:
        kernel_noise, bias_noise = self._expand(*self._sample_noise())
      else:
        kernel_noise, bias_noise = self.noise()
      kernel = self.kernel_mu + self.kernel_sigma * kernel_noise
      bias = self.bias_mu + self.bias_sigma * bias_noise
    inputs = tf.cast(inputs, kernel.dtype)
    return self.activation(tf.matmul(inputs, kernel) + bias)

  def compute_output_shape(self, input_shape):
    return tuple(input_shape[:-1]) + (self.units,)

  def get_config(self):
    config = super().get_config()
    config.update(
      units=self.units,
      noise_type=self.noise_type,
      sigma0=self.sigma0,
      activation=keras.activations.serialize(self.activation),
      resample_every_call=self.resample_every_call,
    )
    return config
