"""Constants and channel options shared by the learner server and actor clients.

The protocol itself is defined in seed_rl.proto; this module holds what both
ends must agree on beyond the message layout.
"""

from __future__ import annotations

from typing import List, Tuple

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

# An Atari batch of 64 envs x 84x84 frames is ~450 KiB; 64 MiB leaves room for
# large actors or big observations without reaching gRPC's 4 MiB default cap.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

# Keepalive pings let an actor notice a learner host that vanished without
# closing its sockets; the server must accept pings at that rate or it answers
# with GOAWAY(too_many_pings).
_KEEPALIVE_TIME_MS = 30_000
_KEEPALIVE_TIMEOUT_MS = 10_000

Options = List[Tuple[str, int]]


def server_options() -> Options:
  return [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
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
