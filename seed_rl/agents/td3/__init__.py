"""TD3 (Fujimoto et al. 2018); DDPG as TD3 with its three changes off."""

from seed_rl.agents.td3.agent import TD3Agent, create_agent
from seed_rl.agents.td3.config import TD3Config

__all__ = ["TD3Agent", "TD3Config", "create_agent"]
