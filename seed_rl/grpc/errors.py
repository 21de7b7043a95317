"""Errors an actor sees from the learner (re-exported by seed_rl.grpc.client)."""

from __future__ import annotations

from typing import Optional

import grpc

from seed_rl.common.errors import ServiceStopping  # noqa: F401 (re-exported)


class ProtocolError(Exception):
  """The learner refused a request (INVALID_ARGUMENT / FAILED_PRECONDITION).

  Retrying the same request cannot succeed; the message says what was wrong.
  """

  def __init__(self, message: str, code: Optional[grpc.StatusCode] = None):
    super().__init__(message)
    self.code = code


class SpecMismatchError(ProtocolError):
  """The learner's observation/action spec differs from the actor's env's."""


class SessionSupersededError(ProtocolError):
  """A newer Hello for the same actor id took over this actor's environments."""


class LearnerFinished(Exception):
  """The learner finished training (not a failure): the actor should exit."""


class AuthenticationError(ProtocolError):
  """The learner refused this actor's token (UNAUTHENTICATED)."""


class LearnerUnavailableError(ConnectionError):
  """No learner answered within connect_timeout_s."""


class LearnerError(RuntimeError):
  """The learner failed while serving a request (INTERNAL and other codes)."""

  def __init__(self, message: str, code: Optional[grpc.StatusCode] = None):
    super().__init__(message)
    self.code = code
