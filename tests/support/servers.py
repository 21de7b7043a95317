"""A stand-in for the learner runtime behind a real LearnerServer, and the
messages the wire-protocol, limits, security and fuzzing tests send it."""

from __future__ import annotations

import socket
import threading

import numpy as np

from seed_rl.common.specs import ArraySpec, StepBatch
from seed_rl.grpc import codec
from seed_rl.grpc import protocol
from seed_rl.grpc import seed_rl_pb2

OBS = ArraySpec((4,), "float32", "observation")
ACT = ArraySpec((), "int32", "action", num_values=4)
K = 4
TOTAL = 24  # actors 0..5 with K=4 each
# run_ids[0] values that make the handler fail, to test error mapping.
RUN_ID_VALUE_ERROR = -1
RUN_ID_RUNTIME_ERROR = -2


class ArgmaxHandler:
  """action[i] = argmax(observation[i].flat) % 4; records batches, disconnects."""

  def __init__(self):
    self.lock = threading.Lock()
    self.batches = []
    self.disconnects = []

  def step(self, batch: StepBatch) -> np.ndarray:
    if batch.run_ids[0] == RUN_ID_VALUE_ERROR:
      raise ValueError("run_ids: handler refuses this run id")
    if batch.run_ids[0] == RUN_ID_RUNTIME_ERROR:
      raise RuntimeError("handler exploded")
    with self.lock:
      self.batches.append(batch)
    rows = batch.observation.reshape(batch.num_envs, -1)
    return (rows.argmax(axis=1) % ACT.num_values).astype(np.int32)

  def on_disconnect(self, first_env_id, num_envs):
    with self.lock:
      self.disconnects.append((first_env_id, num_envs))


def make_batch(
  first_env_id,
  rng,
  num_envs=K,
  truncated=(),
  terminated=(),
  run_id=7,
  obs_spec=OBS,
):
  """A valid StepBatch; `truncated`/`terminated` are env indices."""
  trunc = np.zeros(num_envs, bool)
  trunc[list(truncated)] = True
  term = np.zeros(num_envs, bool)
  term[list(terminated)] = True
  ended = int(trunc.sum() + term.sum())
  obs_shape = (num_envs,) + obs_spec.shape
  final_shape = (int(trunc.sum()),) + obs_spec.shape
  return StepBatch(
    env_ids=np.arange(first_env_id, first_env_id + num_envs, dtype=np.int32),
    run_ids=np.full(num_envs, run_id, np.int64),
    reward=rng.normal(size=num_envs).astype(np.float32),
    terminated=term,
    truncated=trunc,
    observation=rng.normal(size=obs_shape).astype(obs_spec.dtype),
    final_observation=rng.normal(size=final_shape).astype(obs_spec.dtype),
    episode_return=rng.normal(size=ended).astype(np.float32),
    episode_length=np.arange(1, ended + 1, dtype=np.int32),
  )


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def check_good_client(client, rng):
  batch = make_batch(client.first_env_id, rng, truncated=[1])
  actions = client.step(batch)
  np.testing.assert_array_equal(actions, batch.observation.argmax(1))


def hello_request(
  actor_id,
  num_envs=K,
  obs_spec=OBS,
  act_spec=ACT,
  version=protocol.PROTOCOL_VERSION,
):
  return seed_rl_pb2.HelloRequest(
    protocol_version=version,
    actor_id=actor_id,
    num_envs=num_envs,
    observation_spec=codec.encode_spec(obs_spec),
    action_spec=codec.encode_spec(act_spec),
  )
