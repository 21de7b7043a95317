"""seed_rl: SEED-style reinforcement learning with central inference over gRPC.

Actors (TensorFlow-free) step batches of environments and stream observations
to one learner, which runs batched inference for every environment and trains.
"""

__version__ = "0.1.0"
