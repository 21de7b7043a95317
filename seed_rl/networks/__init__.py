"""Torsos that agents and environment domains share (Keras 3 layers,
gin-configurable): `mlp_torso` for low-dimensional observations
`[B, *obs] -> [B, F]`, `atari_torso` for stacked frames
`[B, H, W, C] -> [B, F]` (the conv stacks of Mnih et al. 2013 and 2015 and
IMPALA's residual torso). Agents default to these; domains pick one in
their gin files. Nothing here imports an agent or a domain."""

from seed_rl.networks.conv import atari_torso
from seed_rl.networks.mlp import mlp_torso

__all__ = ["atari_torso", "mlp_torso"]
