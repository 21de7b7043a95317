"""Hyperparameter tuning on Vertex AI: gin bindings as a study's parameters.

`python -m seed_rl.cluster.vertex ... --tune \
    --tune_param 'VtraceConfig.learning_rate=double:1e-4:1e-3:log' \
    --tune_param 'VtraceConfig.entropy_cost=discrete:0.003,0.01,0.03' \
    --max_trial_count 16 --parallel_trial_count 4`

builds a HyperparameterTuningJob whose trials are the usual custom job. A
parameter is a gin binding `Configurable.parameter`; its study id is
`hp_Configurable__parameter` (ids are flag names: letters, digits and `_`).
Vertex starts each trial's replicas with `--hp_Configurable__parameter=V`
appended; `extract_hyperparameters` turns those flags back into gin bindings
(`Configurable.parameter = V`) in the learner and in the actors (which skip
bindings of configurables they do not have).

Each trial's learner reports the study's metric (`--hypertune_metric`, the
mean return of the last 100 training episodes) in the file the service
reads (`HypertuneReporter`), and writes its logdir under `trial-<id>/`.

Parameter specs, `NAME=KIND:...`:
  double:MIN:MAX[:log|linear]    a float in [MIN, MAX] (default linear)
  int:MIN:MAX[:log|linear]       an integer in [MIN, MAX]
  discrete:V1,V2,...             one of these numbers
  categorical:A,B,...            one of these strings (gin literals: True,
                                 False and None stay literals; others are
                                 quoted)

Only the standard library: the cluster launcher and the actors import this.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

PREFIX = "hp_"
_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)$")
_ID = re.compile(r"^hp_([A-Za-z_][A-Za-z0-9_]*?)__([A-Za-z_][A-Za-z0-9_]*)$")
_SCALES = {"linear": "UNIT_LINEAR_SCALE", "log": "UNIT_LOG_SCALE"}
KINDS = ("double", "int", "discrete", "categorical")
# What `--hypertune_metric` may name, and the study's metric id for it.
METRICS = {"episode/return": "episode_return"}
# Where cloudml-hypertune (the library Vertex documents) writes by default.
DEFAULT_METRIC_FILE = "/tmp/hypertune/output.metrics"
_KEPT_MEASUREMENTS = 100


def parameter_id(name: str) -> str:
  """'VtraceConfig.learning_rate' -> 'hp_VtraceConfig__learning_rate'."""
  match = _NAME.match(name)
  # `_` next to the dot would make two names one id (A_.b, A._b: hp_A___b).
  if not match or "__" in name or "_." in name or "._" in name:
    raise ValueError(
      f"tuned parameter {name!r}: expected a gin binding name "
      f"Configurable.parameter (letters, digits, single _ not next to the "
      f"dot; no scopes or dotted configurable names), e.g. "
      f"VtraceConfig.learning_rate"
    )
  return f"{PREFIX}{match.group(1)}__{match.group(2)}"


def _numbers(values: Sequence[str], what: str) -> List[float]:
  try:
    return [float(v) for v in values]
  except ValueError:
    raise ValueError(f"{what}: {list(values)} are not all numbers") from None


def parameter_spec(text: str) -> Dict[str, Any]:
  """One `--tune_param NAME=KIND:...` as a StudySpec.ParameterSpec (REST
  JSON field names).

  Raises:
    ValueError naming what is wrong and the syntax.
  """
  name, eq, spec = text.partition("=")
  kind, _, rest = spec.strip().partition(":")
  what = f"--tune_param {text!r}"
  if not eq or kind not in KINDS or not rest:
    raise ValueError(
      f"{what}: expected NAME=KIND:..., KIND one of {', '.join(KINDS)} "
      f"(e.g. 'VtraceConfig.learning_rate=double:1e-4:1e-3:log')"
    )
  out: Dict[str, Any] = {"parameterId": parameter_id(name.strip())}
  if kind in ("double", "int"):
    parts = rest.split(":")
    scale = parts[2] if len(parts) == 3 else "linear"
    if len(parts) not in (2, 3) or scale not in _SCALES:
      raise ValueError(f"{what}: expected {kind}:MIN:MAX[:log|linear]")
    low, high = _numbers(parts[:2], what)
    if not low < high or (scale == "log" and low <= 0):
      raise ValueError(
        f"{what}: need MIN < MAX (and MIN > 0 on a log scale), got "
        f"{low:g}, {high:g}"
      )
    if kind == "double":
      out["doubleValueSpec"] = {"minValue": low, "maxValue": high}
    else:
      if low != int(low) or high != int(high):
        raise ValueError(f"{what}: int bounds must be integers")
      out["integerValueSpec"] = {
        "minValue": str(int(low)),  # int64: a string in JSON
        "maxValue": str(int(high)),
      }
    out["scaleType"] = _SCALES[scale]
  elif kind == "discrete":
    numbers = sorted(set(_numbers(rest.split(","), what)))
    out["discreteValueSpec"] = {"values": numbers}
  else:
    values = [v.strip() for v in rest.split(",")]
    if not all(values) or len(set(values)) != len(values):
      raise ValueError(
        f"{what}: categorical values must be distinct, non-empty"
      )
    out["categoricalValueSpec"] = {"values": values}
  return out


def study_spec(
  params: Sequence[str], metric: str, algorithm: str = "ALGORITHM_UNSPECIFIED"
) -> Dict[str, Any]:
  """The StudySpec: maximise `metric` over the `--tune_param` specs."""
  if not params:
    raise ValueError("--tune needs at least one --tune_param NAME=KIND:...")
  if metric not in METRICS:
    raise ValueError(
      f"--tune_metric {metric!r}: one of {', '.join(METRICS)} (the mean "
      f"return of the last 100 training episodes)"
    )
  specs = [parameter_spec(p) for p in params]
  ids = [s["parameterId"] for s in specs]
  if len(set(ids)) != len(ids):
    raise ValueError(f"--tune_param: a parameter is given twice ({ids})")
  return {
    "metrics": [{"metricId": METRICS[metric], "goal": "MAXIMIZE"}],
    "parameters": specs,
    "algorithm": algorithm,
    # The trial's result is where it ended, as result.json says.
    "measurementSelectionType": "LAST_MEASUREMENT",
  }


def _gin_literal(value: str) -> str:
  if value in ("True", "False", "None"):
    return value
  try:
    float(value)
  except ValueError:
    return repr(value)
  return value


def extract_hyperparameters(argv: Sequence[str]) -> Tuple[List[str], List[str]]:
  """(argv without Vertex's `--hp_...` trial flags, their gin bindings).

  Accepts `--hp_X__y=V` and `--hp_X__y V`.

  Raises:
    ValueError for an `--hp_` flag that is not a parameter id or lacks a value.
  """
  rest: List[str] = []
  bindings: List[str] = []
  i = 0
  while i < len(argv):
    arg = argv[i]
    if not arg.startswith("--" + PREFIX):
      rest.append(arg)
      i += 1
      continue
    flag, eq, value = arg[2:].partition("=")
    if not eq:
      if i + 1 >= len(argv):
        raise ValueError(f"--{flag}: no value")
      value, i = argv[i + 1], i + 1
    match = _ID.match(flag)
    if not match:
      raise ValueError(
        f"--{flag}: not a tuned parameter id (hp_Configurable__parameter)"
      )
    bindings.append(
      f"{match.group(1)}.{match.group(2)} = {_gin_literal(value)}"
    )
    i += 1
  return rest, bindings


def trial_id() -> Optional[str]:
  """The Vertex trial this process belongs to (CLOUD_ML_TRIAL_ID), or None."""
  value = os.environ.get("CLOUD_ML_TRIAL_ID")
  return value or None


class HypertuneReporter:
  """Writes measurements where Vertex's tuning service reads them: JSON lines
  `{"global_step", "<metric id>", "timestamp", "trial"}` (values as strings)
  in $CLOUD_ML_HP_METRIC_FILE (default /tmp/hypertune/output.metrics), the
  last 100 kept, each write atomic (the service may read at any time)."""

  def __init__(self, metric: str, path: Optional[str] = None):
    if metric not in METRICS:
      raise ValueError(
        f"--hypertune_metric {metric!r}: one of {', '.join(METRICS)}"
      )
    self.metric_id = METRICS[metric]
    self.path = path or os.environ.get(
      "CLOUD_ML_HP_METRIC_FILE", DEFAULT_METRIC_FILE
    )
    self._lines: List[str] = []

  def report(self, value: float, step: int) -> None:
    entry = {
      "global_step": str(int(step)),
      self.metric_id: str(float(value)),
      "timestamp": time.time(),
      "trial": str(trial_id() or 0),
    }
    self._lines = (self._lines + [json.dumps(entry, sort_keys=True)])[
      -_KEPT_MEASUREMENTS:
    ]
    directory = os.path.dirname(self.path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".hypertune-")
    with os.fdopen(fd, "w") as f:
      f.write("\n".join(self._lines) + "\n")
    os.replace(tmp, self.path)
