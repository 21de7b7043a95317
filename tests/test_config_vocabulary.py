"""One config vocabulary across agents: renamed parameters are refused with
their new name (learner and launcher), and the shared fields keep one order."""

from __future__ import annotations

from tests.support import ROOT
import dataclasses
import glob
import importlib
import os

import pytest

from seed_rl import gin_utils
from seed_rl import registry
from seed_rl import train
from seed_rl.agents.dqn.config import DQNConfig
from seed_rl.agents.ppo.config import PPOConfig
from seed_rl.agents.r2d2.config import R2D2Config


def _agent_configs():
  """Every `*Config` dataclass defined in the config module of an agent the
  registry lists: an agent added there is covered without an edit here."""
  found = {}
  for package in sorted(set(registry.AGENTS.values())):
    module = importlib.import_module(f"{package}.config")
    for name, value in vars(module).items():
      if (
        name.endswith("Config")
        and isinstance(value, type)
        and dataclasses.is_dataclass(value)
        and value.__module__ == module.__name__
      ):
        found[name] = value
  return found


CONFIGS = _agent_configs()
# The configs this file listed by hand before it discovered them.
_KNOWN = {
  "VtraceConfig",
  "PPOConfig",
  "DQNConfig",
  "R2D2Config",
  "SACConfig",
  "TD3Config",
  "A2CConfig",
  "ACERConfig",
}


def test_every_agent_config_is_discovered():
  assert _KNOWN <= set(CONFIGS), sorted(_KNOWN - set(CONFIGS))
  modules = {c.__module__ for c in CONFIGS.values()}
  for package in set(registry.AGENTS.values()):
    assert f"{package}.config" in modules, package


@pytest.mark.parametrize("old", sorted(gin_utils.RENAMED))
def test_rename_table_matches_the_configs(old):
  new, _ = gin_utils.RENAMED[old]
  cls, old_field = old.split(".")
  new_cls, new_field = new.split(".")
  assert cls == new_cls
  fields = {f.name for f in dataclasses.fields(CONFIGS[cls])}
  assert new_field in fields and old_field not in fields


@pytest.mark.parametrize(
  "binding, message",
  [
    (
      "PPOConfig.gamma = 0.99",
      "PPOConfig.gamma was renamed to PPOConfig.discount",
    ),
    (
      "PPOConfig.anneal_learning_rate = True",
      "PPOConfig.anneal_learning_rate was renamed to PPOConfig.lr_schedule "
      "(True -> 'linear', False -> 'constant')",
    ),
    (
      "train/DQNConfig.clip_rewards = True",
      "DQNConfig.clip_rewards was renamed to DQNConfig.reward_clipping",
    ),
    (
      "train__seed_rl.agents.vtrace.config.VtraceConfig.baseline_cost = 1.0",
      "VtraceConfig.baseline_cost was renamed to VtraceConfig.value_cost",
    ),
  ],
)
def test_learner_refuses_renamed_binding(binding, message):
  with pytest.raises(ValueError) as e:
    gin_utils.parse([], [binding])
  assert str(e.value).startswith(message)
  assert "--gin_bindings" in str(e.value)


def test_learner_refuses_renamed_parameter_in_gin_file(tmp_path):
  path = tmp_path / "old.gin"
  path.write_text(
    "# an old gin file\nR2D2Config.discount = 0.99\n"
    "R2D2Config.adam_epsilon = 1e-3   # Adam\n"
  )
  with pytest.raises(
    ValueError,
    match=r"R2D2Config.adam_epsilon was renamed to "
    r"R2D2Config.optimizer_epsilon \(in .*old.gin:3\)",
  ):
    gin_utils.parse([str(path)], [])


def test_launcher_refuses_renamed_binding_before_starting(capsys):
  code = train.main(
    ["classic", "ppo", "1", "1", "--gin_bindings", "PPOConfig.gamma = 0.9"]
  )
  assert code == 2
  err = capsys.readouterr().err
  assert "PPOConfig.gamma was renamed to PPOConfig.discount" in err


def test_shipped_gin_files_use_the_current_names():
  files = glob.glob(os.path.join(ROOT, "seed_rl", "*", "gin", "*.gin"))
  files += glob.glob(
    os.path.join(ROOT, "tests", "plugins", "toy_*", "gin", "*.gin")
  )
  assert files
  gin_utils.check_renamed(files, [])


# Fields every agent config shares, in the order of its groups: data,
# returns/targets, loss weights, optimizer, network, exploration, misc.
_ORDER = (
  "unroll_length",
  "batch_size",
  "discount",
  "reward_clipping",
  "entropy_cost",
  "value_cost",
  "learning_rate",
  "lr_schedule",
  "total_learner_steps",
  "optimizer_epsilon",
  "max_grad_norm",
  "torso",
  "head_hidden",
  "lstm_units",
  "seed",
  "queue_capacity",
)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_shared_fields_in_one_order(name):
  fields = [f.name for f in dataclasses.fields(CONFIGS[name])]
  shared = [f for f in _ORDER if f in fields]
  assert shared == [f for f in fields if f in _ORDER]
  for common in ("discount", "learning_rate", "optimizer_epsilon", "torso"):
    assert common in fields
  doc = CONFIGS[name].__doc__
  for field in fields:  # each documented in the class docstring
    assert f" {field}:" in doc or f" {field}," in doc, field


def test_head_hidden_is_a_tuple_of_widths():
  assert R2D2Config().head_hidden == (512,)
  assert R2D2Config(head_hidden=[64, 32]).head_hidden == (64, 32)
  assert DQNConfig(head_hidden=()).head_hidden == ()
  with pytest.raises(
    ValueError, match=r"R2D2Config.head_hidden must be a tuple"
  ):
    R2D2Config(head_hidden=512)
  with pytest.raises(
    ValueError, match="DQNConfig.head_hidden must hold positive"
  ):
    DQNConfig(head_hidden=(64, 0))


def test_string_choices_are_checked_alike():
  with pytest.raises(
    ValueError, match="DQNConfig.reward_clipping 'sign' is unknown"
  ):
    DQNConfig(reward_clipping="sign")
  with pytest.raises(
    ValueError, match="PPOConfig.lr_schedule 'cosine' is unknown"
  ):
    PPOConfig(lr_schedule="cosine")
  with pytest.raises(ValueError, match="R2D2Config.burn_in"):
    R2D2Config(unroll_length=10, burn_in=8, n_step=2)
  with pytest.raises(ValueError, match="DQNConfig.epsilon_start"):
    DQNConfig(noisy="fg")
