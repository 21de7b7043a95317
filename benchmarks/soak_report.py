"""What benchmarks/soak.py reports: progress per window, and each learner
process's RSS, threads, fds and memory owners after its warm-up."""

from __future__ import annotations

from typing import Any, Dict, List

# The learner's memory scalars read back per learner process.
MEMORY_TAGS = (
  "system/rss_mib",
  "system/malloc_in_use_mib",
  "system/malloc_free_mib",
  "system/python_blocks",
)


def windows(samples, window: float, warmup: float):
  """[seconds, learner steps, env steps] once per window, and whether the
  steps rose in every window from the last one before warm-up on."""
  steps_over_time = []
  next_t = 0.0
  for s in samples:
    if s["t"] >= next_t:
      steps_over_time.append([s["t"], int(s["step"]), int(s["env_steps"])])
      next_t += window
  last = samples[-1]
  if steps_over_time[-1][0] != last["t"]:
    steps_over_time.append(
      [last["t"], int(last["step"]), int(last["env_steps"])]
    )
  # Progress in every window after warm-up (TF traces its graphs first).
  checked = [w for w in steps_over_time if w[0] >= warmup] or steps_over_time
  checked = [w for w in steps_over_time if w[0] < warmup][-1:] + checked
  increasing = len(checked) >= 2 and all(
    b[1] > a[1] for a, b in zip(checked, checked[1:])
  )
  return steps_over_time, increasing


def memory_curves(logdir: str) -> Dict[str, Any]:
  """The learner's own memory scalars by env steps, {tag: (steps, values)}
  (every learner process of the logdir); {} where none were written."""
  from plot_curves import read_curve  # imports TensorFlow: only at the end

  out = {}
  for tag in MEMORY_TAGS:
    steps, values, _ = read_curve(logdir, tag)
    if steps.size:
      out[tag] = (steps, values)
  return out


def lives(
  samples, life_starts, warmup: float, curves: Dict[str, Any]
) -> List[Dict[str, Any]]:
  """Per learner process: RSS, threads and fds after its warm-up (its own
  first `warmup` seconds, and its first step) and at its end; and its
  memory scalars at the env steps of those two samples."""
  out = []
  for life, start in enumerate(life_starts):
    mine = [s for s in samples if s["life"] == life]
    if not mine:
      continue
    trained = [s["t"] for s in mine if s["step"] > 0]
    begin = max(start + warmup, trained[0] if trained else mine[-1]["t"])
    after = [s for s in mine if s["t"] >= begin] or mine[-1:]
    base, end = after[0], after[-1]
    entry: Dict[str, Any] = {
      "life": life,
      "start_s": start,
      "warm_s": base["t"],
      "end_s": end["t"],
      "rss_mb_after_warmup": round(base["rss_mb"], 1),
      "rss_mb_end": round(end["rss_mb"], 1),
      "rss_mb_max_after_warmup": round(max(s["rss_mb"] for s in after), 1),
      "rss_growth_pct": round(
        100.0 * (end["rss_mb"] - base["rss_mb"]) / base["rss_mb"], 2
      ),
      "threads": [base["threads"], end["threads"]],
      "fds": [base["fds"], end["fds"]],
    }
    for tag, (steps, values) in curves.items():
      # The learner's points within this life's env steps, first and last.
      inside = [
        v for s, v in zip(steps, values)
        if base["env_steps"] <= s <= end["env_steps"]
      ]  # fmt: skip
      if inside:
        entry[tag.split("/")[1]] = [round(inside[0], 1), round(inside[-1], 1)]
    out.append(entry)
  return out


def result(args, soak, warmup: float, window: float, logdir: str):
  """The JSON line's measurements (main adds the exits, fuzz and verdict)."""
  samples = soak.samples
  per_life = lives(samples, soak.life_starts, warmup, memory_curves(logdir))
  first = per_life[0]
  steps_over_time, increasing = windows(
    samples, window, max(warmup, first["warm_s"])
  )
  worst = max(per_life, key=lambda life: life["rss_growth_pct"])
  return {
    "benchmark": "soak",
    "minutes": args.minutes,
    "num_actors": args.num_actors,
    "envs_per_actor": args.envs_per_actor,
    "network": args.network,
    "kills": soak.kills,
    "unexpected_actor_exits": soak.unexpected_exits,
    "learner_restarts": len(soak.life_starts) - 1,
    # [seconds, learner steps, env steps], one per window.
    "learner_steps": steps_over_time,
    "steps_always_increasing": increasing,
    # None: the first train step (TF tracing) never finished: too short
    # a run for this machine's load.
    "first_learner_step_s": next(
      (s["t"] for s in samples if s["step"] > 0), None
    ),
    "warmup_s": round(first["warm_s"], 1),
    "rss_mb": {
      "start": round(samples[0]["rss_mb"], 1),
      "after_warmup": first["rss_mb_after_warmup"],
      "end": per_life[-1]["rss_mb_end"],
      "max_after_warmup": max(
        life["rss_mb_max_after_warmup"] for life in per_life
      ),
    },
    # The largest growth within one learner process after its warm-up.
    "rss_growth_after_warmup_pct": worst["rss_growth_pct"],
    "threads": {
      "start": samples[0]["threads"],
      "after_warmup": first["threads"][0],
      "end": per_life[-1]["threads"][1],
      "max": max(s["threads"] for s in samples),
    },
    "fds": {
      "start": samples[0]["fds"],
      "after_warmup": first["fds"][0],
      "end": per_life[-1]["fds"][1],
      "max": max(s["fds"] for s in samples),
    },
    "lives": per_life,
    "restart_exit_codes": soak.restart_codes,
    "faults": soak.faults,
  }
