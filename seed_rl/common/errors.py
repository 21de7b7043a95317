"""Errors the learner runtime raises to whoever serves it (TF- and gRPC-free).

The transport (seed_rl.grpc) maps them to status codes; the runtime does not
import the transport.
"""

from __future__ import annotations


class ServiceStopping(RuntimeError):
  """Raised by the learner's handler once it is shutting down.

  finished: True when training is over (a stop condition was reached, or the
    user stopped it): actors are told so and exit 0, so a cluster job
    completes. False (e.g. SIGTERM from a cluster that reschedules the
    learner): actors treat it like a restart and reconnect with backoff.
  """

  def __init__(self, message: str, finished: bool = False):
    super().__init__(message)
    self.finished = finished
