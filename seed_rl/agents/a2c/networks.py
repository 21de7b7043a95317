"""A2C's actor-critic: the network of seed_rl/agents/actor_critic.py (shared
with PPO), built from A2CConfig.

A2C and PPO need the same function: observations -> policy parameters of a
Categorical or DiagGaussian (agents/distributions.py) and V(x).
"""

from __future__ import annotations

from seed_rl.agents import actor_critic
from seed_rl.agents.a2c.config import A2CConfig
from seed_rl.agents.actor_critic import FeedForwardActorCritic
from seed_rl.agents import distributions
from seed_rl.common.specs import ArraySpec

__all__ = ["make_network"]


def make_network(
  config: A2CConfig,
  distribution: distributions.ActionDistribution,
  observation_spec: ArraySpec,
) -> FeedForwardActorCritic:
  """A built network: observations [N, *obs] -> params [N, P], V [N]."""
  return actor_critic.make_network(
    config, distribution, observation_spec, "a2c_network"
  )
