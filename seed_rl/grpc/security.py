"""Authentication and encryption between actors and the learner.

Threat model: the learner's port is reachable by machines that are not ours
(a cluster network, a cloud VPC). Whoever can call it could feed training
data and read actions, so a learner that listens beyond the loopback
interface requires
  - TLS (server certificate and key; actors verify it against a CA), and
  - a shared token, sent by actors as `authorization: Bearer <token>`
    metadata on every RPC and compared in constant time; a missing or wrong
    token is refused with UNAUTHENTICATED.
Tokens come from a file or the SEED_RL_TOKEN environment variable, never
from the command line (other users can read a process's arguments).
`scripts/make_certs.sh` makes a self-signed CA and a server certificate.
"""

from __future__ import annotations

import dataclasses
import hmac
import ipaddress
import os
from typing import List, Optional, Tuple

import grpc

TOKEN_ENV = "SEED_RL_TOKEN"
_METADATA_KEY = "authorization"
_SCHEME = "Bearer "
_MIN_TOKEN_CHARS = 16


def read_token(token_file: Optional[str]) -> Optional[str]:
  """The shared token from `token_file`, else $SEED_RL_TOKEN, else None."""
  if token_file:
    try:
      with open(token_file) as f:
        token = f.read().strip()
    except OSError as e:
      raise ValueError(
        f"cannot read the token file {token_file!r}: {e.strerror}"
      ) from None
    source = f"token file {token_file!r}"
  else:
    token = os.environ.get(TOKEN_ENV, "").strip()
    source = f"${TOKEN_ENV}"
    if not token:
      return None
  if len(token) < _MIN_TOKEN_CHARS:
    raise ValueError(
      f"the token from {source} has {len(token)} characters; "
      f"use at least {_MIN_TOKEN_CHARS} (e.g. `openssl rand "
      f"-hex 32`)"
    )
  return token


def _read(path: str, what: str) -> bytes:
  try:
    with open(path, "rb") as f:
      return f.read()
  except OSError as e:
    raise ValueError(f"cannot read the {what} {path!r}: {e.strerror}") from None


def is_loopback(address: str) -> bool:
  """Whether 'host:port' binds only the loopback interface."""
  host = address.rsplit(":", 1)[0].strip("[]")
  if host == "localhost":
    return True
  try:
    return ipaddress.ip_address(host).is_loopback
  except ValueError:
    return False  # a hostname, '', '::' or '0.0.0.0' reach the network


@dataclasses.dataclass(frozen=True)
class ServerSecurity:
  """The learner's side: TLS certificate and key, and the token."""

  cert_file: Optional[str] = None
  key_file: Optional[str] = None
  token: Optional[str] = None

  def __post_init__(self):
    if bool(self.cert_file) != bool(self.key_file):
      raise ValueError(
        "TLS needs both a certificate and a key (--tls_cert and --tls_key)"
      )

  @property
  def tls(self) -> bool:
    return bool(self.cert_file)

  def credentials(self) -> Optional[grpc.ServerCredentials]:
    if not self.tls:
      return None
    # __post_init__ allows a certificate only together with a key.
    assert self.cert_file and self.key_file
    return grpc.ssl_server_credentials(
      [
        (
          _read(self.key_file, "TLS key"),
          _read(self.cert_file, "TLS certificate"),
        )
      ]
    )

  def interceptors(self) -> List[grpc.aio.ServerInterceptor]:
    return [TokenInterceptor(self.token)] if self.token else []

  def check_address(self, address: str, insecure: bool) -> None:
    """Refuses a non-loopback address without TLS and a token."""
    if is_loopback(address) or (self.tls and self.token) or insecure:
      return
    missing = " and ".join(
      m
      for m, ok in (
        ("TLS (--tls_cert, --tls_key)", self.tls),
        (f"a token (--token_file or ${TOKEN_ENV})", self.token),
      )
      if not ok
    )
    raise ValueError(
      f"refusing to serve on {address!r}, which other machines can reach, "
      f"without {missing}; bind localhost, add them, or pass --insecure "
      "on a network you trust"
    )


@dataclasses.dataclass(frozen=True)
class ClientSecurity:
  """An actor's side: the CA that signed the learner's certificate, the
  token, and optionally the name the certificate was issued for."""

  ca_file: Optional[str] = None
  token: Optional[str] = None
  server_name: Optional[str] = None

  def channel(self, address: str, options) -> grpc.Channel:
    options = list(options)
    if not self.ca_file:
      return grpc.insecure_channel(address, options=options)
    if self.server_name:
      options.append(("grpc.ssl_target_name_override", self.server_name))
    credentials = grpc.ssl_channel_credentials(
      root_certificates=_read(self.ca_file, "CA certificate")
    )
    return grpc.secure_channel(address, credentials, options=options)

  def metadata(self) -> Optional[Tuple[Tuple[str, str], ...]]:
    if not self.token:
      return None
    return ((_METADATA_KEY, _SCHEME + self.token),)


def _unauthenticated(details: str):
  async def abort(request_or_iterator, context):
    del request_or_iterator
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, details)

  return abort


class TokenInterceptor(grpc.aio.ServerInterceptor):
  """Refuses every RPC whose bearer token is not the learner's (on the
  learner server's asyncio event loop)."""

  def __init__(self, token: str):
    self._expected = (_SCHEME + token).encode()

  async def intercept_service(self, continuation, handler_call_details):
    sent = ""
    for key, value in handler_call_details.invocation_metadata or ():
      if key == _METADATA_KEY:
        sent = value
    if hmac.compare_digest(sent.encode(), self._expected):
      return await continuation(handler_call_details)
    handler = await continuation(handler_call_details)
    if handler is None:
      return None
    details = ("missing token" if not sent else "wrong token") + (
      f"; actors send the learner's token (--token_file or ${TOKEN_ENV})"
    )
    abort = _unauthenticated(details)
    # Request-streaming handlers run at once, without waiting for a request
    # message: a client that sends none cannot hold an RPC slot.
    if handler.response_streaming:
      return grpc.stream_stream_rpc_method_handler(abort)
    return grpc.stream_unary_rpc_method_handler(abort)
