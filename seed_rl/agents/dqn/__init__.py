"""DQN family (Mnih et al. 2015): double, dueling, n-step, PER, NoisyNet."""

from seed_rl.agents.dqn.agent import DQNAgent, create_agent
from seed_rl.agents.dqn.config import DQNConfig

__all__ = ["DQNAgent", "DQNConfig", "create_agent"]
