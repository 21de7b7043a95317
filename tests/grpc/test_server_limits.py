"""What one client with a valid token cannot hold on the learner:
an actor id, by going silent on an open stream; the capacity a restarting
actor needs, with idle calls; memory, with messages larger than its spec
allows.

The first tests run a LearnerServer in this process (fast, exact); the last
ones a real `learner_main` (CartPole V-trace, a token) with real actor
processes and clients on real sockets.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time

import grpc
import numpy as np
import pytest

from seed_rl.common.specs import ArraySpec
from seed_rl.grpc import codec
from seed_rl.grpc import protocol
from seed_rl.grpc import security
from seed_rl.grpc import seed_rl_pb2_grpc
from seed_rl.grpc.client import ActorClient, LearnerError
from seed_rl.grpc.server import LearnerServer
from tests.support.servers import ACT, OBS, ArgmaxHandler, hello_request
from tests.support.servers import make_batch

from tests.support import launch

pytestmark = pytest.mark.timeout(300)

K = 4


def _reason(error: grpc.RpcError):
  return dict(error.trailing_metadata() or ()).get(protocol.REASON_METADATA_KEY)


class _Stream:
  """A raw Step stream that sends only what it is given (a client that can
  go silent while keeping the stream open)."""

  def __init__(self, channel, session_id, metadata=()):
    self._requests: queue.SimpleQueue = queue.SimpleQueue()
    step = channel.stream_stream(
      "/seed_rl.SeedRL/Step",
      request_serializer=None,
      response_deserializer=None,
    )
    self.call = step(
      iter(self._requests.get, None),
      metadata=((protocol.SESSION_METADATA_KEY, session_id),) + metadata,
    )

  def send(self, data: bytes) -> None:
    self._requests.put(data)

  def close(self) -> None:
    self._requests.put(None)
    self.call.cancel()


def _never(done=None):
  """A request iterator that sends nothing (an idle call) until `done` is
  set, or until the test ends."""
  done = done or threading.Event()
  _IDLE.append(done)
  done.wait()
  return
  yield  # unreachable: makes _never a generator


_IDLE: list = []


@pytest.fixture(autouse=True)
def _release_idle_calls():
  yield
  while _IDLE:
    _IDLE.pop().set()


# ------------------------------------------------------------ in process ---


class SlowHandler(ArgmaxHandler):
  """Inference that takes `delay_s` (a learner busy training)."""

  def __init__(self, delay_s):
    super().__init__()
    self.delay_s = delay_s

  def step(self, batch):
    time.sleep(self.delay_s)
    return super().step(batch)


def test_silent_stream_is_ended_and_the_actor_id_freed():
  """Silence counts from the learner's response, not from the request: a
  learner slower than the deadline ends nothing; an actor that keeps the
  turn past it loses the stream (DEADLINE_EXCEEDED, reason 'silent'), its
  envs are reported disconnected and its id can say Hello at once."""
  handler = SlowHandler(0.8)
  server = LearnerServer(
    "localhost:0", OBS, ACT, 24, handler, silent_timeout_s=0.4
  )
  port = server.start()
  channel = grpc.insecure_channel(f"localhost:{port}")
  stub = seed_rl_pb2_grpc.SeedRLStub(channel)
  rng = np.random.default_rng(0)
  try:
    session = stub.Hello(hello_request(1), timeout=5).session_id
    stream = _Stream(channel, session)
    for _ in range(2):  # each answer takes 2x the deadline: not silence
      stream.send(
        codec.encode_step_batch(make_batch(4, rng)).SerializeToString()
      )
      next(stream.call)
    answered = time.monotonic()
    with pytest.raises(grpc.RpcError) as info:
      next(stream.call)
    waited = time.monotonic() - answered
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert _reason(info.value) == protocol.REASON_SILENT
    assert "actor 1 owning 4..7 sent nothing for 0.4 s" in info.value.details()
    assert 0.4 <= waited < 2.0, waited
    assert server.silent_streams_ended == 1
    deadline = time.monotonic() + 5
    while (4, K) not in handler.disconnects:
      assert time.monotonic() < deadline
      time.sleep(0.01)
    stub.Hello(hello_request(1), timeout=5)  # not ALREADY_EXISTS
    # The real client reconnects when its stream was ended for silence.
    handler.delay_s = 0
    client = ActorClient(f"localhost:{port}", 2, K, OBS, ACT)
    client.step(make_batch(8, rng))
    deadline = time.monotonic() + 5  # silent past the deadline: ended
    while server.silent_streams_ended < 2:
      assert time.monotonic() < deadline
      time.sleep(0.01)
    client.step(make_batch(8, rng))  # says Hello again, served
    client.close()
  finally:
    channel.close()
    server.stop(0)


def test_idle_calls_are_capped_and_the_oldest_evicted():
  """Calls without a first message are capped per host; the oldest makes
  way (RESOURCE_EXHAUSTED, reason 'learner-busy'), so a real actor behind
  them connects at once; established calls never wait for them."""
  server = LearnerServer(
    "localhost:0",
    OBS,
    ACT,
    24,
    ArgmaxHandler(),
    max_workers=2,
    max_pending_rpcs=8,
    max_pending_rpcs_per_peer=5,
    first_message_timeout_s=30,
  )
  port = server.start()
  channel = grpc.insecure_channel(f"localhost:{port}")
  hello = channel.stream_unary(
    "/seed_rl.SeedRL/Hello",
    request_serializer=bytes,
    response_deserializer=bytes,
  )
  rng = np.random.default_rng(1)
  try:
    idle = [hello.future(_never()) for _ in range(12)]
    deadline = time.monotonic() + 10
    # The client hears of an eviction a moment after the server counts it.
    while server.pending_rpcs_evicted < 7 or sum(f.done() for f in idle) < 7:
      assert time.monotonic() < deadline, server.pending_rpcs_evicted
      time.sleep(0.01)
    time.sleep(0.2)  # no more than 7 come
    assert server.pending_rpcs_evicted == 7
    evicted = [f for f in idle if f.done()]
    assert len(evicted) == 7
    for f in evicted:
      assert f.exception().code() == grpc.StatusCode.RESOURCE_EXHAUSTED
      assert _reason(f.exception()) == protocol.REASON_BUSY
    start = time.monotonic()
    client = ActorClient(
      f"localhost:{port}", 0, K, OBS, ACT, connect_timeout_s=5
    )
    client.step(make_batch(0, rng))
    assert time.monotonic() - start < 2.0
    # max_workers bounds established streams, not the idle calls.
    second = ActorClient(
      f"localhost:{port}", 1, K, OBS, ACT, connect_timeout_s=5
    )
    second.step(make_batch(4, rng))
    with pytest.raises(LearnerError, match="RESOURCE_EXHAUSTED.*max_workers"):
      ActorClient(
        f"localhost:{port}", 2, K, OBS, ACT, connect_timeout_s=1
      ).connect()
    assert sum(f.done() for f in idle) >= 7
    client.close()
    second.close()
  finally:
    for f in idle:
      f.cancel()
    channel.close()
    server.stop(0)


def test_admission_evicts_the_oldest_call_of_the_busiest_host():
  import asyncio
  from seed_rl.grpc.servicer import _Admission, _peer_host

  admission = _Admission(max_pending=5, max_per_peer=3)

  def enter(peer):
    ticket = admission.enter(peer)
    ticket.task = None  # nothing to cancel here (it is this test's task)
    return ticket

  async def scenario():
    a = [enter("ipv4:10.0.0.1") for _ in range(3)]
    b = [enter("ipv4:10.0.0.2") for _ in range(2)]
    assert admission.pending == 5 and admission.evicted == 0
    a.append(enter("ipv4:10.0.0.1"))  # over its host's cap
    assert [t.evicted for t in a] == [True, False, False, False]
    c = enter("ipv4:10.0.0.3")  # over the total: host 1 pays
    assert [t.evicted for t in a] == [True, True, False, False]
    assert not any(t.evicted for t in b) and not c.evicted
    admission.leave(b[0])
    admission.leave(b[0])  # idempotent
    admission.leave(a[0])  # evicted: already gone
    assert admission.pending == 4 and admission.evicted == 2

  asyncio.run(scenario())
  # Every call of a machine counts against its host, whatever its port.
  assert _peer_host("ipv4:10.0.0.1:40123") == "ipv4:10.0.0.1"
  assert _peer_host("ipv6:%5B::1%5D:40123") == "ipv6:%5B::1%5D"
  assert _peer_host("ipv6:[fe80::1]:40123") == "ipv6:[fe80::1]"
  assert _peer_host("unix:/tmp/learner.sock") == "unix"


def test_step_request_bounds_follow_the_specs():
  """The largest well-formed batch (every env truncated, every episode
  ended) fits its session's bound; the server's receive limit is the bound
  of an actor with every env, or a Hello."""
  frames = ArraySpec((84, 84, 4), "uint8", "frames")
  rng = np.random.default_rng(2)
  for spec, k in ((OBS, 1), (OBS, 64), (frames, 1), (frames, 32)):
    everything = list(range(k))
    worst = make_batch(0, rng, num_envs=k, truncated=everything, obs_spec=spec)
    size = codec.encode_step_batch(worst).ByteSize()
    bound = protocol.max_step_request_bytes(spec, k)
    assert size <= bound < 1.05 * size + 4096, (spec.shape, k, size, bound)
  assert protocol.max_request_bytes(frames, ACT, 256) == (
    protocol.max_step_request_bytes(frames, 256)
  )
  assert protocol.max_request_bytes(OBS, ACT, 8) >= 64 * 1024  # a Hello
  huge = ArraySpec((1024, 1024, 16), "float32", "huge")
  assert protocol.max_request_bytes(huge, ACT, 8) == protocol.MAX_MESSAGE_BYTES


def test_message_larger_than_the_session_allows_is_refused():
  handler = ArgmaxHandler()
  server = LearnerServer("localhost:0", OBS, ACT, 64, handler)
  port = server.start()
  assert server.max_receive_bytes == protocol.max_request_bytes(OBS, ACT, 64)
  channel = grpc.insecure_channel(
    f"localhost:{port}",
    options=[("grpc.max_send_message_length", 64 << 20)],
  )
  stub = seed_rl_pb2_grpc.SeedRLStub(channel)
  rng = np.random.default_rng(3)
  try:
    # Actor 0 has one env; a message over its bound (but under the
    # server's) is refused by the session, naming the sizes.
    session = stub.Hello(hello_request(0, num_envs=1), timeout=5).session_id
    stream = _Stream(channel, session)
    bound = protocol.max_step_request_bytes(OBS, 1)
    stream.send(b"\0" * (bound + 1))
    with pytest.raises(grpc.RpcError) as info:
      next(stream.call)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"request: {bound + 1:,} bytes, more than the {bound:,}" in (
      info.value.details()
    )
    # Over the server's limit: gRPC refuses it from its length prefix.
    session = stub.Hello(hello_request(1, num_envs=1), timeout=5).session_id
    stream = _Stream(channel, session)
    stream.send(b"\0" * (server.max_receive_bytes + 1))
    with pytest.raises(grpc.RpcError) as info:
      next(stream.call)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in info.value.details()
    # The largest batch a 1-env session can send is served.
    session = stub.Hello(hello_request(2, num_envs=1), timeout=5).session_id
    stream = _Stream(channel, session)
    worst = make_batch(2, rng, num_envs=1, truncated=[0])
    stream.send(codec.encode_step_batch(worst).SerializeToString())
    next(stream.call)
    stream.close()
  finally:
    channel.close()
    server.stop(0)


def test_launcher_keeps_the_silence_deadline_above_the_env_step_limit(
  capsys,
):
  from seed_rl import train

  def learner_flags(*argv):
    args, extra = train._parse_args(["classic", "vtrace", *argv])
    learner = train._commands(args, extra, [], "localhost:1")[0][1]
    return learner[learner.index("--machine_profile") + 2 :]

  assert learner_flags() == []
  assert learner_flags("--env_step_timeout_s", "5") == [
    "--silent_stream_timeout_s",
    "30",
  ]
  assert learner_flags("--env_step_timeout_s", "45") == [
    "--silent_stream_timeout_s",
    "55",
  ]
  given = ["--silent_stream_timeout_s=90", "--env_step_timeout_s", "45"]
  assert learner_flags(*given) == ["--silent_stream_timeout_s=90"]
  refused = ["--env_step_timeout_s", "40", "--silent_stream_timeout_s", "30"]
  assert train.main(["classic", "vtrace", *refused]) == 2
  assert "--silent_stream_timeout_s 30 must exceed --env_step_timeout_s 40" in (
    capsys.readouterr().err
  )


# ----------------------------------------------------- real processes ---

NUM_ACTORS = 22  # 0 and 1: real actor processes; the others attacked
SILENT_S = 8.0
TOKEN = "t0ken-for-the-server-limits-test"
CARTPOLE_OBS, CARTPOLE_ACT = launch.CARTPOLE_OBS, launch.CARTPOLE_ACT
GIN = os.path.join(launch.ROOT, "seed_rl", "classic", "gin", "vtrace.gin")


def _rss_mib(pid: int) -> float:
  with open(f"/proc/{pid}/status") as f:
    for line in f:
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) / 1024
  raise AssertionError("no VmRSS")


def _plain_cartpole_batch(ids, rng):
  from seed_rl.common.specs import StepBatch

  return StepBatch(
    env_ids=np.asarray(ids, np.int32),
    run_ids=np.full(K, 4242, np.int64),
    reward=np.ones(K, np.float32),
    terminated=np.zeros(K, bool),
    truncated=np.zeros(K, bool),
    observation=rng.uniform(-0.05, 0.05, (K, 4)).astype(np.float32),
    final_observation=np.zeros((0, 4), np.float32),
    episode_return=np.zeros(0, np.float32),
    episode_length=np.zeros(0, np.int32),
  )


class Run:
  """A learner for NUM_ACTORS actors of K envs with a token (plaintext on
  localhost), silence deadline SILENT_S; real actors 0 and 1."""

  def __init__(self, tmp):
    self.tmp = tmp
    self.env = launch.env_without(
      security.TOKEN_ENV, **{security.TOKEN_ENV: TOKEN}
    )
    self.port = launch.free_port()
    self.address = f"localhost:{self.port}"
    self.learner = launch.Proc(
      [
        "seed_rl.learner_main",
        "--env=classic",
        "--agent=vtrace",
        f"--num_actors={NUM_ACTORS}",
        f"--envs_per_actor={K}",
        f"--server_address={self.address}",
        f"--logdir={tmp / 'run'}",
        f"--silent_stream_timeout_s={SILENT_S}",
        "--gin_bindings=LearnerConfig.log_every_s = 1.0",
        "--gin_bindings=LearnerConfig.target_return = None",
        f"--gin_bindings=LearnerConfig.inference_batch_size = {K}",
      ],
      self.env,
    )
    self.actors = {}
    self.stats = {}
    self.starts = 0

  def start_actor(self, actor_id):
    self.starts += 1
    self.stats[actor_id] = self.tmp / f"actor{actor_id}-{self.starts}.json"
    self.actors[actor_id] = launch.Proc(
      [
        "seed_rl.actors.main",
        "--env=classic",
        f"--actor_id={actor_id}",
        f"--num_envs={K}",
        f"--server_address={self.address}",
        f"--gin_config={GIN}",
        "--connect_timeout_s=120",
        "--log_interval_s=0.2",
        f"--stats_file={self.stats[actor_id]}",
      ],
      self.env,
    )
    return self.actors[actor_id]

  def served(self, actor_id) -> int:
    try:
      with open(self.stats[actor_id]) as f:
        return json.load(f)["env_steps"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
      return 0

  def wait_served(self, actor_id, what, timeout=180):
    before = self.served(actor_id)
    launch.wait_for(
      lambda: self.served(actor_id) > before,
      [self.learner, self.actors[actor_id]],
      what,
      timeout,
    )

  def channel(self, **options):
    return grpc.insecure_channel(self.address, options=list(options.items()))

  def client(self, actor_id, **kw):
    return ActorClient(
      self.address,
      actor_id,
      K,
      CARTPOLE_OBS,
      CARTPOLE_ACT,
      security=security.ClientSecurity(token=TOKEN),
      **kw,
    )

  def close(self):
    for p in [self.learner, *self.actors.values()]:
      p.kill()


AUTH = (("authorization", f"Bearer {TOKEN}"),)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  r = Run(tmp_path_factory.mktemp("limits"))
  try:
    r.start_actor(0)
    r.wait_served(0, "actor 0 served")
    yield r
  finally:
    r.close()


def test_silent_stream_ends_and_the_real_actor_takes_its_id(run):
  """A client takes actor 1's id, sends one valid batch and goes silent
  with the stream open; the real actor 1 is refused (ALREADY_EXISTS) until
  the learner ends that stream SILENT_S after its last answer, then is
  served."""
  channel = run.channel()
  stub = seed_rl_pb2_grpc.SeedRLStub(channel)
  rng = np.random.default_rng(4)
  hello = hello_request(1, obs_spec=CARTPOLE_OBS, act_spec=CARTPOLE_ACT)
  session = stub.Hello(hello, timeout=30, metadata=AUTH).session_id
  squatter = _Stream(channel, session, AUTH)
  try:
    squatter.send(_encode(_plain_cartpole_batch(np.arange(4, 8), rng)))
    next(squatter.call)
    answered = time.monotonic()
    actor = run.start_actor(1)
    ended = {}

    def watch():
      try:
        next(squatter.call)
      except grpc.RpcError as e:
        ended["error"], ended["at"] = e, time.monotonic()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    run.wait_served(1, "real actor 1 served after the squatter's end")
    watcher.join(5)
    error = ended["error"]
    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED, error
    assert _reason(error) == protocol.REASON_SILENT
    assert SILENT_S <= ended["at"] - answered < SILENT_S + 3, (
      ended["at"] - answered
    )
    assert any(
      "ending the Step stream of actor 1" in s for s in run.learner.lines
    )
    if ended["at"] - answered > 4:  # the actor was up before the deadline
      assert "ALREADY_EXISTS" in actor.output, actor.output[-2000:]
  finally:
    squatter.close()
    channel.close()


def _encode(batch) -> bytes:
  return codec.encode_step_batch(batch).SerializeToString()


def test_a_restarting_actor_is_served_within_5s_with_100_idle_calls(run):
  """100 idle calls with the token, kept open (each reopened when the
  learner ends it), and token-less calls opened over and over; a real
  client connects and is served within 5 s, and actor 0, SIGKILLed and
  restarted, is served again. No idle call is refused for want of room:
  they only end at the learner's first-message timeout."""
  rng = np.random.default_rng(5)
  channels = [run.channel() for _ in range(10)]
  stop = threading.Event()
  lock = threading.Lock()
  stats = {"open": 0, "tokenless": [], "ended": []}

  def call_of(channel, method):
    if method == "Hello":
      return channel.stream_unary(
        "/seed_rl.SeedRL/Hello",
        request_serializer=bytes,
        response_deserializer=bytes,
      )
    return channel.stream_stream(
      "/seed_rl.SeedRL/Step",
      request_serializer=bytes,
      response_deserializer=bytes,
    )

  def keep_open(i):
    """A tokened idle Hello, reopened whenever the learner ends it."""
    hello = call_of(channels[i % len(channels)], "Hello")
    while not stop.is_set():
      done = threading.Event()
      future = hello.future(_never(done), metadata=AUTH)
      with lock:
        stats["open"] += 1
      try:
        future.result()
      except grpc.RpcError as e:
        with lock:
          stats["open"] -= 1
          stats["ended"].append(e.code())
        if e.code() != grpc.StatusCode.CANCELLED:
          stop.wait(0.1)  # refused (no room): reopen it a little later
      finally:
        done.set()

  def without_token(i):
    """Token-less Hellos and Steps, each refused at once."""
    call = call_of(channels[i % len(channels)], ("Hello", "Step")[i % 2])
    while not stop.is_set():
      done = threading.Event()
      try:
        result = call(_never(done))
        if i % 2:
          next(result)
      except grpc.RpcError as e:
        with lock:
          stats["tokenless"].append(e.code())
      finally:
        done.set()
      stop.wait(0.2)

  threads = [
    threading.Thread(target=keep_open, args=(i,), daemon=True)
    for i in range(100)
  ] + [
    threading.Thread(target=without_token, args=(i,), daemon=True)
    for i in range(20)
  ]
  for t in threads:
    t.start()
  try:
    launch.wait_for(
      lambda: len(stats["tokenless"]) >= 100, [run.learner], "refusals", 30
    )
    time.sleep(1.0)
    with lock:
      opened = stats["open"]
    # A real client for a free actor id, as a restarted actor would be.
    start = time.monotonic()
    client = run.client(2, connect_timeout_s=30)
    client.step(_plain_cartpole_batch(np.arange(8, 12), rng))
    took = time.monotonic() - start
    client.close()
    print(f"client served {took:.3f} s after its Hello amid 100 idle calls")
    assert took < 5.0, took
    with lock:
      # Token-less calls are refused at once, holding nothing; no tokened
      # idle call was refused for want of room: all 100 were open.
      assert set(stats["tokenless"]) == {grpc.StatusCode.UNAUTHENTICATED}, (
        stats["tokenless"][-5:]
      )
      assert opened == 100 and stats["open"] >= 95, stats["ended"][-5:]
    # A real actor process, killed and restarted while the calls are open.
    victim = run.actors[0]
    victim.popen.kill()
    victim.wait(30)
    run.start_actor(0)
    run.wait_served(0, "restarted actor 0 served amid idle calls", timeout=60)
    assert stats["open"] >= 95
    with lock:
      ended = list(stats["ended"])
    assert set(ended) <= {grpc.StatusCode.CANCELLED}, ended
  finally:
    stop.set()
    while _IDLE:
      _IDLE.pop().set()
    for t in threads:
      t.join(15)
    for channel in channels:
      channel.close()


