"""Tests for seed_rl.common.replay: sum tree, replay, rate limiter."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from seed_rl.common import replay as replay_lib

# Chi-square critical values at p = 0.001 (a correct sampler fails one run in
# a thousand; the seeds are fixed, so the outcome is deterministic anyway).
_CHI2_CRIT_P001 = {4: 18.467, 6: 22.458, 9: 27.877}


def _chi_square(counts, expected_probs):
  expected = expected_probs * counts.sum()
  return float(np.sum((counts - expected) ** 2 / expected))


# ----------------------------------------------------------------- SumTree ---


def test_sum_tree_total_and_overwrites():
  tree = replay_lib.SumTree(5)  # padded to 8 leaves
  tree.set(np.arange(5), np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
  assert tree.total() == pytest.approx(15.0)
  tree.set(np.array([1, 3]), np.array([0.5, 10.0]))
  assert tree.total() == pytest.approx(1 + 0.5 + 3 + 10 + 5)
  np.testing.assert_allclose(tree.get(np.arange(5)), [1, 0.5, 3, 10, 5])
  # A repeated index keeps its last value.
  tree.set(np.array([2, 2, 2]), np.array([7.0, 8.0, 9.0]))
  assert tree.get(np.array([2]))[0] == 9.0
  assert tree.total() == pytest.approx(1 + 0.5 + 9 + 10 + 5)


def test_sum_tree_many_random_updates_match_numpy():
  rng = np.random.default_rng(0)
  capacity = 37
  tree = replay_lib.SumTree(capacity)
  mirror = np.zeros(capacity)
  for _ in range(200):
    idx = rng.integers(0, capacity, rng.integers(1, 10))
    pri = rng.random(idx.size) * 10
    tree.set(idx, pri)
    for i, p in zip(idx, pri):
      mirror[i] = p
  assert tree.total() == pytest.approx(mirror.sum(), rel=1e-12)
  np.testing.assert_allclose(tree.get(np.arange(capacity)), mirror)
  # Prefix-sum search agrees with a linear scan at random points.
  cumsum = np.cumsum(mirror)
  values = rng.random(500) * mirror.sum()
  expected = np.searchsorted(cumsum, values, side="right")
  np.testing.assert_array_equal(tree.find_prefix_sum(values), expected)


def test_find_prefix_sum_edge_cases():
  tree = replay_lib.SumTree(6)
  tree.set(np.arange(6), np.array([0.0, 2.0, 0.0, 0.0, 3.0, 0.0]))
  # 0 skips leading zero leaves; exact boundaries go to the next leaf;
  # total maps to the last positive leaf, never to padding or zero leaves.
  got = tree.find_prefix_sum(np.array([0.0, 1.999, 2.0, 4.9, 5.0]))
  np.testing.assert_array_equal(got, [1, 1, 4, 4, 4])
  with pytest.raises(ValueError, match="lie in"):
    tree.find_prefix_sum(np.array([-0.1]))
  with pytest.raises(ValueError, match="lie in"):
    tree.find_prefix_sum(np.array([5.5]))
  with pytest.raises(ValueError, match="empty"):
    replay_lib.SumTree(4).find_prefix_sum(np.array([0.0]))
  single = replay_lib.SumTree(1)
  single.set(np.array([0]), np.array([2.0]))
  np.testing.assert_array_equal(single.find_prefix_sum([0.0, 2.0]), [0, 0])


def test_sum_tree_rejects_bad_input():
  tree = replay_lib.SumTree(4)
  with pytest.raises(ValueError, match=r"\[0, 4\)"):
    tree.set(np.array([4]), np.array([1.0]))
  with pytest.raises(ValueError, match="finite and >= 0"):
    tree.set(np.array([0]), np.array([-1.0]))
  with pytest.raises(ValueError, match="finite and >= 0"):
    tree.set(np.array([0]), np.array([np.nan]))
  with pytest.raises(ValueError, match="integer"):
    tree.get(np.array([0.5]))


def test_sum_tree_samples_in_proportion_to_priorities():
  """Chi-square goodness of fit, 10 leaves, 200k uniform draws, p = 0.001."""
  rng = np.random.default_rng(1)
  priorities = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], np.float64)
  tree = replay_lib.SumTree(10)
  tree.set(np.arange(10), priorities)
  draws = tree.find_prefix_sum(rng.random(200_000) * tree.total())
  counts = np.bincount(draws, minlength=10)
  stat = _chi_square(counts, priorities / priorities.sum())
  assert stat < _CHI2_CRIT_P001[9], stat


# ------------------------------------------------------- PrioritizedReplay ---


def _items(start, n, obs_shape=(3,)):
  ids = np.arange(start, start + n)
  return {
    "id": ids.astype(np.int64),
    "obs": np.broadcast_to(
      ids.reshape((n,) + (1,) * len(obs_shape)), (n,) + obs_shape
    ).astype(np.uint8),
  }


def test_replay_samples_in_proportion_to_priority_power_alpha():
  alpha = 0.7
  replay = replay_lib.PrioritizedReplay(7, priority_exponent=alpha, seed=2)
  priorities = np.array([0.5, 1.0, 2.0, 4.0, 8.0, 0.1, 3.0])
  replay.insert(_items(0, 7), priorities)
  counts = np.zeros(7)
  for _ in range(2_000):
    _, items, _ = replay.sample(32)
    counts += np.bincount(items["id"], minlength=7)
  probs = priorities**alpha / np.sum(priorities**alpha)
  stat = _chi_square(counts, probs)
  assert stat < _CHI2_CRIT_P001[6], stat


def test_importance_weights_match_numpy_formula():
  alpha, beta = 0.6, 0.4
  replay = replay_lib.PrioritizedReplay(
    16, priority_exponent=alpha, importance_sampling_exponent=beta, seed=3
  )
  priorities = np.linspace(0.1, 5.0, 10)
  replay.insert(_items(0, 10), priorities)
  keys, items, weights = replay.sample(64)
  assert keys.dtype == np.int64 and weights.dtype == np.float32
  n = len(replay)
  scaled = priorities**alpha
  w_ref = []
  for item_id in items["id"]:
    prob = scaled[item_id] / scaled.sum()
    w_ref.append((n * prob) ** (-beta))
  w_ref = np.array(w_ref) / max(w_ref)
  np.testing.assert_allclose(weights, w_ref, rtol=1e-6)
  replay.set_importance_sampling_exponent(1.0)
  _, items, weights = replay.sample(64)
  w_ref = np.array([1.0 / (n * scaled[i] / scaled.sum()) for i in items["id"]])
  np.testing.assert_allclose(weights, w_ref / w_ref.max(), rtol=1e-6)


def test_uniform_replay_weights_and_frequencies():
  replay = replay_lib.PrioritizedReplay(5, uniform=True, seed=4)
  replay.insert(_items(0, 5), np.array([1.0, 100.0, 1.0, 1.0, 1.0]))
  counts = np.zeros(5)
  for _ in range(1_000):
    keys, items, weights = replay.sample(50)
    np.testing.assert_array_equal(weights, np.ones(50, np.float32))
    counts += np.bincount(items["id"], minlength=5)
  replay.update_priorities(keys, np.full(50, 7.0))  # accepted, no effect
  assert _chi_square(counts, np.full(5, 0.2)) < _CHI2_CRIT_P001[4]


def test_fifo_eviction_and_contents():
  replay = replay_lib.PrioritizedReplay(4, seed=5)
  replay.insert(_items(0, 3))
  replay.insert(_items(3, 3))  # evicts ids 0 and 1
  assert len(replay) == 4
  _, items, _ = replay.sample(400)
  assert set(items["id"].tolist()) == {2, 3, 4, 5}
  np.testing.assert_array_equal(items["obs"][:, 0], items["id"])
  assert items["obs"].dtype == np.uint8
  # A batch larger than capacity keeps its newest items.
  replay.insert(_items(100, 9))
  _, items, _ = replay.sample(400)
  assert set(items["id"].tolist()) == {105, 106, 107, 108}


def test_memory_is_bounded_under_continuous_insertion():
  capacity = 50
  replay = replay_lib.PrioritizedReplay(capacity, seed=6)
  replay.insert(_items(0, 7, obs_shape=(84, 84)))
  nbytes = replay.nbytes
  per_item = 8 + 84 * 84  # int64 id + uint8 frame
  assert nbytes >= capacity * per_item
  assert nbytes <= capacity * per_item + 64 * capacity  # tree + generations
  for step in range(1, 100):
    replay.insert(_items(7 * step, 7, obs_shape=(84, 84)))
    assert replay.nbytes == nbytes
    assert len(replay) == min(7 * (step + 1), capacity)
  keys, _, _ = replay.sample(8)
  replay.update_priorities(keys, np.ones(8))
  assert replay.nbytes == nbytes


def test_new_items_get_max_priority():
  replay = replay_lib.PrioritizedReplay(4, priority_exponent=1.0, seed=7)
  replay.insert(_items(0, 1))  # empty replay: priority 1.0
  replay.insert(_items(1, 1), np.array([5.0]))
  replay.insert(_items(2, 1))  # gets max so far, 5.0
  assert replay.max_priority == 5.0
  tree = replay._tree
  np.testing.assert_allclose(tree.get(np.arange(3)), [1.0, 5.0, 5.0])


def test_update_priorities_changes_sampling_and_ignores_stale_keys():
  replay = replay_lib.PrioritizedReplay(3, priority_exponent=1.0, seed=8)
  replay.insert(_items(0, 3))
  keys, items, _ = replay.sample(30)
  key_of = {int(i): int(k) for i, k in zip(items["id"], keys)}
  assert set(key_of) == {0, 1, 2}
  # Raise item 0, lower items 1 and 2: the tree follows.
  replay.update_priorities(
    np.array([key_of[0], key_of[1], key_of[2]]), np.array([9.0, 0.5, 0.5])
  )
  tree = replay._tree
  np.testing.assert_allclose(tree.get(np.arange(3)), [9.0, 0.5, 0.5])
  # Overwrite slot of item 0 (FIFO: the oldest), then send a stale update.
  replay.insert(_items(10, 1), np.array([2.0]))
  replay.update_priorities(
    np.array([key_of[0], key_of[1]]), np.array([100.0, 3.0])
  )
  np.testing.assert_allclose(tree.get(np.arange(3)), [2.0, 3.0, 0.5])
  assert replay.max_priority == 9.0  # the stale 100 was not counted


def test_insert_validation():
  replay = replay_lib.PrioritizedReplay(4)
  with pytest.raises(ValueError, match="same leading batch"):
    replay.insert({"a": np.zeros(3), "b": np.zeros(2)})
  replay.insert({"a": np.zeros((2, 3), np.float32)})
  with pytest.raises(ValueError, match="item 'a' is float64"):
    replay.insert({"a": np.zeros((2, 3), np.float64)})
  with pytest.raises(ValueError, match="item names"):
    replay.insert({"b": np.zeros((2, 3), np.float32)})
  with pytest.raises(ValueError, match="finite and >= 0"):
    replay.insert({"a": np.zeros((1, 3), np.float32)}, np.array([-1.0]))
  with pytest.raises(ValueError, match="empty"):
    replay_lib.PrioritizedReplay(4).sample(2)
  with pytest.raises(ValueError, match="beta"):
    replay.set_importance_sampling_exponent(1.5)


def test_concurrent_insert_and_sample():
  replay = replay_lib.PrioritizedReplay(64, seed=9)
  replay.insert(_items(0, 8))
  errors = []

  def inserter():
    try:
      for i in range(300):
        replay.insert(_items(8 + 4 * i, 4), np.full(4, 1.0 + i % 3))
    except Exception as e:
      errors.append(e)

  thread = threading.Thread(target=inserter)
  thread.start()
  for _ in range(300):
    keys, items, weights = replay.sample(16)
    np.testing.assert_array_equal(items["obs"][:, 0], items["id"] % 256)
    assert np.all(np.isfinite(weights))
    replay.update_priorities(keys, np.full(16, 2.0))
  thread.join(timeout=10)
  assert not thread.is_alive() and not errors
  assert len(replay) == 64


# ------------------------------------------------------------- RateLimiter ---


def _run_in_thread(fn):
  result = {}
  thread = threading.Thread(target=lambda: result.setdefault("v", fn()))
  thread.daemon = True
  thread.start()
  return thread, result


def test_rate_limiter_sample_waits_for_min_size_then_ratio():
  limiter = replay_lib.RateLimiter(
    samples_per_insert=2.0, min_size_to_sample=10, error_buffer=4.0
  )
  assert limiter.await_insert(9)
  assert not limiter.await_sample(4, timeout=0.05)  # 9 < min size
  thread, result = _run_in_thread(lambda: limiter.await_sample(4, timeout=5))
  time.sleep(0.05)
  assert thread.is_alive()
  assert limiter.await_insert(1)  # reaches min size -> sample proceeds
  thread.join(timeout=5)
  assert result["v"] is True and limiter.num_sampled == 4
  # Slack is now 0 - 4 = -4 = -error_buffer: one more sample must wait.
  assert not limiter.await_sample(1, timeout=0.05)
  assert limiter.await_insert(1)  # +2 expected samples
  assert limiter.await_sample(2, timeout=1)


def test_rate_limiter_insert_blocks_while_training_lags():
  limiter = replay_lib.RateLimiter(
    samples_per_insert=1.0, min_size_to_sample=2, error_buffer=3.0
  )
  assert limiter.await_insert(2, timeout=1)  # warm-up never blocks
  assert limiter.await_insert(3, timeout=1)  # slack 3 <= buffer
  assert not limiter.await_insert(1, timeout=0.05)  # slack 4 > 3
  thread, result = _run_in_thread(lambda: limiter.await_insert(1, timeout=5))
  time.sleep(0.05)
  assert thread.is_alive()
  assert limiter.await_sample(3, timeout=1)  # slack 5 - 3 = 2 <= buffer
  thread.join(timeout=5)
  assert result["v"] is True
  metrics = limiter.metrics()
  assert metrics["replay/inserted"] == 7 and metrics["replay/sampled"] == 3


def test_rate_limiter_stop_unblocks_everyone():
  limiter = replay_lib.RateLimiter(
    1.0, min_size_to_sample=100, error_buffer=1.0
  )
  sampler, sample_result = _run_in_thread(lambda: limiter.await_sample(1))
  limiter2 = replay_lib.RateLimiter(1.0, min_size_to_sample=1, error_buffer=1.0)
  inserter, insert_result = _run_in_thread(lambda: limiter2.await_insert(10))
  time.sleep(0.05)
  assert sampler.is_alive() and inserter.is_alive()
  limiter.stop()
  limiter2.stop()
  sampler.join(timeout=5)
  inserter.join(timeout=5)
  assert not sampler.is_alive() and not inserter.is_alive()
  assert sample_result["v"] is False and insert_result["v"] is False
  assert limiter.await_sample(1) is False  # after stop: immediate


def test_rate_limiter_holds_ratio_with_two_threads():
  spi, batch = 4.0, 8
  limiter = replay_lib.RateLimiter(
    spi, min_size_to_sample=16, error_buffer=batch
  )
  done = threading.Event()

  def act():
    while not done.is_set():
      if not limiter.await_insert(2, timeout=5):
        return

  thread = threading.Thread(target=act, daemon=True)
  thread.start()
  for _ in range(200):
    assert limiter.await_sample(batch, timeout=5)
  done.set()
  limiter.stop()
  thread.join(timeout=5)
  expected = (limiter.num_inserted - 16) * spi
  assert abs(limiter.num_sampled - expected) <= batch + 2 * spi


def test_rate_limiter_validation():
  with pytest.raises(ValueError, match="samples_per_insert"):
    replay_lib.RateLimiter(0.0, 1, 1.0)
  with pytest.raises(ValueError, match="min_size_to_sample"):
    replay_lib.RateLimiter(1.0, 0, 1.0)
  with pytest.raises(ValueError, match="deadlock"):
    replay_lib.RateLimiter(1.0, 1, 2.0).await_sample(5)
