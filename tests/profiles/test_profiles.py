"""Machine profiles: machine settings live in seed_rl/profiles, never in an
algorithm's gin file, and the 2-core profile gives Atari V-trace exactly the
settings its Pong results were measured with."""

from __future__ import annotations

import glob
import os
import re

import gin
import pytest

from seed_rl import gin_utils, profiles, registry

# A binding's name at the start of a gin line: `Name.param = ...`.
_BINDING = re.compile(r"^\s*([A-Za-z_][\w./]*)\s*=", re.MULTILINE)


def _bindings(path):
  with open(path) as f:
    return _BINDING.findall(f.read())


def _algorithm_gin_files():
  files = glob.glob(
    os.path.join(registry.PACKAGE_DIR, "**", "gin", "*.gin"), recursive=True
  )
  assert len(files) >= 18, files  # every domain's agents
  return files


@pytest.mark.parametrize(
  "path", _algorithm_gin_files(), ids=lambda p: os.path.relpath(p)
)
def test_algorithm_gin_files_hold_no_machine_settings(path):
  machine = [
    name
    for name in _bindings(path)
    if any(name.endswith(setting) for setting in profiles.MACHINE_SETTINGS)
  ]
  assert not machine, (
    f"{path} sets {machine}: machine settings belong in "
    f"seed_rl/profiles/<profile>/<env>.gin"
  )


def test_profile_files_hold_only_machine_settings():
  files = glob.glob(
    os.path.join(os.path.dirname(profiles.__file__), "*", "*.gin")
  )
  assert len(files) >= 5
  for path in files:
    assert os.path.basename(os.path.dirname(path)) in profiles.PROFILES, path
    for name in _bindings(path):
      assert any(name.endswith(s) for s in profiles.MACHINE_SETTINGS), (
        f"{path}: {name} is not a machine setting"
      )


def test_auto_picks_by_core_count_and_unknown_names_are_refused():
  assert profiles.resolve("auto", cpu_count=2) == "local-2core"
  assert profiles.resolve("auto", cpu_count=96) == "cluster"
  assert profiles.resolve("cluster", cpu_count=2) == "cluster"
  with pytest.raises(
    ValueError, match="unknown profile 'gpu'.*local-2core, cluster"
  ):
    profiles.resolve("gpu")
  assert profiles.gin_file("local-2core", "classic") is None  # nothing to set


def _operative(profile, env, agent, overlays=(), build=None):
  """(LearnerConfig, the ALE thread count or None, build()) after parsing
  the profile, the pair's gin file and `overlays` (files beside it), as
  learner_main does."""
  import importlib

  for name in registry.LEARNER_GIN_MODULES:
    importlib.import_module(name)
  registry.env_module(env)  # as learner_main: their configurables first
  registry.agent_module(agent)
  from seed_rl.common.learner_config import LearnerConfig

  pair_file = registry.gin_file(env, agent)
  files = profiles.config_files(profile, env, agent)
  files += [os.path.join(os.path.dirname(pair_file), f) for f in overlays]
  gin.clear_config()
  try:
    gin_utils.parse(files, [])
    return (
      LearnerConfig(),
      gin.query_parameter("atari.create_environment.num_threads")
      if env == "atari" and profile == "local-2core"
      else None,
      build() if build else None,
    )
  finally:
    gin.clear_config()


def test_local_2core_gives_atari_vtrace_its_measured_settings():
  config, ale_threads, _ = _operative("local-2core", "atari", "vtrace")
  # What atari/gin/vtrace.gin held for every recorded Pong result.
  assert config.inference_batch_size == 16
  assert (config.tf_intra_op_threads, config.tf_inter_op_threads) == (1, 2)
  assert ale_threads == 1
  assert config.frame_stack == 4  # the algorithm's own settings still apply


def _vtrace_config(*overlays):
  """The Atari V-trace config on the local-2core profile."""
  from seed_rl.agents.vtrace.config import VtraceConfig

  return _operative("local-2core", "atari", "vtrace", overlays, VtraceConfig)[2]


