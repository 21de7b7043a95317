"""The learner's address and an actor's id from Vertex AI's CLUSTER_SPEC.

Vertex AI sets CLUSTER_SPEC (JSON) in every replica of a custom job:

    {"cluster": {"workerpool0": ["cmle-training-workerpool0-ab12-0:2222"],
                 "workerpool1": ["cmle-training-workerpool1-ab12-0:2222",
                                 "cmle-training-workerpool1-ab12-1:2222"]},
     "environment": "cloud",
     "task": {"type": "workerpool1", "index": 1}}

seed_rl puts the learner in worker pool 0 and the actors in worker pool 1
(`seed_rl.cluster.vertex`), so an actor started with
`--server_address from_cluster_spec:8686 --actor_id from_cluster_spec`
connects to port 8686 of the first host of worker pool 0 and takes its index
in worker pool 1 as its actor id. The port listed in CLUSTER_SPEC (2222) is
the one Vertex reserves for TensorFlow's own cluster, not the learner's: give
the learner's port after the colon (without it, the listed port is used).
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Mapping, Optional

CLUSTER_SPEC_ENV = "CLUSTER_SPEC"
FROM_CLUSTER_SPEC = "from_cluster_spec"
LEARNER_POOL = "workerpool0"
ACTOR_POOL = "workerpool1"


class ClusterSpecError(ValueError):
  """CLUSTER_SPEC is missing or does not describe a learner and actors."""


def load(environ: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
  """The parsed $CLUSTER_SPEC of `environ` (default: os.environ)."""
  environ = os.environ if environ is None else environ
  text = environ.get(CLUSTER_SPEC_ENV, "").strip()
  if not text:
    raise ClusterSpecError(
      f"${CLUSTER_SPEC_ENV} is not set (Vertex AI sets it in custom jobs); "
      "pass the learner's host:port and the actor id instead"
    )
  try:
    spec = json.loads(text)
  except json.JSONDecodeError as e:
    raise ClusterSpecError(f"${CLUSTER_SPEC_ENV} is not JSON: {e}") from None
  if not isinstance(spec, dict) or not isinstance(spec.get("cluster"), dict):
    raise ClusterSpecError(f"${CLUSTER_SPEC_ENV} has no 'cluster' object")
  return spec


def learner_address(spec: Mapping[str, Any], port: Optional[int] = None) -> str:
  """'host:port' of the learner: the first host of worker pool 0, with
  `port` (default: the port listed there)."""
  hosts = spec.get("cluster", {}).get(LEARNER_POOL)
  if not isinstance(hosts, list) or not hosts or not isinstance(hosts[0], str):
    raise ClusterSpecError(
      f"${CLUSTER_SPEC_ENV} lists no host in cluster.{LEARNER_POOL} "
      "(the learner's worker pool)"
    )
  host, sep, listed = hosts[0].rpartition(":")
  if not sep or not host:
    host, listed = hosts[0], ""
  if port is None:
    if not listed.isdigit():
      raise ClusterSpecError(
        f"cluster.{LEARNER_POOL}[0] = {hosts[0]!r} has no port; use "
        f"{FROM_CLUSTER_SPEC}:PORT"
      )
    port = int(listed)
  return f"{host}:{port}"


def task_index(spec: Mapping[str, Any], pool: str = ACTOR_POOL) -> int:
  """This replica's index in worker pool `pool` (an actor's id)."""
  task = spec.get("task")
  if not isinstance(task, dict) or task.get("type") != pool:
    kind = task.get("type") if isinstance(task, dict) else None
    raise ClusterSpecError(
      f"this replica is task {kind!r} in ${CLUSTER_SPEC_ENV}, not one of "
      f"{pool!r} (the actors' worker pool)"
    )
  index = task.get("index")
  if isinstance(index, bool) or not isinstance(index, int) or index < 0:
    raise ClusterSpecError(
      f"task.index in ${CLUSTER_SPEC_ENV} is {index!r}, not an index"
    )
  return index


def resolve_server_address(
  value: str, environ: Optional[Mapping[str, str]] = None
) -> str:
  """`value` itself, unless it is 'from_cluster_spec[:PORT]'."""
  if value != FROM_CLUSTER_SPEC and not value.startswith(
    FROM_CLUSTER_SPEC + ":"
  ):
    return value
  port_text = value[len(FROM_CLUSTER_SPEC) + 1 :]
  port = None
  if port_text:
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
      raise ClusterSpecError(f"{value!r}: the port must be 1-65535")
    port = int(port_text)
  return learner_address(load(environ), port)


def resolve_actor_id(
  value: str, environ: Optional[Mapping[str, str]] = None
) -> int:
  """int(`value`), or this replica's index in the actors' worker pool when
  `value` is 'from_cluster_spec'."""
  if value == FROM_CLUSTER_SPEC:
    return task_index(load(environ), ACTOR_POOL)
  try:
    return int(value)
  except ValueError:
    raise ValueError(
      f"{value!r} is neither an integer nor {FROM_CLUSTER_SPEC!r}"
    ) from None
