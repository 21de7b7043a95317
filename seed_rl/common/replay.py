"""Replay on the learner: sum tree, prioritized/uniform replay, rate limiter.

`PrioritizedReplay` implements proportional prioritization (Schaul et al.
2016, "Prioritized Experience Replay"): item i is drawn with probability
P(i) = p_i^alpha / sum_k p_k^alpha and corrected with the importance weight
w_i = (N P(i))^-beta / max_j w_j. A sum tree makes insert, priority update
and sampling O(log N) per item (SEED RL drew from all N priorities with
tf.random.categorical, O(N) per sample).

An item is whatever the agent stores as one unit: a transition (DQN) or a
whole sequence (R2D2). Capacity counts items; storage is preallocated on the
first insert from the items' dtypes and shapes, so memory is bounded by
capacity and uint8 observations stay uint8.

Threads: the inference thread inserts while the training thread samples and
updates priorities; one lock guards each replay.

`state_dict` / `load_state_dict` copy a replay and its limiter's counters
out and back as NumPy arrays only (no pickle), for checkpoints that keep
replay (seed_rl.common.replay_state).

`RateLimiter` holds samples-per-insert near a target (Reverb's
SampleToInsertRatio, drlbox's replay_ratio) so training neither starves nor
overfits a small replay.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Dict, Mapping, Optional, Tuple

import numpy as np

# Floor applied to stored priorities so that every item stays reachable: an
# item at priority 0 could never be sampled and so never be re-prioritized.
MIN_PRIORITY = 1e-6


def sub_state(
  state: Mapping[str, np.ndarray], name: str
) -> Dict[str, np.ndarray]:
  """The entries of a state dict under `name/`, that prefix removed."""
  prefix = name + "/"
  return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}


class SumTree:
  """A binary tree over `capacity` non-negative leaves storing subtree sums.

  Leaves are padded to a power of two (padding leaves hold 0). Every operation
  is vectorised over a batch of indices and costs O(log capacity) per index.
  Sums are float64 and parents are recomputed from their children (never
  updated by deltas), so rounding does not accumulate.
  """

  def __init__(self, capacity: int):
    if capacity < 1:
      raise ValueError(f"SumTree capacity must be >= 1, got {capacity}")
    self.capacity = int(capacity)
    self._leaf_offset = 1 << max(0, (self.capacity - 1).bit_length())
    self._depth = self._leaf_offset.bit_length() - 1
    self._tree = np.zeros(2 * self._leaf_offset, np.float64)

  @property
  def nbytes(self) -> int:
    return int(self._tree.nbytes)

  def _check_indices(self, indices: np.ndarray, what: str) -> np.ndarray:
    indices = np.asarray(indices)
    if indices.ndim != 1 or not np.issubdtype(indices.dtype, np.integer):
      raise ValueError(
        f"SumTree.{what}: indices must be a 1-D integer array, "
        f"got shape {list(indices.shape)} dtype {indices.dtype}"
      )
    if indices.size and (indices.min() < 0 or indices.max() >= self.capacity):
      raise ValueError(
        f"SumTree.{what}: indices must lie in [0, "
        f"{self.capacity}), got range [{indices.min()}, "
        f"{indices.max()}]"
      )
    return indices.astype(np.int64)

  def set(self, indices: np.ndarray, priorities: np.ndarray) -> None:
    """Sets leaves `indices` [n] to `priorities` [n]; a repeated index keeps
    its last value."""
    indices = self._check_indices(indices, "set")
    priorities = np.asarray(priorities, np.float64)
    if priorities.shape != indices.shape:
      raise ValueError(
        f"SumTree.set: priorities shape {list(priorities.shape)}"
        f" != indices shape {list(indices.shape)}"
      )
    bad = ~(np.isfinite(priorities) & (priorities >= 0))
    if np.any(bad):
      raise ValueError(
        "SumTree.set: priorities must be finite and >= 0, got "
        f"{priorities[bad][:5]}"
      )
    if indices.size == 0:
      return
    # Last occurrence wins: unique() on the reversed array keeps first hits.
    rev_unique, rev_pos = np.unique(indices[::-1], return_index=True)
    nodes = rev_unique + self._leaf_offset
    self._tree[nodes] = priorities[::-1][rev_pos]
    for _ in range(self._depth):
      nodes = np.unique(nodes >> 1)
      self._tree[nodes] = self._tree[2 * nodes] + self._tree[2 * nodes + 1]

  def get(self, indices: np.ndarray) -> np.ndarray:
    """Returns the leaf values float64 [n] at `indices` [n]."""
    indices = self._check_indices(indices, "get")
    return self._tree[indices + self._leaf_offset]

  def total(self) -> float:
    return float(self._tree[1])

  def find_prefix_sum(self, values: np.ndarray) -> np.ndarray:
    """For each value in [0, total()], the leaf i with prefix(i) <= value <
    prefix(i+1), where prefix(i) = sum of leaves before i.

    Leaves with value 0 are never returned; value == total() (or rounding past
    it) maps to the last positive leaf. Returns int64 [n].
    """
    values = np.array(values, np.float64, copy=True, ndmin=1)
    total = self.total()
    if total <= 0.0:
      raise ValueError("SumTree.find_prefix_sum: the tree is empty (total 0)")
    if values.ndim != 1:
      raise ValueError(
        "SumTree.find_prefix_sum: values must be 1-D, got "
        f"shape {list(values.shape)}"
      )
    if values.size and (
      not np.all(np.isfinite(values))
      or values.min() < 0
      or values.max() > total * (1.0 + 1e-9)
    ):
      raise ValueError(
        "SumTree.find_prefix_sum: values must lie in "
        f"[0, total={total}], got range [{values.min()}, "
        f"{values.max()}]"
      )
    nodes = np.ones(values.shape, np.int64)
    for _ in range(self._depth):
      left = 2 * nodes
      left_sum = self._tree[left]
      # Descend right only into a positive subtree, so zero leaves (padding,
      # unwritten slots) are unreachable even when rounding overshoots.
      go_left = (values < left_sum) | (self._tree[left + 1] <= 0.0)
      values = np.where(go_left, values, values - left_sum)
      nodes = np.where(go_left, left, left + 1)
    return nodes - self._leaf_offset


class PrioritizedReplay:
  """A FIFO replay of at most `capacity` items with proportional priorities.

  Sampled `indices` are opaque int64 keys `generation * capacity + slot`: a
  slot's generation grows each time it is overwritten, so `update_priorities`
  recognises (and ignores) keys whose item was evicted after sampling.

  Args:
    capacity: maximum number of stored items (transitions or sequences).
    priority_exponent: alpha, P(i) proportional to p_i^alpha.
    importance_sampling_exponent: beta of the IS weights (anneal it to 1 with
      `set_importance_sampling_exponent`).
    uniform: sample uniformly (priorities ignored, weights all ones).
    seed: seed of the sampling generator.
  """

  def __init__(
    self,
    capacity: int,
    priority_exponent: float = 0.9,
    importance_sampling_exponent: float = 0.6,
    uniform: bool = False,
    seed: Optional[int] = None,
  ):
    if capacity < 1:
      raise ValueError(f"replay capacity must be >= 1 item, got {capacity}")
    if priority_exponent < 0:
      raise ValueError(
        f"priority_exponent (alpha) must be >= 0, got {priority_exponent}"
      )
    self._capacity = int(capacity)
    self._alpha = float(priority_exponent)
    self.set_importance_sampling_exponent(importance_sampling_exponent)
    self._uniform = bool(uniform)
    self._rng = np.random.default_rng(seed)
    self._lock = threading.Lock()
    self._tree = None if self._uniform else SumTree(self._capacity)
    self._generation = np.zeros(self._capacity, np.int64)
    self._storage: Optional[Dict[str, np.ndarray]] = None
    self._next = 0  # slot of the next insert (the oldest item once full)
    self._size = 0
    self._max_priority = 1.0  # raw, before the exponent

  @property
  def capacity(self) -> int:
    return self._capacity

  @property
  def uniform(self) -> bool:
    return self._uniform

  @property
  def priority_exponent(self) -> float:
    return self._alpha

  @property
  def importance_sampling_exponent(self) -> float:
    return self._beta

  @property
  def max_priority(self) -> float:
    """Largest raw priority seen; new items without a priority get it."""
    return self._max_priority

  @property
  def nbytes(self) -> int:
    """Bytes held by the preallocated storage, priorities and generations."""
    with self._lock:
      total = int(self._generation.nbytes)
      if self._tree is not None:
        total += self._tree.nbytes
      if self._storage is not None:
        total += sum(int(a.nbytes) for a in self._storage.values())
      return total

  def __len__(self) -> int:
    return self._size

  def set_importance_sampling_exponent(self, beta: float) -> None:
    if not 0.0 <= beta <= 1.0:
      raise ValueError(
        f"importance_sampling_exponent (beta) must lie in [0, 1], got {beta}"
      )
    self._beta = float(beta)

  def _check_priorities(self, priorities, n: int, what: str) -> np.ndarray:
    priorities = np.asarray(priorities, np.float64)
    if priorities.shape != (n,):
      raise ValueError(
        f"{what}: priorities shape {list(priorities.shape)}, expected [{n}]"
      )
    bad = ~(np.isfinite(priorities) & (priorities >= 0))
    if np.any(bad):
      raise ValueError(
        f"{what}: priorities must be finite and >= 0, got {priorities[bad][:5]}"
      )
    return priorities

  def _allocate(self, items: Mapping[str, np.ndarray]) -> None:
    self._storage = {
      key: np.empty((self._capacity,) + value.shape[1:], value.dtype)
      for key, value in items.items()
    }

  def insert(
    self,
    items: Mapping[str, np.ndarray],
    priorities: Optional[np.ndarray] = None,
  ) -> None:
    """Stores a batch of items, evicting the oldest when full.

    Args:
      items: name -> array [B, ...]; the same names, dtypes and trailing
        shapes on every call (fixed by the first call).
      priorities: raw priorities [B] (the exponent is applied here), or None
        for the largest priority seen so far (1.0 while none was seen).
    """
    if not items:
      raise ValueError("PrioritizedReplay.insert: items is empty")
    items = {key: np.asarray(value) for key, value in items.items()}
    sizes = {
      key: (value.shape[0] if value.ndim else None)
      for key, value in items.items()
    }
    batch = next(iter(sizes.values()))
    if batch is None or any(s != batch for s in sizes.values()):
      raise ValueError(
        "PrioritizedReplay.insert: every item needs the same "
        f"leading batch dimension, got {sizes}"
      )
    if priorities is not None:
      priorities = self._check_priorities(
        priorities, batch, "PrioritizedReplay.insert"
      )
    if batch == 0:
      return
    with self._lock:
      if self._storage is None:
        self._allocate(items)
      assert self._storage is not None  # set by _allocate
      if set(items) != set(self._storage):
        raise ValueError(
          "PrioritizedReplay.insert: item names "
          f"{sorted(items)} differ from the stored "
          f"{sorted(self._storage)}"
        )
      for key, value in items.items():
        stored = self._storage[key]
        if value.dtype != stored.dtype or value.shape[1:] != stored.shape[1:]:
          raise ValueError(
            f"PrioritizedReplay.insert: item '{key}' is {value.dtype.name} "
            f"{list(value.shape[1:])} per element, the replay stores "
            f"{stored.dtype.name} {list(stored.shape[1:])}"
          )
      # More items than capacity: only the newest `capacity` survive anyway.
      keep = slice(max(0, batch - self._capacity), batch)
      n = keep.stop - keep.start
      slots = (self._next + np.arange(n)) % self._capacity
      for key, value in items.items():
        self._storage[key][slots] = value[keep]
      self._generation[slots] += 1
      if self._tree is not None:
        if priorities is None:
          raw = np.full(n, self._max_priority)
        else:
          raw = np.maximum(priorities[keep], MIN_PRIORITY)
          self._max_priority = max(self._max_priority, float(raw.max()))
        self._tree.set(slots, raw**self._alpha)
      self._next = int((self._next + n) % self._capacity)
      self._size = min(self._size + n, self._capacity)

  def sample(
    self, batch_size: int
  ) -> Tuple[np.ndarray, Dict[str, np.ndarray], np.ndarray]:
    """Draws `batch_size` items with replacement.

    Prioritized draws are stratified: one draw from each of `batch_size`
    equal segments of the total priority mass (Schaul et al. 2016, App. B.2.1).

    Returns:
      indices: int64 [b] keys for `update_priorities`.
      items: name -> [b, ...] copies of the stored items.
      weights: float32 [b] importance weights (N P(i))^-beta divided by their
        maximum in this batch; all ones when uniform.
    """
    if batch_size < 1:
      raise ValueError(f"sample batch_size must be >= 1, got {batch_size}")
    with self._lock:
      if self._size == 0:
        raise ValueError("PrioritizedReplay.sample: the replay is empty")
      if self._tree is None:
        slots = self._rng.integers(0, self._size, batch_size)
        weights = np.ones(batch_size, np.float32)
      else:
        total = self._tree.total()
        segment = total / batch_size
        strata = np.arange(batch_size) + self._rng.random(batch_size)
        values = strata * segment
        slots = self._tree.find_prefix_sum(np.minimum(values, total))
        probs = self._tree.get(slots) / total
        raw_weights = (self._size * probs) ** (-self._beta)
        weights = (raw_weights / raw_weights.max()).astype(np.float32)
      # Storage is allocated by the first non-empty insert, so _size > 0
      # (checked above) means it exists.
      assert self._storage is not None
      items = {key: value[slots] for key, value in self._storage.items()}
      keys = self._generation[slots] * self._capacity + slots
    return keys.astype(np.int64), items, weights

  def update_priorities(
    self, indices: np.ndarray, priorities: np.ndarray
  ) -> None:
    """Sets raw priorities [n] (exponent applied here) for keys [n] from
    `sample`; keys whose slot was overwritten since are ignored. A no-op
    (after validation) for a uniform replay."""
    indices = np.asarray(indices)
    if indices.ndim != 1 or not np.issubdtype(indices.dtype, np.integer):
      raise ValueError(
        "update_priorities: indices must be the 1-D int64 keys "
        f"returned by sample, got shape {list(indices.shape)} "
        f"dtype {indices.dtype}"
      )
    priorities = self._check_priorities(
      priorities, indices.shape[0], "update_priorities"
    )
    if np.any(indices < 0):
      raise ValueError(
        "update_priorities: keys must be >= 0 (as returned by sample)"
      )
    if self._tree is None or indices.size == 0:
      return
    slots = indices % self._capacity
    generations = indices // self._capacity
    with self._lock:
      fresh = self._generation[slots] == generations
      if not np.any(fresh):
        return
      raw = np.maximum(priorities[fresh], MIN_PRIORITY)
      self._max_priority = max(self._max_priority, float(raw.max()))
      self._tree.set(slots[fresh], raw**self._alpha)

  # --------------------------------------------------------- persistence --
  def state_dict(self) -> Dict[str, np.ndarray]:
    """Copies of what the replay holds (name -> array, NumPy types only):
    its items, priorities (after the exponent), slot generations, write
    position, largest priority and the sampler's generator state."""
    with self._lock:
      n = self._size
      state = {
        "capacity": np.asarray(self._capacity, np.int64),
        "uniform": np.asarray(self._uniform),
        "priority_exponent": np.asarray(self._alpha, np.float64),
        "next": np.asarray(self._next, np.int64),
        "size": np.asarray(n, np.int64),
        "max_priority": np.asarray(self._max_priority, np.float64),
        "generation": self._generation.copy(),
        "rng": np.asarray(json.dumps(self._rng.bit_generator.state)),
      }
      if self._tree is not None:
        state["priorities"] = self._tree.get(np.arange(n))
      for key, value in (self._storage or {}).items():
        state[f"item/{key}"] = value[:n].copy()
      return state

  def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
    """Replaces the contents with a `state_dict` of a replay of the same
    capacity, exponent and kind; ValueError naming what differs."""
    saved = {
      "capacity": int(state["capacity"]),
      "uniform": bool(state["uniform"]),
      "priority_exponent": float(state["priority_exponent"]),
    }
    ours = {
      "capacity": self._capacity,
      "uniform": self._uniform,
      "priority_exponent": self._alpha,
    }
    if saved != ours:
      raise ValueError(
        f"the saved replay was {saved}, this run's replay is {ours}"
      )
    n = int(state["size"])
    items = {
      key[len("item/") :]: np.asarray(value)
      for key, value in state.items()
      if key.startswith("item/")
    }
    bad = {k: v.shape for k, v in items.items() if v.shape[:1] != (n,)}
    if not 0 <= n <= self._capacity or bad or (n and not items):
      raise ValueError(
        f"the saved replay holds {n} items but its arrays are {bad or 'none'}"
      )
    with self._lock:
      self._storage = None
      if items:
        self._allocate(items)
        assert self._storage is not None
        for key, value in items.items():
          self._storage[key][:n] = value
      self._generation[:] = np.asarray(state["generation"], np.int64)
      if self._tree is not None:
        self._tree = SumTree(self._capacity)
        self._tree.set(np.arange(n), np.asarray(state["priorities"]))
      self._next = int(state["next"])
      self._size = n
      self._max_priority = float(state["max_priority"])
      self._rng.bit_generator.state = json.loads(str(state["rng"]))


