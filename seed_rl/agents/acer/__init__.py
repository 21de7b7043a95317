"""ACER: actor-critic with experience replay (Wang et al. 2017), discrete."""

from seed_rl.agents.acer.agent import ACERAgent, create_agent
from seed_rl.agents.acer.config import ACERConfig

__all__ = ["ACERAgent", "ACERConfig", "create_agent"]
