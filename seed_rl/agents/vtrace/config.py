"""Hyperparameters of the V-trace (IMPALA) agent."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import gin
import keras

from seed_rl.agents.vtrace.loss import MINIBATCH_UNITS, POLICY_LOSSES, TARGETS
from seed_rl.agents.vtrace.vtrace import ADVANTAGES
from seed_rl.networks import mlp_torso
from seed_rl.agents import config_checks as checks
from seed_rl.common.optimizers import ADAM_EPSILON_FORMS

_OPTIMIZERS = ("adam", "rmsprop")
_REWARD_CLIPPING = checks.REWARD_CLIPPING + ("soft_asymmetric",)


@gin.configurable
@dataclasses.dataclass
class VtraceConfig:
  """V-trace agent settings; validated on construction.

  Defaults target CartPole-v1 on 2 CPU cores: a 2x64 tanh MLP with a separate
  value torso, unrolls of 20, batches of 16, Adam at 4e-3 decayed linearly to
  0 over 2000 learner steps (the policy settles, which a "mean of the last 100
  episodes" criterion needs) and a small entropy bonus. In a synchronous
  32-env harness these reached a mean return >= 475 after 0.1-0.3 M env steps
  (300-900 learner steps) over 6 seeds.

  Attributes, grouped in the same order in every agent's config:
    Data:
      unroll_length: T, transitions per unroll (unrolls hold T+1 steps).
      batch_size: unrolls taken from the queue per training round.
      num_epochs: passes over each round's unrolls (1: each unroll is
        trained on once, as in IMPALA; more reuses it, V-trace correcting for
        the policy having moved since acting, like a small replay of recent
        unrolls).
      num_minibatches: each pass splits the round's unrolls into this many
        minibatches, one learner step (gradient update) each.
      minibatch_unit: 'unroll' (minibatches of batch_size / num_minibatches
        whole unrolls) or 'transition' (of unroll_length * batch_size /
        num_minibatches steps drawn from all of the round's unrolls, as
        PPO draws them; targets 'round', feed-forward only).
    Returns and targets:
      discount: gamma per agent step.
      reward_clipping: 'none', 'abs_one' or 'soft_asymmetric' (training
        targets only; the LSTM's reward input is always clipped to [-1, 1]).
      trace_lambda: lambda in [0, 1] of the trace coefficients
        c_i = lambda min(c_bar, pi/mu) (SEED RL's lambda_; 1 is eq. (1) of
        the paper, lower values shorten the trace like GAE's lambda).
      advantage: the policy-gradient advantage: 'vtrace' (the paper's
        r_s + gamma v_{s+1} - V(x_s)) or 'lambda' (v_s - V(x_s), which
        on-policy is GAE(lambda)'s, as PPO's; policy_loss 'clip' only).
      targets: 'update' (V-trace targets and advantages from each update's
        own forward pass, as IMPALA) or 'round' (computed once with the
        weights at the start of each round and held over its epochs and
        minibatches, as PPO holds GAE's; one more forward pass per round;
        policy_loss 'clip' only).
    Loss weights and clipping:
      entropy_cost: weight of the entropy bonus.
      value_clip: None, or PPO's clip of each value's change from the
        round's start (the larger of the plain and the clipped squared
        error; minibatch_unit 'transition' only).
      value_cost: weight of the value loss 0.5 * mean (v_s - V(x_s))^2, the
        squared error to the V-trace targets v_s (IMPALA's baseline cost).
      clip_rho_threshold, clip_c_threshold, clip_pg_rho_threshold: V-trace's
        rho_bar, c_bar and the policy-gradient rho clip.
      normalize_advantages: standardise the policy-gradient advantages over
        each minibatch [T, B] (zero mean, unit std), as PPO does; the
        entropy cost then weighs the same against them on every game.
        On in the Atari gin, with policy_loss 'clip'; with 'pg' at RMSProp
        7e-4 it collapsed Seaquest's policy (benchmarks/RESULTS.md).
      policy_loss: 'pg' (IMPALA's policy gradient) or 'clip' (PPO's
        clipped surrogate of pi/mu on V-trace advantages, as IMPACT and
        Sample Factory's APPO; for reusing unrolls with num_epochs > 1).
      clip_ratio: eps of 'clip'.
      surrogate_anchor: where 'clip' anchors its ratio: 'behaviour' (r =
        pi / mu, mu the policy that acted) or 'proximal' (r = pi / pi_prox,
        pi_prox the weights at the start of the round, weighted by
        min(pi_prox / mu, clip_pg_rho_threshold): Hilton et al. 2021's
        decoupled objective, for a learner whose data lag; one more
        forward pass over each round).
    Optimizer:
      learning_rate: initial learning rate.
      lr_schedule: 'constant' or 'linear' (to 0 at total_learner_steps).
      total_learner_steps: length of the linear schedule in learner steps.
      optimizer_epsilon: denominator epsilon of the optimizer.
      optimizer_epsilon_form: Adam's: 'tensorflow' (epsilon added to sqrt(v)
        before bias correction, TensorFlow's kernel) or 'paper' (to the
        bias-corrected sqrt(v): Kingma & Ba's Algorithm 1, PyTorch's Adam
        as CleanRL runs it); see seed_rl/common/optimizers.py.
      max_grad_norm: global-norm gradient clip; None or 0 disables it.
      optimizer: 'adam' or 'rmsprop'.
      rmsprop_decay, rmsprop_momentum: RMSProp only.
    Network:
      torso: factory of the observation torso, e.g. mlp_torso or
        atari_torso.
      use_lstm: add an LSTM core (feeds previous action and reward too).
      lstm_units: LSTM size.
      separate_value_torso: give the value head its own torso, so large value
        errors do not reshape the policy's features (feed-forward only; on
        CartPole a shared torso plateaus around a return of 250). None picks
        True without an LSTM and False with one.
    Misc:
      queue_capacity: unrolls buffered before add_unrolls blocks the actors.
  """

  # Data.
  unroll_length: int = 20
  batch_size: int = 16
  num_epochs: int = 1
  num_minibatches: int = 1
  minibatch_unit: str = "unroll"
  # Returns and targets.
  discount: float = 0.99
  reward_clipping: str = "none"
  trace_lambda: float = 1.0
  advantage: str = "vtrace"
  targets: str = "update"
  # Loss weights and clipping.
  entropy_cost: float = 0.001
  value_cost: float = 0.5
  value_clip: Optional[float] = None
  clip_rho_threshold: float = 1.0
  clip_c_threshold: float = 1.0
  clip_pg_rho_threshold: float = 1.0
  normalize_advantages: bool = False
  policy_loss: str = "pg"
  clip_ratio: float = 0.1
  surrogate_anchor: str = "behaviour"
  # Optimizer.
  learning_rate: float = 4e-3
  lr_schedule: str = "linear"
  total_learner_steps: int = 2000
  optimizer_epsilon: float = 1e-5
  optimizer_epsilon_form: str = "tensorflow"
  max_grad_norm: Optional[float] = 1.0
  optimizer: str = "adam"
  rmsprop_decay: float = 0.99
  rmsprop_momentum: float = 0.0
  # Network.
  torso: Callable[[], keras.layers.Layer] = mlp_torso
  use_lstm: bool = False
  lstm_units: int = 256
  separate_value_torso: Optional[bool] = None
  # Misc.
  queue_capacity: int = 64

  def __post_init__(self):
    checks.positive_ints(
      self,
      "unroll_length",
      "batch_size",
      "num_epochs",
      "num_minibatches",
      "total_learner_steps",
      "queue_capacity",
      "lstm_units",
    )
    checks.queue_capacity(self)
    checks.choice(self, "minibatch_unit", MINIBATCH_UNITS)
    if (
      self.minibatch_unit == "unroll" and self.batch_size % self.num_minibatches
    ):
      checks.fail(
        self,
        f"batch_size ({self.batch_size}) must be a multiple "
        f"of num_minibatches ({self.num_minibatches})",
      )
    steps = self.unroll_length * self.batch_size
    if self.minibatch_unit == "transition" and steps % self.num_minibatches:
      checks.fail(
        self,
        f"unroll_length * batch_size ({steps}) must be a multiple of "
        f"num_minibatches ({self.num_minibatches}) with minibatch_unit "
        f"'transition'",
      )
    checks.positive(self, "learning_rate")
    checks.choice(self, "lr_schedule", checks.LR_SCHEDULES)
    checks.choice(self, "optimizer", _OPTIMIZERS)
    checks.optimizer_epsilon(self, "optimizer_epsilon")
    checks.choice(self, "optimizer_epsilon_form", ADAM_EPSILON_FORMS)
    for name in ("rmsprop_decay", "rmsprop_momentum"):
      if not 0 <= getattr(self, name) < 1:
        checks.fail(
          self, f"{name} must be in [0, 1), got {getattr(self, name)}"
        )
    checks.max_grad_norm(self)
    checks.discount(self)
    checks.in_unit_interval(self, "trace_lambda")
    checks.non_negative(
      self,
      "entropy_cost",
      "value_cost",
      why="a negative weight flips the objective",
    )
    checks.positive(
      self,
      "clip_rho_threshold",
      "clip_c_threshold",
      "clip_pg_rho_threshold",
      why="a non-positive clip zeroes the importance weights",
    )
    checks.choice(self, "reward_clipping", _REWARD_CLIPPING)
    checks.choice(self, "policy_loss", POLICY_LOSSES)
    if not 0 < self.clip_ratio < 1:
      checks.fail(self, f"clip_ratio must be in (0, 1), got {self.clip_ratio}")
    checks.surrogate_anchor(self, "policy_loss")
    checks.choice(self, "targets", TARGETS)
    checks.choice(self, "advantage", ADVANTAGES)
    if self.advantage == "lambda" and self.policy_loss != "clip":
      checks.fail(
        self,
        f"advantage 'lambda' (v_s - V(x_s)) is for the clipped surrogate, "
        f"which carries pi/mu itself; policy_loss is {self.policy_loss!r} "
        f"(use 'clip', or advantage 'vtrace')",
      )
    if self.targets == "round" and self.policy_loss != "clip":
      checks.fail(
        self,
        f"targets 'round' holds the round's unweighted advantages, which "
        f"only policy_loss 'clip' takes; policy_loss is "
        f"{self.policy_loss!r} (use 'clip', or targets 'update')",
      )
    if self.minibatch_unit == "transition" and (
      self.targets != "round" or self.use_lstm
    ):
      checks.fail(
        self,
        "minibatch_unit 'transition' draws single steps, which needs the "
        "round's targets computed over whole unrolls (targets 'round', has "
        f"{self.targets!r}) and no recurrent state (use_lstm False, has "
        f"{self.use_lstm})",
      )
    if self.value_clip is not None and (
      not self.value_clip > 0 or self.minibatch_unit != "transition"
    ):
      checks.fail(
        self,
        f"value_clip {self.value_clip} clips the value's change from the "
        f"round's start: it must be > 0 and needs minibatch_unit "
        f"'transition' (has {self.minibatch_unit!r}); None turns it off",
      )
    if self.separate_value_torso is None:
      self.separate_value_torso = not self.use_lstm
    if self.use_lstm and self.separate_value_torso:
      checks.fail(
        self,
        "separate_value_torso only works with a feed-forward "
        "network; set it to False with use_lstm",
      )
    checks.torso_factory(self)
