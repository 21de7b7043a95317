"""An agent that costs next to nothing, for measuring the learner runtime.

benchmarks/learner_capacity.py serves it with the real learner process
(`python -m seed_rl.learner_main --agent benchmarks.null_agent`, from the
repository root) so that the CPU it measures is the runtime's own: gRPC, decoding,
validation, batching, per-env state, frame stacks and unroll assembly.
"""
