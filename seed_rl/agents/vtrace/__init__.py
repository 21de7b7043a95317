"""IMPALA's V-trace actor-critic (Espeholt et al. 2018)."""

from seed_rl.agents.vtrace.agent import VtraceAgent, create_agent
from seed_rl.agents.vtrace.config import VtraceConfig

__all__ = ["VtraceAgent", "VtraceConfig", "create_agent"]