def test_atari_vtrace_defaults_and_the_earlier_overlays():
  # CleanRL ppo_atari's recipe at 2 epochs on 32 x 32 unrolls ...
  new = _vtrace_config()
  assert (new.unroll_length, new.batch_size) == (32, 32)
  assert (new.num_epochs, new.num_minibatches) == (2, 4)
  assert (new.minibatch_unit, new.targets, new.advantage) == (
    "transition",
    "round",
    "lambda",
  )
  assert (new.policy_loss, new.normalize_advantages) == ("clip", True)
  # CleanRL's learning rate x 2 for half its updates per agent step.
  assert (new.optimizer, new.learning_rate) == ("adam", 5e-4)
  assert new.optimizer_epsilon_form == "paper"
  assert (new.entropy_cost, new.value_cost, new.value_clip) == (0.01, 0.5, 0.1)
  # ... what every Atari V-trace figure from 2026-11-26 to 2026-11-30 ran
  # (the 2013 torso, IMPALA's per-update targets over whole unrolls) ...
  nips = _vtrace_config("vtrace_nips.gin")
  assert (nips.unroll_length, nips.batch_size) == (20, 32)
  assert (nips.num_epochs, nips.num_minibatches) == (2, 4)
  assert (nips.minibatch_unit, nips.targets, nips.advantage) == (
    "unroll",
    "update",
    "vtrace",
  )
  assert (nips.trace_lambda, nips.entropy_cost) == (1.0, 0.03)
  assert (nips.value_cost, nips.value_clip) == (1.0, None)
  assert nips.optimizer_epsilon_form == "tensorflow"
  assert nips.learning_rate == 2.5e-4
  # ... and what every earlier one ran with.
  old = _vtrace_config("vtrace_nips.gin", "vtrace_a2c.gin")
  assert (old.unroll_length, old.batch_size) == (5, 16)
  assert (old.num_epochs, old.num_minibatches) == (1, 1)
  assert (old.policy_loss, old.normalize_advantages) == ("pg", False)
  assert (old.optimizer, old.learning_rate) == ("rmsprop", 7e-4)
  # Everything else is shared.
  for field in ("discount", "max_grad_norm", "reward_clipping"):
    assert getattr(old, field) == getattr(nips, field) == getattr(new, field)


def _atari_env_settings(*overlays):
  """(torso kind, fire reset, life-loss terminals) on the local-2core
  profile."""

  def build():
    return (
      gin.query_parameter("atari_torso.kind"),
      gin.query_parameter("atari.create_environment.use_fire_reset"),
    )

  learner, _, (kind, fire) = _operative(
    "local-2core", "atari", "vtrace", overlays, build
  )
  return kind, fire, learner.terminal_on_life_loss


def test_atari_vtrace_nips_overlay_restores_the_earlier_environment():
  assert _atari_env_settings() == ("nature", True, True)
  assert _atari_env_settings("vtrace_nips.gin") == ("nips", False, False)


def test_cluster_profile_leaves_threads_to_the_machine():
  config, _, _ = _operative("cluster", "atari", "vtrace")
  assert config.inference_batch_size is None
  assert config.max_inference_batch_size == 512
  assert config.tf_intra_op_threads is None
  assert config.tf_inter_op_threads is None


def test_cluster_runs_the_accelerator_overlay_of_atari_vtrace():
  from seed_rl.agents.vtrace.config import VtraceConfig

  def build():
    return VtraceConfig(), tuple(
      gin.query_parameter(f"atari_torso.{name}")
      for name in ("kind", "compute_dtype")
    )

  small, small_torso = _operative("local-2core", "atari", "vtrace", (), build)[
    2
  ]
  learner, _, (big, big_torso) = _operative(
    "cluster", "atari", "vtrace", (), build
  )
  assert learner.terminal_on_life_loss
  # The 2-core default takes bfloat16 where the CPU has it; the overlay
  # trains in float32 everywhere, as on a GPU.
  assert small_torso == ("nature", "auto")
  assert big_torso == ("nature", "float32")
  # Everything else is the 2-core default's update: the overlay changes the
  # precision, not what a round trains.
  assert (small.unroll_length, small.batch_size, small.num_epochs) == (
    32,
    32,
    2,
  )
  assert small == big
  # The same file is the documented switch on any other profile.
  switched = _vtrace_config("vtrace_accelerator.gin")
  assert (switched.batch_size, switched.num_epochs) == (32, 2)


