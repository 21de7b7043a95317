"""GAE moved to seed_rl/agents/gae.py (PPO and A2C share it); these names
stay importable from here."""

from seed_rl.agents.gae import gae, unroll_gae

__all__ = ["gae", "unroll_gae"]
