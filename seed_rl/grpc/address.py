"""Where the learner is: a fixed 'host:port', or a file the learner writes.

A learner that is moved (preempted, then rescheduled on another machine or
port) is found again by its actors in one of two ways:

- a stable name: a Kubernetes Service, a DNS name, $CLUSTER_SPEC; the
  actors keep `--server_address host:port` and reconnect to it;
- an address file on storage both sides see (NFS, a shared volume): the
  learner, started with `--address_file PATH`, writes its 'host:port' there
  once it serves (atomically: a temporary file renamed), and actors given
  `--server_address file:PATH` read it before every connection attempt,
  so a learner that comes back elsewhere is found without restarting them.
"""

from __future__ import annotations

import os
import socket
from typing import Optional

FILE_PREFIX = "file:"
_ANY_HOST = ("", "0.0.0.0", "::", "[::]")


class LearnerAddress:
  """The learner's 'host:port' as an actor gets it: `value` itself, or
  'file:PATH', the content of PATH read anew by each `read()`."""

  def __init__(self, value: str):
    self.value = value
    self.path: Optional[str] = None
    if value.startswith(FILE_PREFIX):
      self.path = value[len(FILE_PREFIX) :]
      if not self.path:
        raise ValueError(
          f"server address {value!r}: give the address file's path after "
          f"'{FILE_PREFIX}'"
        )

  def read(self) -> Optional[str]:
    """The address now; None while the file does not exist or is empty
    (no learner has served yet)."""
    if self.path is None:
      return self.value
    try:
      with open(self.path) as f:
        text = f.read().strip()
    except FileNotFoundError:
      return None
    return text or None

  def __str__(self) -> str:
    return self.value


def advertised(bind_address: str, port: int, host: Optional[str]) -> str:
  """What actors should dial: `host` if given, else the bind address's
  host (this machine's name when it binds every interface), with the port
  actually bound."""
  if host is None:
    host = bind_address.rsplit(":", 1)[0]
    if host in _ANY_HOST:
      host = socket.getfqdn()
  return f"{host}:{port}"


def write(path: str, address: str) -> None:
  """Writes `address` to `path` so that a reader sees the old or the new
  content, never a part."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  temporary = f"{path}.tmp{os.getpid()}"
  with open(temporary, "w") as f:
    f.write(address + "\n")
    f.flush()
    os.fsync(f.fileno())
  os.replace(temporary, path)
