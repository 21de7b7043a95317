"""A2C's actor-critic: PPO's network (ppo/networks.py), built from A2CConfig.

A2C and PPO need the same function: observations -> policy parameters of a
Categorical or DiagGaussian (common/distributions.py) and V(x). Reusing
PPONetwork keeps one implementation of the heads, their initialisation
(near-uniform policy at the start) and the Gaussian log-std options.
"""

from __future__ import annotations

from seed_rl.agents.a2c.config import A2CConfig
from seed_rl.agents.ppo.networks import PPONetwork, build_network, default_torso
from seed_rl.common import distributions
from seed_rl.common.specs import ArraySpec

__all__ = ["PPONetwork", "make_network"]


def make_network(
  config: A2CConfig,
  distribution: distributions.ActionDistribution,
  observation_spec: ArraySpec,
) -> PPONetwork:
  """A built PPONetwork: observations [N, *obs] -> params [N, P], V [N]."""
  network = PPONetwork(
    config.torso or default_torso(observation_spec),
    distribution,
    log_std=config.log_std,
    init_log_std=config.init_log_std,
    shared_torso=config.shared_torso,
    name="a2c_network",
  )
  build_network(network, observation_spec)
  return network
