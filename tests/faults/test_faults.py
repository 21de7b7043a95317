"""Fault injection with real processes and real sockets: `learner_main` and
`actors.main` on localhost, CartPole V-trace, killed and attacked while they
train. What each fault must leave: the run goes on, and nothing bad reaches
the weights or the checkpoints.

Covered elsewhere (not repeated here): an env that crashes or hangs costs
only its actor, which the launcher restarts (test_end_to_end); a learner
killed or moved resumes and its actors reconnect (test_restart); refusals
per field, hijacks and idle Hellos at the protocol level (test_grpc_protocol,
test_fuzz_protocol, test_security); unreadable checkpoints and failed saves
at the unit level (test_checkpoints).

The shared TLS run (fast cases) runs by default; the cases that start their
own learners are marked `faults_slow` (`pytest -m faults_slow`).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import threading
import time

import grpc
import numpy as np
import pytest

from seed_rl.common.specs import StepBatch
from seed_rl.grpc import security
from seed_rl.grpc import server as server_lib
from seed_rl.grpc.client import ActorClient, AuthenticationError
from seed_rl.grpc.client import LearnerUnavailableError, ProtocolError

from tests.support import launch

pytestmark = pytest.mark.timeout(300)

ROOT = launch.ROOT
BASE_ENV = launch.env_without(
  security.TOKEN_ENV, "SEED_RL_FAULT_CHECKPOINT_DELAY_S"
)
GIN = os.path.join(ROOT, "seed_rl", "classic", "gin", "vtrace.gin")
ENVS_PER_ACTOR = 4
OBS, ACT = launch.CARTPOLE_OBS, launch.CARTPOLE_ACT
_RESUMED = re.compile(r"resumed from (\S+): learner step (\d+)")


def start_learner(port, logdir, num_actors, bindings=(), extra=(), env=None):
  args = [
    "seed_rl.learner_main",
    "--env=classic",
    "--agent=vtrace",
    f"--num_actors={num_actors}",
    f"--envs_per_actor={ENVS_PER_ACTOR}",
    f"--server_address=localhost:{port}",
    f"--logdir={logdir}",
    "--gin_bindings=LearnerConfig.log_every_s = 0.5",
    "--gin_bindings=LearnerConfig.target_return = None",
  ]
  args += [f"--gin_bindings={b}" for b in bindings]
  return launch.Proc(args + list(extra), env or BASE_ENV)


def start_actor(port, actor_id, stats, extra=(), env=None):
  return launch.Proc(
    [
      "seed_rl.actors.main",
      "--env=classic",
      f"--actor_id={actor_id}",
      f"--num_envs={ENVS_PER_ACTOR}",
      f"--server_address=localhost:{port}",
      f"--gin_config={GIN}",
      "--connect_timeout_s=120",
      "--log_interval_s=0.5",
      f"--stats_file={stats}",
      *extra,
    ],
    env or BASE_ENV,
  )


def served(stats_path):
  """Env steps an actor process stepped with the learner's actions."""
  try:
    with open(stats_path) as f:
      return json.load(f)["env_steps"]
  except (FileNotFoundError, json.JSONDecodeError):
    return 0


def batch(actor_id, rng, **overrides):
  """A valid CartPole StepBatch of actor `actor_id`, fields overridden."""
  k = ENVS_PER_ACTOR
  fields = dict(
    env_ids=np.arange(actor_id * k, (actor_id + 1) * k, dtype=np.int32),
    run_ids=np.full(k, 12345, np.int64),
    reward=np.ones(k, np.float32),
    terminated=np.zeros(k, bool),
    truncated=np.zeros(k, bool),
    observation=rng.uniform(-0.05, 0.05, (k, 4)).astype(np.float32),
    final_observation=np.zeros((0, 4), np.float32),
    episode_return=np.zeros(0, np.float32),
    episode_length=np.zeros(0, np.int32),
  )
  fields.update(overrides)
  return StepBatch(**fields)


# --------------------------------------------------------- the TLS run ---


