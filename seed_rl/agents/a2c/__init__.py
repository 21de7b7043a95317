"""A2C: synchronous advantage actor-critic (Mnih et al. 2016, synchronous)."""

from seed_rl.agents.a2c.agent import A2CAgent, create_agent
from seed_rl.agents.a2c.config import A2CConfig

__all__ = ["A2CAgent", "A2CConfig", "create_agent"]
