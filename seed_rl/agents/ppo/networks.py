"""PPO's actor-critic: the network of seed_rl/agents/actor_critic.py (shared
with A2C), built from PPOConfig."""

from __future__ import annotations

from typing import Optional

from seed_rl.agents import actor_critic
from seed_rl.agents.actor_critic import FeedForwardActorCritic
from seed_rl.agents.ppo.config import PPOConfig
from seed_rl.agents import distributions
from seed_rl.common.specs import ArraySpec

__all__ = ["make_network"]


def make_network(
  config: PPOConfig,
  distribution: distributions.ActionDistribution,
  observation_spec: ArraySpec,
  dtype: Optional[str] = None,
) -> FeedForwardActorCritic:
  """A built network: observations [N, *obs] (of `dtype`, default the
  spec's) -> params [N, P], V [N]."""
  return actor_critic.make_network(
    config, distribution, observation_spec, "ppo_network", dtype
  )