def test_cleanrl_overlay_is_cleanrl_ppo_atari_update():
  default = _vtrace_config()
  cleanrl = _vtrace_config("vtrace_cleanrl.gin")
  assert (cleanrl.unroll_length, cleanrl.batch_size) == (128, 8)
  assert (cleanrl.num_epochs, cleanrl.num_minibatches) == (4, 4)
  assert cleanrl.queue_capacity == 16
  # CleanRL's learning rate at CleanRL's updates per agent step; the
  # default doubles it for half of them.
  assert (cleanrl.learning_rate, default.learning_rate) == (2.5e-4, 5e-4)
  # Everything the overlay does not name is the default's.
  for field in (
    "clip_ratio",
    "discount",
    "max_grad_norm",
    "minibatch_unit",
    "targets",
    "advantage",
    "trace_lambda",
    "entropy_cost",
    "value_cost",
    "value_clip",
  ):
    assert getattr(default, field) == getattr(cleanrl, field), field


def test_overlays_apply_only_where_their_file_exists():
  assert profiles.overlay_files("local-2core", "atari", "vtrace") == []
  assert profiles.overlay_files("cluster", "atari", "r2d2") == []
  (overlay,) = profiles.overlay_files("cluster", "atari", "vtrace")
  assert overlay.endswith(
    os.path.join("atari", "gin", "vtrace_accelerator.gin")
  )
  assert profiles.config_files("cluster", "atari", "vtrace")[-2:] == [
    registry.gin_file("atari", "vtrace"),
    overlay,
  ]


@pytest.mark.parametrize(
  "profile, overlaid", [("cluster", True), ("local-2core", False)]
)
def test_actors_parse_the_overlay_of_their_pair_file(
  profile, overlaid, tmp_path
):
  """An overlay may bind the environment as well: a cluster actor given the
  pair's file parses the overlay after it, as its learner does; elsewhere
  it is the pair's file alone. A copy of the Atari V-trace pair beside an
  overlay that turns its fire reset (which actors apply) off tells which."""
  import argparse

  from seed_rl.actors import main as actor_main

  copy = tmp_path / "vtrace.gin"
  copy.write_text(open(registry.gin_file("atari", "vtrace")).read())
  (tmp_path / "vtrace_accelerator.gin").write_text(
    "atari.create_environment.use_fire_reset = False\n"
  )
  args = argparse.Namespace(
    env="atari",
    machine_profile=profile,
    gin_config=[str(copy)],
    gin_bindings=[],
  )
  gin.clear_config()
  try:
    actor_main._configure(args)
    name = "atari.create_environment.use_fire_reset"
    assert gin.query_parameter(name) is (not overlaid)
  finally:
    gin.clear_config()
  pair = registry.gin_file("atari", "vtrace")
  overlay = profiles.overlay_files("cluster", "atari", "vtrace")
  assert profiles.with_overlays(profile, [pair]) == [pair] + (
    overlay if overlaid else []
  )
  # Named already (the documented switch): not parsed twice.
  assert profiles.with_overlays(profile, [pair] + overlay) == [pair] + overlay


def test_learner_parses_the_overlay_after_a_repeated_pair_file(tmp_path):
  import argparse

  from seed_rl import learner_main

  extra = tmp_path / "extra.gin"
  extra.write_text("")
  args = argparse.Namespace(
    machine_profile="cluster",
    env="atari",
    agent="vtrace",
    gin_config=[registry.gin_file("atari", "vtrace"), str(extra)],
  )
  files = learner_main._config_files(args)
  assert files[-2].endswith("vtrace_accelerator.gin")
  assert files[-1] == str(extra)
  assert files.count(registry.gin_file("atari", "vtrace")) == 1


def test_cluster_launchers_use_the_cluster_profile():
  root = os.path.dirname(registry.PACKAGE_DIR)
  for path in (
    "docker/compose.yaml",
    "k8s/base/actors-job.yaml",
    "k8s/base/learner-statefulset.yaml",
  ):
    with open(os.path.join(root, path)) as f:
      assert "--machine_profile=cluster" in f.read(), path
  with open(os.path.join(root, "seed_rl/cluster/vertex.py")) as f:
    assert f.read().count('"--machine_profile"') == 2  # learner, actors