class TlsRun:
  """A learner with TLS and a token for 3 actors; actors 0 and 1 run,
  actor 2's env ids stay free for the attacks."""

  NUM_ACTORS = 3

  def __init__(self, tmp):
    self.tmp = tmp
    self.certs = tmp / "certs"
    subprocess.run(
      ["bash", os.path.join(ROOT, "scripts", "make_certs.sh")]
      + [str(self.certs), "learner.test"],
      check=True,
      capture_output=True,
    )
    self.token = (self.certs / "token").read_text().strip()
    self.env = dict(BASE_ENV, **{security.TOKEN_ENV: self.token})
    self.port = launch.free_port()
    self.address = f"localhost:{self.port}"
    self.learner = start_learner(
      self.port,
      tmp / "run",
      self.NUM_ACTORS,
      extra=[
        f"--tls_cert={self.certs / 'learner.pem'}",
        f"--tls_key={self.certs / 'learner.key'}",
      ],
      env=self.env,
    )
    self.stats = {}
    self.actors = {}
    self.restarts = 0
    for i in (0, 1):
      self.start_actor(i)

  def start_actor(self, actor_id):
    self.restarts += 1
    self.stats[actor_id] = self.tmp / f"actor{actor_id}-{self.restarts}.json"
    self.actors[actor_id] = start_actor(
      self.port,
      actor_id,
      self.stats[actor_id],
      [f"--tls_ca={self.certs / 'ca.pem'}"],
      self.env,
    )

  @property
  def procs(self):
    return [self.learner] + list(self.actors.values())

  def served(self, actor_id):
    return served(self.stats[actor_id])

  def client(self, actor_id, ca=True, token=True, **kw):
    return ActorClient(
      self.address,
      actor_id,
      ENVS_PER_ACTOR,
      OBS,
      ACT,
      security=security.ClientSecurity(
        str(self.certs / "ca.pem") if ca else None,
        (self.token if token is True else token) or None,
      ),
      **kw,
    )

  def training(self, what, more_steps=3):
    """Waits until the learner made `more_steps` steps and both actors were
    served again."""
    step = launch.last_step(self.learner)
    before = {i: self.served(i) for i in self.actors}
    launch.wait_for(
      lambda: (
        launch.last_step(self.learner) >= step + more_steps
        and all(self.served(i) > before[i] for i in self.actors)
      ),
      self.procs,
      what,
    )

  def close(self):
    for p in self.procs:
      p.kill()


@pytest.fixture(scope="module")
def tls_run(tmp_path_factory):
  if shutil.which("openssl") is None:
    pytest.skip("openssl is needed to make test certificates")
  run = TlsRun(tmp_path_factory.mktemp("faults"))
  try:
    run.training("first learner steps", more_steps=2)
    yield run
  finally:
    run.close()


def test_sigkill_of_an_actor_mid_unroll(tls_run):
  """The run goes on with the other actor; the dead actor's unfinished
  unrolls are discarded when its restarted process (new run ids) shows up,
  never completed with the new process's steps and trained on."""
  run = tls_run
  victim = run.actors.pop(1)
  victim.popen.send_signal(signal.SIGKILL)
  assert victim.wait(30) == -signal.SIGKILL
  # Every env of a stepping actor holds part of its next unroll (at least
  # the step shared with the previous one): this kill is mid-unroll.
  run.training("learner steps with actor 0 alone", more_steps=3)
  mark = len(run.learner.lines)
  run.start_actor(1)
  run.training("both actors after the restart")
  dropped = [
    s for s in run.learner.lines[mark:] if "discarded" in s and "partial" in s
  ]
  assert dropped and "envs 4..7 restarted" in dropped[0], dropped
  assert "discarded 4 partial unrolls" in dropped[0], dropped