class RateLimiter:
  """Keeps samples per insert near `samples_per_insert` once warmed up.

  With I items inserted and S sampled, the slack is
  D = (I - min_size_to_sample) * samples_per_insert - S (how many samples
  training is behind its target). Sampling n waits until
  I >= min_size_to_sample and D - n >= -error_buffer; inserting waits while
  D > error_buffer (training lags, so acting pauses). Inserts never wait
  before the warm-up ends (D <= 0 there). Deadlock-free whenever a sample
  batch is at most 2 * error_buffer (checked).

  Counters are updated when `await_insert` / `await_sample` are called, so
  insert into the replay BEFORE `await_insert(n)`: the sampler then never
  counts items the replay does not hold yet, and the inserter still blocks
  until training catches up.

  Args:
    samples_per_insert: target sampled items per inserted item (> 0).
    min_size_to_sample: inserted items needed before the first sample.
    error_buffer: allowed deviation of D from 0, in sampled items.
  """

  def __init__(
    self,
    samples_per_insert: float,
    min_size_to_sample: int,
    error_buffer: float,
  ):
    if not samples_per_insert > 0:
      raise ValueError(
        "samples_per_insert must be > 0 (else training never "
        f"samples), got {samples_per_insert}"
      )
    if min_size_to_sample < 1:
      raise ValueError(
        "min_size_to_sample must be >= 1 (sampling an empty "
        f"replay fails), got {min_size_to_sample}"
      )
    if not error_buffer > 0:
      raise ValueError(f"error_buffer must be > 0, got {error_buffer}")
    self.samples_per_insert = float(samples_per_insert)
    self.min_size_to_sample = int(min_size_to_sample)
    self.error_buffer = float(error_buffer)
    self._cond = threading.Condition()
    self._inserted = 0
    self._sampled = 0
    self._stopped = False
    self._insert_wait_s = 0.0
    self._sample_wait_s = 0.0

  def _slack(self) -> float:
    return (
      self._inserted - self.min_size_to_sample
    ) * self.samples_per_insert - self._sampled

  def _can_sample(self, n: int) -> bool:
    return (
      self._inserted >= self.min_size_to_sample
      and self._slack() - n >= -self.error_buffer
    )

  def await_insert(self, n: int, timeout: Optional[float] = None) -> bool:
    """Counts n inserted items, then waits while training lags.

    Returns True when done, False if stopped or `timeout` seconds passed.
    """
    if n < 0:
      raise ValueError(f"await_insert: n must be >= 0, got {n}")
    start = time.monotonic()
    with self._cond:
      self._inserted += n
      self._cond.notify_all()
      ok = self._cond.wait_for(
        lambda: self._stopped or self._slack() <= self.error_buffer, timeout
      )
      self._insert_wait_s += time.monotonic() - start
      return bool(ok) and not self._stopped

  def await_sample(self, n: int, timeout: Optional[float] = None) -> bool:
    """Waits until n items may be sampled, then counts them.

    Returns True when the caller may sample, False if stopped or `timeout`
    seconds passed (nothing is counted then).
    """
    if n < 1:
      raise ValueError(f"await_sample: n must be >= 1, got {n}")
    if n > 2 * self.error_buffer:
      raise ValueError(
        f"await_sample({n}): a sample batch larger than 2 * error_buffer "
        f"({2 * self.error_buffer:g}) can deadlock with await_insert; "
        "raise error_buffer or lower the batch size"
      )
    start = time.monotonic()
    with self._cond:
      ok = self._cond.wait_for(
        lambda: self._stopped or self._can_sample(n), timeout
      )
      self._sample_wait_s += time.monotonic() - start
      if not ok or self._stopped:
        return False
      self._sampled += n
      self._cond.notify_all()
      return True

  def stop(self) -> None:
    """Unblocks every waiter; later calls return False at once."""
    with self._cond:
      self._stopped = True
      self._cond.notify_all()

  @property
  def stopped(self) -> bool:
    return self._stopped

  @property
  def num_inserted(self) -> int:
    return self._inserted

  @property
  def num_sampled(self) -> int:
    return self._sampled

  def state_dict(self) -> Dict[str, np.ndarray]:
    """The counts of inserted and sampled items."""
    with self._cond:
      return {
        "inserted": np.asarray(self._inserted, np.int64),
        "sampled": np.asarray(self._sampled, np.int64),
      }

  def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
    """Resumes the counts of a `state_dict`, so the ratio goes on where it
    was (a replay restored with it needs no new warm-up)."""
    with self._cond:
      self._inserted = int(state["inserted"])
      self._sampled = int(state["sampled"])
      self._cond.notify_all()

  def metrics(self) -> Dict[str, float]:
    with self._cond:
      return {
        "replay/inserted": float(self._inserted),
        "replay/sampled": float(self._sampled),
        "replay/samples_per_insert": (
          self._sampled / max(1, self._inserted - self.min_size_to_sample)
        ),
        "replay/insert_wait_s": self._insert_wait_s,
        "replay/sample_wait_s": self._sample_wait_s,
      }
