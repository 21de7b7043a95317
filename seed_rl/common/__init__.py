"""The learner runtime and what it needs.

Where a module lives: seed_rl/common/ is the learner runtime and what it
needs (specs, batching, per-env state, unrolls, replay, queues,
checkpoints, optimizers, devices, metrics); the math of losses, targets,
exploration and networks that agents share lives in seed_rl/agents/ as
modules named for what they are (distributions, normalizers, target
networks, ...). A module that only agents import and that is none of the
runtime's parts above belongs there, not here.

The dependency rule: nothing here imports the transport (seed_rl.grpc),
an agent or a domain; the entry points wire them together
(seed_rl/learner_main.py). The modules in `TF_FREE` load no TensorFlow
(specs, batching, per-env state, unroll assembly, replay, the learner
loop, profiling, the evaluation protocol interface), so tools and actors
may use them; the others are TensorFlow modules (optimizers, checkpoints,
devices).
tests/actors/test_no_tensorflow.py holds both rules.
"""

TF_FREE = (
  "agent_api",
  "batcher",
  "batches",
  "env_state",
  "episode_stats",
  "errors",
  "evaluation",
  "frames",
  "learner",
  "learner_config",
  "metrics",
  "profiling",
  "reporting",
  "replay",
  "specs",
  "tf_startup",
  "throttle",
  "transitions",
  "unroll_queue",
  "unroll_store",
)
