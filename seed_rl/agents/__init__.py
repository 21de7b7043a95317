"""Agents, one package each (seed_rl/agents/<name>/), and what they share.

Where a module lives: seed_rl/common/ is the learner runtime and what it
needs (specs, batching, per-env state, unrolls, replay, queues,
checkpoints, optimizers, devices, metrics); the math of losses, targets,
exploration and networks that agents share lives here, as modules named for
what they are (gae.py, advantages.py, rewards.py, exploration.py,
schedules.py, q_learning.py, value_rescaling.py, target_network.py,
distributions.py, noisy.py, normalizers.py, diagnostics.py, and
config_checks.py for the agents' configs), never in whichever agent had it
first and never in seed_rl/common/.

Each agent package exports `<X>Agent`, `<X>Config` and `create_agent` from
its __init__; no agent imports a sibling agent or a domain (seed_rl.atari,
seed_rl.classic, ...): torsos come from seed_rl.networks.
tests/agents/test_imports.py holds these rules.
"""
