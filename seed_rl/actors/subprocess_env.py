"""K gymnasium envs split over W worker processes that talk via shared memory.

BatchPPO's ExternalProcess idea without per-step pickling: worker w owns a
contiguous slice of the K envs. Observations, rewards, end flags, final
observations and actions live in one `multiprocessing.shared_memory` block
that the parent and all workers map; per step only a one-byte command and a
one-byte ack cross each worker's pipe. Envs step outside the parent's GIL, so
this pays off when one env step costs more than a pipe round trip (~50 us),
e.g. MuJoCo.

Workers start with 'forkserver' by default (the actor may already run gRPC
threads, which makes plain fork unsafe), ignore SIGINT (the parent owns
shutdown), die with the parent (pipe EOF, plus PR_SET_PDEATHSIG on Linux) and
are killed on `close()`. An exception in any env closes all workers and raises
`EnvWorkerError` in the parent with the env index and the worker's traceback.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.connection
import signal
import sys
import time
import traceback
import weakref
from multiprocessing import shared_memory
from typing import Dict, List, Optional, Tuple, cast

import numpy as np

from seed_rl.actors.batched_env import BatchedEnv
from seed_rl.actors.batched_env import StepResult
from seed_rl.actors.env_runner import EnvFn
from seed_rl.actors.env_runner import EnvRunner
from seed_rl.actors.env_runner import check_same_specs
from seed_rl.actors.env_runner import specs_equal
from seed_rl.common.specs import ArraySpec

_STEP = b"S"
_RESET = b"R"
_CLOSE = b"C"
_OK = b"K"
_ERROR = b"E"
_ALIGN = 64  # cache-line alignment keeps workers' writes from sharing lines
_JOIN_TIMEOUT_S = 2.0


class EnvWorkerError(RuntimeError):
  """An env raised (or its worker died) inside a subprocess worker."""


def _spec_to_json(spec: ArraySpec) -> dict:
  bounds = {
    f: None if getattr(spec, f) is None else getattr(spec, f).tolist()
    for f in ("minimum", "maximum")
  }
  return dict(
    shape=list(spec.shape),
    dtype=spec.dtype,
    name=spec.name,
    num_values=spec.num_values,
    **bounds,
  )


def _spec_from_json(data: dict) -> ArraySpec:
  return ArraySpec(**data)


def _layout(
  num_envs: int, observation_spec: ArraySpec, action_spec: ArraySpec
) -> Tuple[Dict[str, tuple], int]:
  """name -> (offset, shape, dtype) of each shared array, and total bytes."""
  k = num_envs
  arrays = [
    ("observation", (k,) + observation_spec.shape, observation_spec.dtype),
    (
      "final_observation",
      (k,) + observation_spec.shape,
      observation_spec.dtype,
    ),
    ("reward", (k,), "float32"),
    ("terminated", (k,), "bool"),
    ("truncated", (k,), "bool"),
    ("action", (k,) + action_spec.shape, action_spec.dtype),
  ]
  layout, offset = {}, 0
  for name, shape, dtype in arrays:
    layout[name] = (offset, shape, dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    offset += -(-max(nbytes, 1) // _ALIGN) * _ALIGN
  return layout, offset


def _views(buffer, layout) -> Dict[str, np.ndarray]:
  return {
    name: np.ndarray(shape, dtype, buffer=buffer, offset=offset)
    for name, (offset, shape, dtype) in layout.items()
  }


def _die_with_parent() -> None:
  if sys.platform.startswith("linux"):
    try:
      import ctypes

      pr_set_pdeathsig = 1
      ctypes.CDLL(None, use_errno=True).prctl(
        pr_set_pdeathsig, int(signal.SIGKILL)
      )
    except (OSError, AttributeError):
      pass  # best effort: pipe EOF still ends the worker


def _error_message(index: int, phase: str) -> bytes:
  payload = {
    "index": index,
    "phase": phase,
    "traceback": traceback.format_exc(),
  }
  return _ERROR + json.dumps(payload).encode()


def _worker_main(
  conn, env_fn: EnvFn, first_index: int, seeds: List[int], num_envs: int
) -> None:
  """Worker process: owns envs [first_index, first_index + len(seeds))."""
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  _die_with_parent()
  runners: List[EnvRunner] = []
  shm = None
  index = first_index
  try:
    try:
      # `index` names the failing env in the error below.
      for index in range(first_index, first_index + len(seeds)):  # noqa: B007
        runners.append(EnvRunner(env_fn()))
      check_same_specs(runners, f"worker envs {first_index}+")
    except Exception:
      conn.send_bytes(_error_message(index, "construction"))
      return
    conn.send_bytes(
      _OK
      + json.dumps(
        {
          "observation_spec": _spec_to_json(runners[0].observation_spec),
          "action_spec": _spec_to_json(runners[0].action_spec),
        }
      ).encode()
    )
    try:
      message = conn.recv_bytes()
    except EOFError:
      return
    if message == _CLOSE:  # another worker failed to build its envs
      return
    shm_name = message.decode()
    layout, _ = _layout(
      num_envs, runners[0].observation_spec, runners[0].action_spec
    )
    shm = shared_memory.SharedMemory(name=shm_name)
    _serve(conn, runners, _views(shm.buf, layout), first_index, seeds)
  finally:
    for runner in runners:
      try:
        runner.close()
      except Exception:
        pass
    if shm is not None:
      shm.close()  # _serve returned, so no array views are left


def _serve(
  conn,
  runners: List[EnvRunner],
  arrays: Dict[str, np.ndarray],
  first_index: int,
  seeds: List[int],
) -> None:
  """Answers parent commands until close or pipe EOF."""
  lo, hi = first_index, first_index + len(runners)
  obs, final = arrays["observation"], arrays["final_observation"]
  reward, action = arrays["reward"], arrays["action"]
  terminated, truncated = arrays["terminated"], arrays["truncated"]
  seeded = False
  index = lo
  while True:
    try:
      command = conn.recv_bytes()
    except EOFError:
      return  # the parent is gone
    if command == _CLOSE:
      return
    phase = {_STEP: "step", _RESET: "reset"}.get(command, "command")
    try:
      if command == _STEP:
        for index in range(lo, hi):
          (
            obs[index],
            reward[index],
            terminated[index],
            truncated[index],
            final_obs,
          ) = runners[index - lo].step(action[index])
          if final_obs is not None:
            final[index] = final_obs
      elif command == _RESET:
        for index in range(lo, hi):
          obs[index] = runners[index - lo].reset(
            None if seeded else seeds[index - lo]
          )
        seeded = True
      else:
        raise ValueError(f"unknown worker command {command!r}")
    except Exception:
      conn.send_bytes(_error_message(index, phase))
      continue
    conn.send_bytes(_OK)


def _check_worker_args(
  num_envs: int, num_workers: Optional[int], start_method: str
) -> int:
  """Raises ValueError for arguments no worker pool fits; returns the number
  of workers (default min(num_envs, cpu count))."""
  if num_envs < 1:
    raise ValueError(f"num_envs must be >= 1, got {num_envs}")
  if num_workers is None:
    num_workers = min(num_envs, multiprocessing.cpu_count())
  if not 1 <= num_workers <= num_envs:
    raise ValueError(
      f"num_workers must be in [1, num_envs={num_envs}], got {num_workers}"
    )
  methods = multiprocessing.get_all_start_methods()
  if start_method not in methods:
    raise ValueError(
      f"start_method {start_method!r} is not available here; "
      f"choose one of {methods} ('fork' is unsafe once the "
      "actor runs gRPC threads)"
    )
  return num_workers


class SubprocessBatchedEnv(BatchedEnv):
  """`num_envs` envs from `env_fn` (picklable) in `num_workers` processes.

  Env i is seeded with `seed + i`. `num_workers` defaults to
  min(num_envs, cpu count); worker w owns a contiguous slice of envs.
  """

  def __init__(
    self,
    env_fn: EnvFn,
    num_envs: int,
    seed: int,
    num_workers: Optional[int] = None,
    start_method: str = "forkserver",
  ):
    num_workers = _check_worker_args(num_envs, num_workers, start_method)
    self.num_envs = num_envs
    context = multiprocessing.get_context(start_method)
    self._slices = np.array_split(np.arange(num_envs), num_workers)
    self._conns: List[multiprocessing.connection.Connection] = []
    self._processes: List[multiprocessing.process.BaseProcess] = []
    self._shm: Optional[shared_memory.SharedMemory] = None
    self._arrays: Optional[Dict[str, np.ndarray]] = None
    self._finalizer = weakref.finalize(
      self, _shutdown, self._conns, self._processes, []
    )
    try:
      self._start_workers(context, env_fn, seed)
      self.observation_spec, self.action_spec = self._receive_specs()
      self._share_memory()
    except BaseException:
      self.close()
      raise

  def _start_workers(self, context, env_fn: EnvFn, seed: int) -> None:
    """Starts one worker per slice of envs; env i gets seed + i."""
    for worker, env_indices in enumerate(self._slices):
      parent_conn, child_conn = context.Pipe()
      # typeshed types get_context(str) as BaseContext, which lacks
      # Process; every concrete start-method context has it.
      process = context.Process(  # type: ignore[attr-defined]
        target=_worker_main,
        name=f"seed_rl-env-worker-{worker}",
        args=(
          child_conn,
          env_fn,
          int(env_indices[0]),
          [seed + int(i) for i in env_indices],
          self.num_envs,
        ),
        daemon=True,
      )
      process.start()
      child_conn.close()  # so that the worker's death reads as EOF here
      self._conns.append(parent_conn)
      self._processes.append(process)

  def _receive_specs(self) -> Tuple[ArraySpec, ArraySpec]:
    """The (observation, action) specs every worker reports; they must be
    the same in all workers."""
    specs = []
    for worker in range(len(self._slices)):
      data = json.loads(self._receive(worker))
      specs.append(
        (
          _spec_from_json(data["observation_spec"]),
          _spec_from_json(data["action_spec"]),
        )
      )
    observation_spec, action_spec = specs[0]
    for worker, (obs_spec, act_spec) in enumerate(specs):
      if not (
        specs_equal(obs_spec, observation_spec)
        and specs_equal(act_spec, action_spec)
      ):
        raise ValueError(
          f"SubprocessBatchedEnv: envs of worker {worker} have specs "
          f"{obs_spec}, {act_spec}; worker 0 has {specs[0]}"
        )
    return observation_spec, action_spec

  def _share_memory(self) -> None:
    """Creates the shared block for the specs and sends its name to every
    worker (which maps it); the finalizer frees it."""
    layout, size = _layout(
      self.num_envs, self.observation_spec, self.action_spec
    )
    self._shm = shared_memory.SharedMemory(create=True, size=size)
    self._finalizer.detach()
    self._finalizer = weakref.finalize(
      self, _shutdown, self._conns, self._processes, [self._shm]
    )
    self._arrays = _views(self._shm.buf, layout)
    for conn in self._conns:
      conn.send_bytes(self._shm.name.encode())

  @property
  def worker_pids(self) -> List[int]:
    # Processes are kept only once started, and a started one has a pid.
    return [cast(int, p.pid) for p in self._processes]

  def _receive(self, worker: int) -> bytes:
    """Next ack payload of `worker`; closes everything and raises on error."""
    envs = self._slices[worker]
    try:
      message = self._conns[worker].recv_bytes()
    except (EOFError, OSError):
      process = self._processes[worker]
      process.join(_JOIN_TIMEOUT_S)
      self.close()
      raise EnvWorkerError(
        f"env worker {worker} (envs {envs[0]}..{envs[-1]}) died with exit "
        f"code {process.exitcode}"
      ) from None
    if message[:1] == _ERROR:
      error = json.loads(message[1:])
      self.close()
      raise EnvWorkerError(
        f"env {error['index']} (worker {worker}) raised during "
        f"{error['phase']}:\n"
        f"{error['traceback']}"
      )
    return message[1:]

  def _command(self, command: bytes) -> None:
    if self._arrays is None:
      raise RuntimeError("SubprocessBatchedEnv is closed")
    for worker, conn in enumerate(self._conns):
      try:
        conn.send_bytes(command)
      except OSError:
        self._receive(worker)  # reports the dead worker
    for worker in range(len(self._conns)):
      self._receive(worker)

  def reset(self) -> np.ndarray:
    if self._arrays is None:
      raise RuntimeError("SubprocessBatchedEnv is closed")
    self._command(_RESET)
    return self._arrays["observation"].copy()

  def step(self, actions: np.ndarray) -> StepResult:
    if self._arrays is None:
      raise RuntimeError("SubprocessBatchedEnv is closed")
    self._arrays["action"][...] = actions
    self._command(_STEP)
    arrays = self._arrays
    truncated = arrays["truncated"].copy()
    return StepResult(
      observation=arrays["observation"].copy(),
      reward=arrays["reward"].copy(),
      terminated=arrays["terminated"].copy(),
      truncated=truncated,
      final_observation=arrays["final_observation"][truncated],
    )

  def close(self) -> None:
    self._arrays = None  # views must go before the shared block can close
    self._finalizer()


def _shutdown(conns, processes, shms) -> None:
  """Stops workers (politely, then by force) and frees the shared block."""
  for conn in conns:
    try:
      conn.send_bytes(_CLOSE)
    except OSError:
      pass
  deadline = time.monotonic() + _JOIN_TIMEOUT_S
  for process in processes:
    process.join(max(0.0, deadline - time.monotonic()))
  for process in processes:
    if process.is_alive():
      process.kill()
      process.join(_JOIN_TIMEOUT_S)
  for conn in conns:
    conn.close()
  for shm in shms:
    try:
      shm.close()
    except BufferError:
      pass  # a view outlived the env (garbage collection order); unlink anyway
    shm.unlink()
