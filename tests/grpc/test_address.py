"""Finding a moved learner: the address file the learner writes and the
client that reads it before every connection attempt (real servers and
channels on localhost)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from seed_rl.grpc import address as address_lib
from seed_rl.grpc.client import ActorClient, LearnerUnavailableError
from seed_rl.grpc.server import LearnerServer
from tests.support.servers import ACT, K, OBS, TOTAL, ArgmaxHandler
from tests.support.servers import free_port, make_batch

pytestmark = pytest.mark.timeout(60)


def test_an_address_file_is_read_anew_and_written_whole(tmp_path):
  path = tmp_path / "shared" / "learner.address"
  source = address_lib.LearnerAddress(f"file:{path}")
  assert source.read() is None  # no learner has served yet
  address_lib.write(str(path), "learner-0:8686")
  assert source.read() == "learner-0:8686"
  address_lib.write(str(path), "learner-1:9000")
  assert source.read() == "learner-1:9000"
  assert sorted(p.name for p in path.parent.iterdir()) == ["learner.address"]
  assert address_lib.LearnerAddress("host:1").read() == "host:1"
  with pytest.raises(ValueError, match="address file's path"):
    address_lib.LearnerAddress("file:")


def test_the_advertised_address_names_a_reachable_host():
  assert address_lib.advertised("localhost:0", 5123, None) == "localhost:5123"
  assert address_lib.advertised("[::]:8686", 8686, "learner-7") == (
    "learner-7:8686"
  )
  host = address_lib.advertised("0.0.0.0:8686", 8686, None).rsplit(":", 1)[0]
  assert host not in ("0.0.0.0", "")


def test_without_an_address_the_client_gives_up_naming_the_file(tmp_path):
  client = ActorClient(
    f"file:{tmp_path / 'none'}",
    0,
    K,
    OBS,
    ACT,
    connect_timeout_s=0.5,
    max_backoff_s=0.1,
  )
  with pytest.raises(LearnerUnavailableError, match="no learner address in"):
    client.connect()
  client.close()


def test_a_client_follows_the_learner_to_another_port(tmp_path):
  path = str(tmp_path / "learner.address")
  rng = np.random.default_rng(0)
  client = ActorClient(
    f"file:{path}", 1, K, OBS, ACT, connect_timeout_s=20, max_backoff_s=0.2
  )
  first_port = free_port()
  first = LearnerServer(
    f"localhost:{first_port}", OBS, ACT, TOTAL, ArgmaxHandler()
  )
  first.start()
  address_lib.write(path, f"localhost:{first_port}")
  second = None
  try:
    batch = make_batch(1 * K, rng)  # actor 1: envs [K, 2K)
    np.testing.assert_array_equal(
      client.step(batch), batch.observation.argmax(1)
    )
    first.stop()
    result = {}

    def step():
      try:
        result["actions"] = client.step(batch)
      except Exception as e:  # reported below
        result["error"] = e

    batch = make_batch(1 * K, rng)  # actor 1: envs [K, 2K)
    thread = threading.Thread(target=step)
    thread.start()
    time.sleep(0.5)  # the client retries the old address meanwhile
    assert thread.is_alive()
    second_port = free_port()
    handler = ArgmaxHandler()
    second = LearnerServer(f"localhost:{second_port}", OBS, ACT, TOTAL, handler)
    second.start()
    address_lib.write(path, f"localhost:{second_port}")
    thread.join(15)
    assert "error" not in result, result.get("error")
    np.testing.assert_array_equal(
      result["actions"], batch.observation.argmax(1)
    )
    # The batch cut off by the move went to the new learner, once.
    assert len(handler.batches) == 1
  finally:
    client.close()
    first.stop()
    if second is not None:
      second.stop()
