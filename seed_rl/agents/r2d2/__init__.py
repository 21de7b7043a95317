"""R2D2: recurrent replay distributed DQN (Kapturowski et al. 2019)."""

from seed_rl.agents.r2d2.agent import R2D2Agent, create_agent
from seed_rl.agents.r2d2.config import R2D2Config

__all__ = ["R2D2Agent", "R2D2Config", "create_agent"]