def test_idle_clients_filling_the_worker_pool_do_not_stop_an_actor(tls_run):
  """As many idle calls as the learner has worker threads (learner_main
  sizes them 2 x actors + 16), each holding a thread while it waits for a
  message that never comes, and unauthenticated ones too; a restarted actor
  still connects: the idle calls are cancelled and it retries meanwhile."""
  run = tls_run
  workers = 2 * run.NUM_ACTORS + 16
  victim = run.actors.pop(1)
  victim.popen.send_signal(signal.SIGKILL)
  victim.wait(30)
  never = threading.Event()

  def nothing():
    never.wait()
    return
    yield  # a generator that sends no message

  creds = grpc.ssl_channel_credentials((run.certs / "ca.pem").read_bytes())
  token = (("authorization", f"Bearer {run.token}"),)
  channels, idle, refused = [], [], []
  try:
    for i in range(2 * workers):
      channel = grpc.secure_channel(run.address, creds)
      channels.append(channel)
      hello = channel.stream_unary(
        "/seed_rl.SeedRL/Hello",
        request_serializer=bytes,
        response_deserializer=bytes,
      )
      if i < workers:  # no token: refused without waiting for a message
        refused.append(hello.future(nothing()))
      else:
        if i == workers:
          assert all(
            f.exception(timeout=30).code() == grpc.StatusCode.UNAUTHENTICATED
            for f in refused
          )
        idle.append(hello.future(nothing(), metadata=token))
    time.sleep(1.0)
    mark = len(run.learner.lines)
    run.start_actor(1)
    run.training("restarted actor served despite idle clients")
    codes = [f.exception().code() for f in idle]
    # Actor 0's stream holds a worker (and the killed actor's, until its
    # connection is seen closed): the last idle calls found the pool full.
    cancelled = codes.count(grpc.StatusCode.CANCELLED)
    assert cancelled >= workers - 2, codes
    assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == (
      workers - cancelled
    ), codes
    assert any(
      "RPC(s) that sent no message within" in s
      for s in run.learner.lines[mark:]
    )
  finally:
    never.set()
    for channel in channels:
      channel.close()


def _refused(client, bad_batch):
  """The learner's refusal of one bad batch from `client`."""
  with pytest.raises(ProtocolError) as info:
    client.step(bad_batch)
  return str(info.value)


def test_bad_clients_while_an_actor_keeps_training(tls_run):
  """Against one live run: clients without a token, with a wrong token and
  without TLS are refused; a Hello for a live actor's id is refused; a huge
  reward, a NaN observation and forged episode statistics are refused
  naming the field; the real actors are served throughout and the learner's
  losses stay finite."""
  run = tls_run
  mark = len(run.learner.lines)
  with pytest.raises(AuthenticationError, match="missing token"):
    run.client(2, token=None, connect_timeout_s=10).connect()
  with pytest.raises(AuthenticationError, match="wrong token"):
    run.client(2, token="w" * 64, connect_timeout_s=10).connect()
  with pytest.raises(LearnerUnavailableError):  # plaintext to a TLS port
    run.client(2, ca=False, connect_timeout_s=3).connect()
  with pytest.raises(LearnerUnavailableError, match="ALREADY_EXISTS"):
    run.client(0, connect_timeout_s=3).connect()  # actor 0 is live
  run.training("actors served during the refused connections", 1)

  rng = np.random.default_rng(0)
  attacker = run.client(2, connect_timeout_s=30)
  try:
    np.testing.assert_array_less(-1, attacker.step(batch(2, rng)))
    bad = [
      ("reward", dict(reward=np.array([0, 3e38, 0, 0], np.float32))),
      ("observation", dict(observation=np.full((4, 4), np.nan, np.float32))),
      (
        "episode_return",
        dict(
          episode_return=np.full(100, 1e9, np.float32),
          episode_length=np.ones(100, np.int32),
        ),
      ),
    ]
    for field, overrides in bad:
      message = _refused(attacker, batch(2, rng, **overrides))
      assert f": {field}" in message, message
  finally:
    attacker.close()

  run.training("actors served after the attacks", more_steps=3)
  lines = [s for s in run.learner.lines[mark:] if launch.STEP_LINE.match(s)]
  # After "episodes": entropy, ev, loss, gnorm, ... of the interval.
  numbers = [
    float(part.rsplit(" ", 1)[1])
    for s in lines
    for part in s.strip().split(" | ")[5:]
  ]
  assert numbers and all(math.isfinite(v) for v in numbers), lines[-3:]
  for actor in run.actors.values():
    assert actor.alive(), actor.output[-3000:]


