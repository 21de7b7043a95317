"""Machine profiles: the settings that fit a machine, apart from the algorithm.

An algorithm's gin file (`seed_rl/<env>/gin/<agent>.gin`) says how the agent
learns; how many threads TensorFlow and ALE use and how large inference
batches are depend on the machine the run is on, and live here:
`seed_rl/profiles/<profile>/<env>.gin`, one file per domain (none: the
profile changes nothing for that domain).

- `local-2core`: one small machine shared by the learner and its actors (the
  2-core development box every figure in benchmarks/RESULTS.md comes from).
- `cluster`: a learner with cores (and maybe a GPU) of its own, actors on
  other machines; what docker/, k8s/ and gcp/ run.

A profile may also name an agent overlay (OVERLAYS): where the pair's gin
file `seed_rl/<env>/gin/<agent>.gin` has a sibling `<agent>_<overlay>.gin`,
it is parsed right after it, by the learner and by actors given the pair's
file with --gin_config. On 'cluster' that is 'accelerator': an agent set
for a learner whose model cost does not bind (Atari V-trace trained in
float32 whatever the CPU, `atari/gin/vtrace_accelerator.gin`). Elsewhere
the same file is a `--gin_config` away.

Every entry point takes `--machine_profile NAME|auto` (default auto: `local-2core`
on machines with at most SMALL_MACHINE_CORES cores, else `cluster`). The
profile's file is parsed first, so the algorithm's gin file, `--gin_config`
files and `--gin_bindings` all override it.

TensorFlow-free: actors import this.
"""

from __future__ import annotations

import os
from typing import List, Optional

from seed_rl import registry

PROFILES = ("local-2core", "cluster")
AUTO = "auto"
# At most this many cores: learner and actors share the machine.
SMALL_MACHINE_CORES = 4
# The settings a profile may hold, and no algorithm gin file may: they fit
# a machine, not an algorithm (tests/profiles/test_profiles.py enforces it).
MACHINE_SETTINGS = (
  "LearnerConfig.inference_batch_size",
  "LearnerConfig.max_inference_batch_size",
  "LearnerConfig.batch_timeout_ms",
  "LearnerConfig.tf_intra_op_threads",
  "LearnerConfig.tf_inter_op_threads",
  "LearnerConfig.inference_device",
  "LearnerConfig.training_devices",
  "create_environment.num_threads",
)

# Profile -> the suffix of the agent overlay it runs (none: the pair's gin
# file alone).
OVERLAYS = {"cluster": "accelerator"}

_DIR = os.path.dirname(os.path.abspath(__file__))


def resolve(name: str, cpu_count: Optional[int] = None) -> str:
  """The profile `name` stands for ('auto' picks by the core count).

  Raises:
    ValueError naming the profiles there are.
  """
  if name == AUTO:
    cores = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    return PROFILES[0] if cores <= SMALL_MACHINE_CORES else "cluster"
  if name not in PROFILES:
    raise ValueError(
      f"unknown profile {name!r}; profiles: {', '.join(PROFILES)} or "
      f"{AUTO!r} (local-2core on machines with at most "
      f"{SMALL_MACHINE_CORES} cores, else cluster)"
    )
  return name


def gin_file(profile: str, env: str) -> Optional[str]:
  """`profile`'s gin file for domain `env`, or None if it has none."""
  path = os.path.join(_DIR, profile, f"{registry.short_name(env)}.gin")
  return path if os.path.exists(path) else None


def gin_files(profile: str, env: str) -> List[str]:
  """[the profile's file for `env`] or [] (profile names resolved first)."""
  path = gin_file(resolve(profile), env)
  return [path] if path else []


def _overlay(profile: str, pair_file: str) -> Optional[str]:
  """The profile's overlay beside `pair_file`, if it names one that exists."""
  suffix = OVERLAYS.get(resolve(profile))
  if suffix is None:
    return None
  stem, ext = os.path.splitext(pair_file)
  path = f"{stem}_{suffix}{ext}"
  return path if os.path.exists(path) else None


def overlay_files(profile: str, env: str, agent: str) -> List[str]:
  """[the pair's overlay for `profile`] where the profile names one and the
  file exists, else []."""
  path = _overlay(profile, registry.gin_file(env, agent))
  return [path] if path else []


def with_overlays(profile: str, files: List[str]) -> List[str]:
  """`files` with the profile's overlay of each pair file among them right
  after it: an actor knows its pair only from its --gin_config, and an
  overlay may bind what actors run too, such as the environment."""
  out: List[str] = []
  for path in files:
    overlay = _overlay(profile, path)
    out += [path] + ([overlay] if overlay and overlay not in files else [])
  return out


def config_files(profile: str, env: str, agent: str) -> List[str]:
  """Every gin file a learner of (env, agent) on `profile` parses before
  --gin_config files, in order: the profile's machine settings, the pair's
  gin file, the profile's overlay of it."""
  return (
    gin_files(profile, env)
    + [registry.gin_file(env, agent)]
    + overlay_files(profile, env, agent)
  )


def add_flag(parser) -> None:
  """Adds `--machine_profile` to an entry point's argparse parser."""
  parser.add_argument(
    "--machine_profile",
    default=AUTO,
    help=f"machine profile: {', '.join(PROFILES)} or {AUTO} (default: "
    f"local-2core with at most {SMALL_MACHINE_CORES} cores, else cluster); "
    "its seed_rl/profiles/<profile>/<env>.gin is parsed before every other "
    "gin file, which override it",
  )
