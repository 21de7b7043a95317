"""Soft Actor-Critic (Haarnoja et al. 2018), automatic temperature."""

from seed_rl.agents.sac.agent import SACAgent, create_agent
from seed_rl.agents.sac.config import SACConfig

__all__ = ["SACAgent", "SACConfig", "create_agent"]