def test_idle_rpcs_are_cancelled_in_process():
  """The server's first-message watch on its own (a fast, in-process check
  of what the shared run shows): idle calls are cancelled after the timeout,
  the pool frees up, and a Hello that ends without a message is refused."""
  from tests.support.servers import ArgmaxHandler, make_batch
  from tests.support.servers import ACT as T_ACT, OBS as T_OBS

  srv = server_lib.LearnerServer(
    "localhost:0",
    T_OBS,
    T_ACT,
    8,
    ArgmaxHandler(),
    max_workers=3,
    first_message_timeout_s=0.5,
  )
  port = srv.start()
  never = threading.Event()

  def nothing():
    never.wait()
    return
    yield

  channel = grpc.insecure_channel(f"localhost:{port}")
  try:
    hello = channel.stream_unary(
      "/seed_rl.SeedRL/Hello",
      request_serializer=bytes,
      response_deserializer=bytes,
    )
    idle = [hello.future(nothing()) for _ in range(3)]
    empty = hello.future(iter(()))  # ends without a message
    client = ActorClient(
      f"localhost:{port}", 0, 4, T_OBS, T_ACT, connect_timeout_s=20
    )
    start = time.monotonic()
    b = make_batch(0, np.random.default_rng(0))
    np.testing.assert_array_equal(client.step(b), b.observation.argmax(1))
    assert time.monotonic() - start < 10
    client.close()
    # Each idle call either held a worker and was cancelled, or (when the
    # empty Hello took a worker first) found the pool full at once.
    codes = [f.exception().code() for f in idle]
    cancelled = codes.count(grpc.StatusCode.CANCELLED)
    assert cancelled >= 2, codes
    assert set(codes) <= {
      grpc.StatusCode.CANCELLED,
      grpc.StatusCode.RESOURCE_EXHAUSTED,
    }, codes
    assert srv.idle_rpcs_cancelled == cancelled
    error = empty.exception()
    assert error.code() in (
      grpc.StatusCode.INVALID_ARGUMENT,
      grpc.StatusCode.RESOURCE_EXHAUSTED,  # the pool was still full
    )
  finally:
    never.set()
    channel.close()
    srv.stop(0)


# ------------------------------------------ cases with their own learners ---


def _indexed(ckpt_dir):
  """Checkpoint numbers listed by the `checkpoint` index, oldest first."""
  try:
    text = (ckpt_dir / "checkpoint").read_text()
  except FileNotFoundError:
    return []
  numbers = []
  for line in text.splitlines():
    if line.startswith("all_model_checkpoint_paths"):
      numbers.append(int(re.search(r"ckpt-(\d+)\"", line).group(1)))
  return numbers


def _written(ckpt_dir):
  """Checkpoint numbers whose files are written (indexed or not)."""
  return sorted(
    int(m.group(1))
    for n in os.listdir(ckpt_dir)
    if (m := re.fullmatch(r"ckpt-(\d+)\.index", n))
  )


def _temporaries(ckpt_dir):
  return [n for n in os.listdir(ckpt_dir) if "_temp" in n or ".tmp" in n]