def _hello(stub, actor_id) -> str:
  """A session for `actor_id`, retrying while its last stream is released."""
  request = hello_request(
    actor_id, obs_spec=CARTPOLE_OBS, act_spec=CARTPOLE_ACT
  )
  deadline = time.monotonic() + 10
  while True:
    try:
      return stub.Hello(request, timeout=30, metadata=AUTH).session_id
    except grpc.RpcError as e:
      if e.code() != grpc.StatusCode.ALREADY_EXISTS:
        raise
      assert time.monotonic() < deadline, e
      time.sleep(0.05)


def test_oversize_messages_on_valid_sessions_keep_the_learner_rss(run):
  """20 valid sessions each send a 48 MiB message at once (far beyond the
  server's receive limit: refused from the length prefix), then 20 messages
  just under that limit but over the session's bound (refused by the
  session); the learner's RSS stays within +200 MiB and actor 0 trains on."""
  pid = run.learner.popen.pid
  ids = list(range(2, 22))
  channels = [
    run.channel(**{"grpc.max_send_message_length": 64 << 20}) for _ in ids
  ]
  streams = []
  peak = {"rss": 0.0}
  sampling = threading.Event()

  def sample():
    while not sampling.is_set():
      peak["rss"] = max(peak["rss"], _rss_mib(pid))
      time.sleep(0.01)

  before = 0.0
  for _ in range(20):
    before = max(before, _rss_mib(pid))
    time.sleep(0.05)
  sampler = threading.Thread(target=sample, daemon=True)
  sampler.start()
  limit = protocol.max_request_bytes(CARTPOLE_OBS, CARTPOLE_ACT, NUM_ACTORS * K)
  codes = []
  try:
    for size, code in (
      (48 << 20, grpc.StatusCode.RESOURCE_EXHAUSTED),
      (limit - 16, grpc.StatusCode.INVALID_ARGUMENT),
    ):
      payload = b"\x0a" * size
      streams = []
      for actor_id, channel in zip(ids, channels):
        session = _hello(seed_rl_pb2_grpc.SeedRLStub(channel), actor_id)
        streams.append(_Stream(channel, session, AUTH))
      for stream in streams:
        stream.send(payload)
      for stream in streams:
        with pytest.raises(grpc.RpcError) as info:
          next(stream.call)
        codes.append((code, info.value.code(), info.value.details()))
      for stream in streams:
        stream.close()
      del payload
    time.sleep(2.0)
  finally:
    sampling.set()
    sampler.join(5)
    for channel in channels:
      channel.close()
  grown = peak["rss"] - before
  print(f"learner RSS {before:.0f} MiB, peak {peak['rss']:.0f} MiB")
  assert grown < 200, (before, peak["rss"])
  for expected, code, details in codes:
    assert code == expected, details
  run.wait_served(0, "actor 0 served after the oversize messages", 60)
