"""What agents share with the learner runtime.

The dependency rule: nothing here imports the transport (seed_rl.grpc),
an agent or a domain; the entry points wire them together
(seed_rl/learner_main.py). The modules in `TF_FREE` load no TensorFlow
(specs, batching, per-env state, unroll assembly, replay, the learner
loop, profiling), so tools and actors may use them; the others are TensorFlow
modules (optimizers, distributions, normalizers, diagnostics, target
networks, value rescaling, Q-learning targets, checkpoints, devices).
tests/test_actor_no_tf.py holds both rules.
"""

TF_FREE = (
  "agent_api",
  "batcher",
  "batches",
  "config_checks",
  "env_state",
  "episode_stats",
  "errors",
  "frames",
  "learner",
  "learner_config",
  "metrics",
  "profiling",
  "reporting",
  "replay",
  "schedules",
  "specs",
  "throttle",
  "transitions",
  "unroll_queue",
  "unroll_store",
)
