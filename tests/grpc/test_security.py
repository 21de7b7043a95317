"""TLS and token authentication over real sockets (real LearnerServer, real
ActorClient, certificates made by scripts/make_certs.sh)."""

from __future__ import annotations

from tests.support import ROOT
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from seed_rl.grpc import security
from seed_rl.grpc.client import ActorClient, AuthenticationError
from seed_rl.grpc.client import LearnerUnavailableError
from seed_rl.grpc.server import LearnerServer
from tests.support.servers import ACT, OBS, ArgmaxHandler, make_batch

pytestmark = [
  pytest.mark.timeout(90),
  pytest.mark.skipif(
    shutil.which("openssl") is None,
    reason="openssl is needed to make test certificates",
  ),
]


def _make_certs(out):
  """A CA and a learner certificate for learner.test (scripts/make_certs.sh)."""
  subprocess.run(
    [
      "bash",
      os.path.join(ROOT, "scripts", "make_certs.sh"),
      str(out),
      "learner.test",
    ],
    check=True,
    capture_output=True,
  )
  return out


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
  return _make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture()
def secure_server(certs):
  token = (certs / "token").read_text().strip()
  handler = ArgmaxHandler()
  server = LearnerServer(
    "localhost:0",
    OBS,
    ACT,
    24,
    handler,
    security=security.ServerSecurity(
      str(certs / "learner.pem"), str(certs / "learner.key"), token
    ),
  )
  server.start()
  yield server, handler, token
  server.stop(0)


def _client(port, actor_id, host="localhost", **kw):
  return ActorClient(
    f"{host}:{port}",
    actor_id,
    4,
    OBS,
    ACT,
    connect_timeout_s=3.0,
    security=security.ClientSecurity(**kw) if kw else None,
  )


def test_actor_with_tls_and_token_is_served_and_others_are_refused(
  secure_server, certs
):
  server, handler, token = secure_server
  rng = np.random.default_rng(0)
  good = _client(server.port, 0, ca_file=str(certs / "ca.pem"), token=token)
  good.connect()
  assert good.step(make_batch(good.first_env_id, rng)).shape == (4,)

  with pytest.raises(AuthenticationError, match="missing token"):
    _client(server.port, 1, ca_file=str(certs / "ca.pem")).connect()
  with pytest.raises(AuthenticationError, match="wrong token"):
    _client(
      server.port, 2, ca_file=str(certs / "ca.pem"), token="x" * 64
    ).connect()
  # Plaintext to a TLS port never completes a handshake.
  with pytest.raises(LearnerUnavailableError):
    _client(server.port, 3).connect()
  # A certificate from another CA is not trusted.
  other = _make_certs(certs.parent / "other")
  with pytest.raises(LearnerUnavailableError):
    _client(
      server.port, 4, ca_file=str(other / "ca.pem"), token=token
    ).connect()

  # The real actor kept its stream through all of that.
  assert good.step(make_batch(good.first_env_id, rng)).shape == (4,)
  assert all(b.env_ids[0] == 0 for b in handler.batches)
  good.close()


def test_server_name_override_matches_the_certificate(secure_server, certs):
  """The client checks the learner's certificate against `server_name`, not
  the address it dials: the name the certificate was issued for is served,
  another name is refused."""
  server, _, token = secure_server
  ca_file = str(certs / "ca.pem")
  client = _client(
    server.port,
    0,
    host="127.0.0.1",
    ca_file=ca_file,
    token=token,
    server_name="learner.test",
  )
  client.connect()
  batch = make_batch(client.first_env_id, np.random.default_rng(0))
  assert client.step(batch).shape == (4,)
  client.close()
  with pytest.raises(LearnerUnavailableError):
    _client(
      server.port,
      1,
      host="127.0.0.1",
      ca_file=ca_file,
      token=token,
      server_name="elsewhere.test",
    ).connect()


@pytest.mark.parametrize(
  "address,loopback",
  [
    ("localhost:1", True),
    ("127.0.0.1:1", True),
    ("[::1]:1", True),
    ("[::]:1", False),
    ("0.0.0.0:1", False),
    ("10.1.2.3:1", False),
    ("learner.example:1", False),
  ],
)
def test_loopback_detection(address, loopback):
  assert security.is_loopback(address) == loopback


def test_non_loopback_learner_needs_tls_and_token(certs, monkeypatch):
  monkeypatch.delenv(security.TOKEN_ENV, raising=False)
  srv = security.ServerSecurity()
  with pytest.raises(ValueError, match="without TLS .* and a token"):
    srv.check_address("0.0.0.0:8686", insecure=False)
  srv.check_address("0.0.0.0:8686", insecure=True)  # explicitly allowed
  srv.check_address("localhost:8686", insecure=False)
  full = security.ServerSecurity(
    str(certs / "learner.pem"), str(certs / "learner.key"), "t" * 32
  )
  full.check_address("0.0.0.0:8686", insecure=False)


def test_learner_main_refuses_to_listen_openly_without_tls(tmp_path):
  out = subprocess.run(
    [
      sys.executable,
      "-m",
      "seed_rl.learner_main",
      "--logdir",
      str(tmp_path),
      "--server_address",
      "0.0.0.0:0",
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=60,
    env={k: v for k, v in os.environ.items() if k != security.TOKEN_ENV},
  )
  assert out.returncode == 2
  assert "refusing to serve on '0.0.0.0:0'" in out.stderr
  assert "--insecure" in out.stderr


def test_tokens_come_from_files_or_the_environment(tmp_path, monkeypatch):
  monkeypatch.delenv(security.TOKEN_ENV, raising=False)
  assert security.read_token(None) is None
  monkeypatch.setenv(security.TOKEN_ENV, "e" * 20)
  assert security.read_token(None) == "e" * 20
  path = tmp_path / "token"
  path.write_text("f" * 40 + "\n")
  assert security.read_token(str(path)) == "f" * 40
  path.write_text("short")
  with pytest.raises(ValueError, match="at least 16"):
    security.read_token(str(path))
  with pytest.raises(ValueError, match="cannot read the token file"):
    security.read_token(str(tmp_path / "missing"))
