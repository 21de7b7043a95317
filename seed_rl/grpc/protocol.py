"""Constants and channel options shared by the learner server and actor clients.

The protocol itself is defined in seed_rl.proto; this module holds what both
ends must agree on beyond the message layout.
"""

from __future__ import annotations

import math
from typing import List, Tuple

import numpy as np

# Bumped whenever a change makes old actors and new learners misread each other.
PROTOCOL_VERSION = 1

# Invocation metadata of the Step call: the session id returned by Hello.
SESSION_METADATA_KEY = "seed-session"
# Trailing metadata that tells the client why the server failed a call, where
# the status code alone does not say whether reconnecting can help.
REASON_METADATA_KEY = "seed-reason"
REASON_SPEC_MISMATCH = "spec-mismatch"
REASON_SUPERSEDED = "superseded"
REASON_LEARNER_RESTARTED = "learner-restarted"
# The learner finished training: actors exit 0 instead of reconnecting.
REASON_LEARNER_FINISHED = "learner-finished"
# The learner ended a Step stream that sent nothing for its silence deadline
# after the learner's last response (a hung env or host, or a client holding
# an actor id): an actor that was only slow says Hello again and goes on.
REASON_SILENT = "silent"
# The learner had no capacity for this call (every slot of its `max_workers`
# in use, or the call was one of too many that had not sent a message yet);
# retried with backoff.
REASON_BUSY = "learner-busy"

# An Atari batch of 64 envs x 84x84 frames is ~450 KiB; 64 MiB leaves room for
# large actors or big observations without reaching gRPC's 4 MiB default cap.
# The outer bound of every message; the learner receives less (see
# `max_step_request_bytes`, `max_request_bytes`).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

# Protobuf framing of a StepRequest beyond its tensors' payloads: 10 Tensor
# fields (tag, length, dtype name, shape) and the sequence number take a few
# hundred bytes; the rest is slack.
_STEP_OVERHEAD_BYTES = 4096
# Per env: env_ids int32, run_ids int64, reward float32, terminated,
# truncated and life_lost bool, and at most one ended episode (return
# float32, length int32); plus the observation and at most one final
# observation.
_STEP_FIXED_BYTES_PER_ENV = 4 + 8 + 4 + 1 + 1 + 1 + 4 + 4
# A HelloRequest holds both specs with their bounds, and their names.
_HELLO_OVERHEAD_BYTES = 64 * 1024


def _payload_bytes(spec) -> int:
  return math.prod(spec.shape) * np.dtype(spec.dtype).itemsize


def max_step_request_bytes(observation_spec, num_envs: int) -> int:
  """The largest well-formed StepRequest of `num_envs` envs (plus slack),
  capped at MAX_MESSAGE_BYTES: every env truncated in the same step (one
  final observation each) and one ended episode per env."""
  per_env = _STEP_FIXED_BYTES_PER_ENV + 2 * _payload_bytes(observation_spec)
  return min(MAX_MESSAGE_BYTES, num_envs * per_env + _STEP_OVERHEAD_BYTES)


def max_request_bytes(
  observation_spec, action_spec, num_envs_total: int
) -> int:
  """The learner server's receive limit: the largest StepRequest of an actor
  holding all `num_envs_total` envs, or the largest HelloRequest. gRPC reads
  a message's length first and refuses a longer one before buffering it
  whole; each session then refuses what is larger than its own K envs take
  (`max_step_request_bytes`)."""
  hello = (
    2 * (_payload_bytes(observation_spec) + _payload_bytes(action_spec))
    + _HELLO_OVERHEAD_BYTES
  )
  step = max_step_request_bytes(observation_spec, num_envs_total)
  return min(MAX_MESSAGE_BYTES, max(step, hello))


# Keepalive pings let an actor notice a learner host that vanished without
# closing its sockets; the server must accept pings at that rate or it answers
# with GOAWAY(too_many_pings).
_KEEPALIVE_TIME_MS = 30_000
_KEEPALIVE_TIMEOUT_MS = 10_000

Options = List[Tuple[str, int]]


def server_options(max_receive_bytes: int = MAX_MESSAGE_BYTES) -> Options:
  """The learner server's options; `max_receive_bytes` (at most
  MAX_MESSAGE_BYTES) from `max_request_bytes`."""
  return [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    (
      "grpc.max_receive_message_length",
      min(max_receive_bytes, MAX_MESSAGE_BYTES),
    ),
    # Two learners silently sharing a port would split the actors between
    # them; fail the second bind instead.
    ("grpc.so_reuseport", 0),
    ("grpc.keepalive_permit_without_calls", 1),
    # The server pings too, so a stream whose actor host vanished (no FIN,
    # no RST) ends within keepalive time + timeout and frees its actor id.
    ("grpc.keepalive_time_ms", _KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", _KEEPALIVE_TIMEOUT_MS),
    (
      "grpc.http2.min_recv_ping_interval_without_data_ms",
      _KEEPALIVE_TIME_MS // 2,
    ),
    ("grpc.http2.max_ping_strikes", 0),
  ]


def channel_options(max_backoff_s: float) -> Options:
  """Client channel options; reconnect attempts are at most `max_backoff_s` apart."""
  max_backoff_ms = max(100, int(max_backoff_s * 1000))
  return [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # gRPC's own reconnect backoff (1 s growing to 120 s) would otherwise
    # gate how soon a restarted learner is found, whatever our retry loop does.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", max_backoff_ms),
    ("grpc.keepalive_time_ms", _KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", _KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
  ]