@pytest.mark.faults_slow
def test_learner_killed_during_a_checkpoint_resumes_from_newest_readable(
  tmp_path,
):
  """SIGKILL while a save is between writing its files and indexing them;
  the latest indexed checkpoint is then truncated (a disk that lost its
  tail) and a killed TF write's temporary directory is left behind. The
  restarted learner skips the unreadable checkpoint with a warning, resumes
  from the one before, removes the temporaries and trains on."""
  port = launch.free_port()
  logdir = tmp_path / "run"
  ckpt_dir = logdir / "checkpoints"
  slow = dict(BASE_ENV, SEED_RL_FAULT_CHECKPOINT_DELAY_S="1.5")
  bindings = ["LearnerConfig.checkpoint_every_s = 0.2"]
  first = start_learner(port, logdir, 1, bindings, env=slow)
  actor = start_actor(port, 0, tmp_path / "actor.json")
  procs = [first, actor]
  try:
    launch.wait_for(lambda: len(_indexed(ckpt_dir)) >= 3, procs, "three saves")
    launch.wait_for(
      lambda: _written(ckpt_dir)[-1] > _indexed(ckpt_dir)[-1],
      procs,
      "a save between writing and indexing",
      timeout=30,
    )
    first.popen.send_signal(signal.SIGKILL)
    assert first.wait(30) == -signal.SIGKILL
    indexed = _indexed(ckpt_dir)
    assert _written(ckpt_dir)[-1] > indexed[-1]  # killed during that save
    newest, previous = indexed[-1], indexed[-2]
    data = [
      n for n in os.listdir(ckpt_dir) if n.startswith(f"ckpt-{newest}.data-")
    ]
    with open(ckpt_dir / data[0], "r+b") as f:
      f.truncate(5)
    leftover = ckpt_dir / f"ckpt-{newest + 7}_temp"
    leftover.mkdir()
    (leftover / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x")

    second = start_learner(port, logdir, 1, bindings)
    procs = [second, actor]
    launch.wait_for(
      lambda: any(_RESUMED.search(s) for s in second.lines),
      procs,
      "restarted learner resumes",
    )
    out = second.output
    assert re.search(rf"ckpt-{newest} cannot be read", out), out[-3000:]
    resumed = _RESUMED.search(out)
    assert resumed.group(1).endswith(f"ckpt-{previous}"), resumed.group(0)
    step = int(resumed.group(2))
    assert step > 0
    assert not leftover.exists()
    launch.wait_for(
      lambda: launch.last_step(second) >= step + 3, procs, "training on"
    )
    assert min(launch.learner_steps(second)) >= step
    assert not _temporaries(ckpt_dir)
  finally:
    for p in procs + [first]:
      p.kill()


@pytest.mark.faults_slow
def test_full_disk_during_a_save_keeps_training(tmp_path):
  """The checkpoint directory is a tmpfs too small for one checkpoint:
  every save fails (ENOSPC) with a warning, training goes on, the next
  interval retries, the final save fails too and the learner still exits
  cleanly; no temporary files are left on the full disk."""
  if os.geteuid() != 0:
    pytest.skip("needs root to mount a tiny tmpfs")
  logdir = tmp_path / "run"
  ckpt_dir = logdir / "checkpoints"
  ckpt_dir.mkdir(parents=True)
  out = subprocess.run(
    ["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(ckpt_dir)],
    capture_output=True,
    text=True,
  )
  if out.returncode != 0:
    pytest.skip(f"mounting a tmpfs is not permitted: {out.stderr.strip()}")
  port = launch.free_port()
  learner = start_learner(
    port, logdir, 1, ["LearnerConfig.checkpoint_every_s = 0.5"]
  )
  actor = start_actor(port, 0, tmp_path / "actor.json")
  try:
    failed = re.compile(r"checkpoint save to \S+ failed \((.*)\); training")
    failures = lambda: [m for s in learner.lines if (m := failed.search(s))]
    launch.wait_for(lambda: failures(), [learner, actor], "a failed save")
    assert "No space left" in failures()[0].group(1), failures()[0].group(0)
    step = launch.last_step(learner)
    launch.wait_for(
      lambda: len(failures()) >= 3 and launch.last_step(learner) >= step + 3,
      [learner, actor],
      "retries while training goes on",
    )
    learner.popen.send_signal(signal.SIGINT)
    assert learner.wait(120) == 0, learner.output[-3000:]
    assert actor.wait(60) == 0, actor.output[-3000:]
    with open(logdir / "result.json") as f:
      assert json.load(f)["learner_steps"] >= step + 3
    assert not _temporaries(ckpt_dir), os.listdir(ckpt_dir)
    assert not (ckpt_dir / "checkpoint").exists()
  finally:
    learner.kill()
    actor.kill()
    subprocess.run(["umount", "-l", str(ckpt_dir)], capture_output=True)
