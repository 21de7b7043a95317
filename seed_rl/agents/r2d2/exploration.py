"""Epsilon-greedy exploration moved to seed_rl/agents/exploration.py (R2D2
and DQN share it); these names stay importable from here."""

from seed_rl.agents.exploration import (
  env_epsilons,
  epsilon_greedy,
  per_env_epsilons,
)

__all__ = ["env_epsilons", "epsilon_greedy", "per_env_epsilons"]
