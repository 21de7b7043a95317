"""PPO: proximal policy optimization (Schulman et al. 2017)."""

from seed_rl.agents.ppo.agent import PPOAgent, create_agent
from seed_rl.agents.ppo.config import PPOConfig

__all__ = ["PPOAgent", "PPOConfig", "create_agent"]
