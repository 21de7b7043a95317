r"""Vertex AI custom jobs: the learner in worker pool 0, N actors in pool 1.

  python -m seed_rl.cluster.vertex --env atari --agent r2d2 \
      --project P --region us-central1 --bucket gs://B/seed_rl \
      --image_repo us-central1-docker.pkg.dev/P/seed-rl \
      --learner_machine_type a2-highgpu-1g \
      --accelerator_type NVIDIA_TESLA_A100 --accelerator_count 1 \
      --num_actors 32 --envs_per_actor 8 --actor_machine_type n2-standard-8 \
      [--gin_bindings B ...] [--gin_config F ...] [learner flags] [--dry_run]
      [--tune --tune_param NAME=KIND:... ... [--max_trial_count 16]
       [--parallel_trial_count 4]]  (seed_rl/cluster/tuning.py)

(gcp/train_{atari,mujoco,classic}.sh call this with per-domain defaults.)
The job spec is a plain dict in Vertex's REST/JSON form (a `CustomJob`);
`--dry_run` prints it, otherwise it is submitted with
`gcloud ai custom-jobs create --config` (the Cloud SDK's `gcloud` must be
installed and logged in; the Vertex AI Python SDK is not used).

How the actors find and trust the learner:
  - address: actors run with `--server_address from_cluster_spec:PORT`, i.e.
    PORT on the host of worker pool 0 in the CLUSTER_SPEC that Vertex sets
    in every replica; their id is their index in worker pool 1
    (`--actor_id from_cluster_spec`, see seed_rl/cluster/cluster_spec.py);
  - TLS and token: `scripts/make_certs.sh certs learner` and copy certs/ to
    `<bucket>/certs/`; every replica reads them through Vertex's Cloud
    Storage FUSE mount (/gcs/<bucket>/...). The certificate is issued for
    the name `learner` and actors check it with `--tls_server_name learner`
    (the learner's host name is only known once the job runs);
  - `--insecure` instead: no TLS and no token (the job's network is private
    to the job, but anything that can reach it could feed training data).
The learner's logdir (checkpoints, TensorBoard) is
`<bucket>/<display name>/` through the same mount; a job resubmitted with
the same --display_name resumes from its checkpoints.

Flags this module does not know go to the learner (e.g. --max_env_steps);
--gin_config and --gin_bindings go to the learner and to the actors (paths
of --gin_config are paths inside the images, e.g. seed_rl/atari/gin/x.gin).
Only the standard library is imported: no TensorFlow, no Google SDK.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional, Tuple

from seed_rl import registry
from seed_rl.cluster import cluster_spec
from seed_rl.cluster import tuning
from seed_rl.train import learner_run_flags

LEARNER_CERT_NAME = "learner"  # the name scripts/make_certs.sh is given
IMAGE_WORKDIR = "/opt/seed_rl"  # docker/Dockerfile: the source tree's copy
LEARNER_COMMAND = ["python", "-m", "seed_rl.learner_main"]
ACTOR_COMMAND = ["python", "-m", "seed_rl.actors.main"]
_DISPLAY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def gcs_fuse_path(uri: str) -> str:
  """'gs://bucket/a/b' -> '/gcs/bucket/a/b' (Vertex mounts buckets there)."""
  if not uri.startswith("gs://") or len(uri) <= len("gs://"):
    raise ValueError(f"{uri!r} is not a Cloud Storage URI (gs://BUCKET/...)")
  return "/gcs/" + uri[len("gs://") :].strip("/")


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
    prog="python -m seed_rl.cluster.vertex",
    description=__doc__,
    formatter_class=argparse.RawDescriptionHelpFormatter,
    allow_abbrev=False,  # unknown flags go to the learner, unabbreviated
  )
  p.add_argument(
    "--env", required=True, help="one of " + ", ".join(registry.ENVS)
  )
  p.add_argument(
    "--agent", required=True, help="one of " + ", ".join(registry.AGENTS)
  )
  p.add_argument("--num_actors", type=int, default=8)
  p.add_argument("--envs_per_actor", type=int, default=8)
  p.add_argument(
    "--env_groups",
    type=int,
    default=1,
    help="each actor's envs as this many groups in flight, one stream each "
    "(hides the network's latency); passed to the learner and the actors",
  )
  p.add_argument("--project", default=None, help="Google Cloud project")
  p.add_argument("--region", default="us-central1")
  p.add_argument(
    "--bucket",
    required=True,
    help="gs://BUCKET[/PATH]: holds certs/ and the runs' logdirs",
  )
  p.add_argument(
    "--image_repo",
    default=None,
    help="registry path of the images, e.g. "
    "us-central1-docker.pkg.dev/P/seed-rl: <repo>/actor:<tag>, and "
    "<repo>/learner:<tag> or, with an accelerator, <repo>/learner-gpu:<tag>",
  )
  p.add_argument("--image_tag", default="latest")
  p.add_argument("--learner_image", default=None, help="overrides --image_repo")
  p.add_argument("--actor_image", default=None, help="overrides --image_repo")
  p.add_argument("--learner_machine_type", default="n1-standard-8")
  p.add_argument(
    "--accelerator_type",
    default="none",
    help="e.g. NVIDIA_TESLA_T4, NVIDIA_L4, NVIDIA_TESLA_A100; 'none': CPU "
    "learner (use a CPU learner image then)",
  )
  p.add_argument("--accelerator_count", type=int, default=1)
  p.add_argument("--actor_machine_type", default="n1-standard-4")
  p.add_argument("--port", type=int, default=8686, help="the learner's port")
  p.add_argument(
    "--insecure",
    action="store_true",
    help="no TLS and no token between actors and learner",
  )
  p.add_argument("--display_name", default=None)
  p.add_argument("--service_account", default=None)
  p.add_argument("--gin_config", action="append", default=[])
  p.add_argument("--gin_bindings", action="append", default=[])
  p.add_argument(
    "--dry_run",
    action="store_true",
    help="print the job (JSON) instead of submitting it",
  )
  _add_tuning_flags(p)
  return p


def _add_tuning_flags(p: argparse.ArgumentParser) -> None:
  """--tune and the study's settings (seed_rl/cluster/tuning.py)."""
  p.add_argument(
    "--tune",
    action="store_true",
    help="a HyperparameterTuningJob whose trials are this custom job",
  )
  p.add_argument(
    "--tune_param",
    action="append",
    default=[],
    help="NAME=KIND:..., e.g. 'VtraceConfig.learning_rate=double:1e-4:1e-3:"
    "log' (kinds: double, int, discrete, categorical; repeatable)",
  )
  p.add_argument(
    "--tune_metric",
    default="episode/return",
    help="maximised: " + ", ".join(tuning.METRICS),
  )
  p.add_argument("--max_trial_count", type=int, default=16)
  p.add_argument("--parallel_trial_count", type=int, default=4)
  p.add_argument("--max_failed_trial_count", type=int, default=0)
  p.add_argument(
    "--tune_algorithm",
    default="ALGORITHM_UNSPECIFIED",
    choices=("ALGORITHM_UNSPECIFIED", "GRID_SEARCH", "RANDOM_SEARCH"),
    help="ALGORITHM_UNSPECIFIED: Vertex's default (Bayesian optimisation)",
  )


def build_tuning_job(
  args: argparse.Namespace, learner_flags: Optional[List[str]] = None
) -> Dict[str, Any]:
  """The HyperparameterTuningJob (REST/JSON field names): the custom job
  of `args` as each trial, its learner reporting `--tune_metric`."""
  study = tuning.study_spec(
    args.tune_param, args.tune_metric, args.tune_algorithm
  )
  if not 1 <= args.parallel_trial_count <= args.max_trial_count:
    raise ValueError(
      "need 1 <= --parallel_trial_count <= --max_trial_count, got "
      f"{args.parallel_trial_count} and {args.max_trial_count}"
    )
  if args.max_failed_trial_count < 0:
    raise ValueError("--max_failed_trial_count must be >= 0")
  flags = list(learner_flags or []) + ["--hypertune_metric", args.tune_metric]
  trial = build_job(args, flags)
  return {
    "displayName": trial["displayName"],
    "studySpec": study,
    "maxTrialCount": args.max_trial_count,
    "parallelTrialCount": args.parallel_trial_count,
    "maxFailedTrialCount": args.max_failed_trial_count,
    "trialJobSpec": trial["jobSpec"],
  }


def build_job(
  args: argparse.Namespace, learner_flags: Optional[List[str]] = None
) -> Dict[str, Any]:
  """The CustomJob (REST/JSON field names) for parsed `args`."""
  _check_args(args)
  gpu = args.accelerator_type.lower() != "none"
  learner_image = args.learner_image or _image(
    args, "learner-gpu" if gpu else "learner"
  )
  actor_image = args.actor_image or _image(args, "actor")
  bucket = gcs_fuse_path(args.bucket)
  display_name = _display_name(args)
  gin: List[str] = []
  for f in args.gin_config:
    gin += ["--gin_config", f]
  for b in args.gin_bindings:
    gin += ["--gin_bindings", b]
  learner_args, actor_args = _replica_args(args, bucket, display_name)
  job_spec: Dict[str, Any] = {
    "workerPoolSpecs": [
      {
        "machineSpec": _learner_machine(args, gpu),
        "replicaCount": 1,
        "containerSpec": {
          "imageUri": learner_image,
          "command": list(LEARNER_COMMAND),
          "args": learner_args + gin + list(learner_flags or []),
        },
      },
      {
        "machineSpec": {"machineType": args.actor_machine_type},
        "replicaCount": args.num_actors,
        "containerSpec": {
          "imageUri": actor_image,
          "command": list(ACTOR_COMMAND),
          "args": actor_args + gin,
        },
      },
    ],
    "baseOutputDirectory": {"outputUriPrefix": args.bucket.rstrip("/")},
  }
  if args.service_account:
    job_spec["serviceAccount"] = args.service_account
  return {"displayName": display_name, "jobSpec": job_spec}


def _check_args(args: argparse.Namespace) -> None:
  """Raises ValueError for a run that cannot start (before any lookup)."""
  registry.check_pair(args.env, args.agent)
  if args.num_actors < 1 or args.envs_per_actor < 1:
    raise ValueError("--num_actors and --envs_per_actor must be >= 1")
  if args.env_groups < 1 or args.envs_per_actor % args.env_groups:
    raise ValueError(
      f"--env_groups {args.env_groups}: must be >= 1 and divide "
      f"--envs_per_actor {args.envs_per_actor}"
    )
  if not 0 < args.port < 65536:
    raise ValueError(f"--port {args.port} is not a port")


def _display_name(args: argparse.Namespace) -> str:
  """--display_name, or seed-rl-ENV-AGENT-<UTC time>."""
  display_name = args.display_name or (
    f"seed-rl-{registry.short_name(args.env)}-"
    f"{registry.short_name(args.agent)}-"
    f"{datetime.datetime.now(datetime.timezone.utc):%Y%m%d-%H%M%S}"
  )
  if not _DISPLAY_NAME.match(display_name):
    raise ValueError(f"--display_name {display_name!r}: use [A-Za-z0-9_.-]")
  return display_name


def _replica_args(
  args: argparse.Namespace, bucket: str, display_name: str
) -> Tuple[List[str], List[str]]:
  """(learner, actor) arguments before the gin flags: the run, the address
  (worker pool 0's host, see cluster_spec), and TLS + token unless
  --insecure. `bucket` is the bucket's FUSE path."""
  learner_args = learner_run_flags(
    args.env, args.agent, args.num_actors, args.envs_per_actor
  )
  learner_args += ["--server_address", f"[::]:{args.port}"]
  # A cluster's machine settings, not the 2-core box's (seed_rl/profiles).
  learner_args += ["--machine_profile", "cluster"]
  learner_args += ["--logdir", f"{bucket}/{display_name}"]
  actor_args = [
    "--env",
    args.env,
    "--actor_id",
    cluster_spec.FROM_CLUSTER_SPEC,
    "--num_envs",
    str(args.envs_per_actor),
    "--server_address",
    f"{cluster_spec.FROM_CLUSTER_SPEC}:{args.port}",
    "--machine_profile",
    "cluster",
    "--gin_config",
    # The pair's gin file, relative to the image's working directory.
    os.path.relpath(
      registry.gin_file(args.env, args.agent),
      os.path.dirname(registry.PACKAGE_DIR),
    ),
  ]
  if args.env_groups != 1:
    learner_args += ["--env_groups", str(args.env_groups)]
    actor_args += ["--env_groups", str(args.env_groups)]
  if args.insecure:
    learner_args.append("--insecure")
    return learner_args, actor_args
  certs = f"{bucket}/certs"
  learner_args += ["--tls_cert", f"{certs}/learner.pem"]
  learner_args += ["--tls_key", f"{certs}/learner.key"]
  learner_args += ["--token_file", f"{certs}/token"]
  actor_args += ["--tls_ca", f"{certs}/ca.pem"]
  actor_args += ["--tls_server_name", LEARNER_CERT_NAME]
  actor_args += ["--token_file", f"{certs}/token"]
  return learner_args, actor_args


def _learner_machine(args: argparse.Namespace, gpu: bool) -> Dict[str, Any]:
  """The learner's machineSpec, with its accelerators when `gpu`."""
  learner_machine: Dict[str, Any] = {"machineType": args.learner_machine_type}
  if gpu:
    if args.accelerator_count < 1:
      raise ValueError("--accelerator_count must be >= 1")
    learner_machine["acceleratorType"] = args.accelerator_type
    learner_machine["acceleratorCount"] = args.accelerator_count
  return learner_machine


def _image(args: argparse.Namespace, role: str) -> str:
  if not args.image_repo:
    flag = "learner" if role.startswith("learner") else role
    raise ValueError(f"give --image_repo or --{flag}_image")
  return f"{args.image_repo.rstrip('/')}/{role}:{args.image_tag}"


def submit(job: Dict[str, Any], project: Optional[str], region: str) -> int:
  """`gcloud ai custom-jobs create --config` with the job's CustomJobSpec,
  or `gcloud ai hp-tuning-jobs create` for a tuning job."""
  gcloud = shutil.which("gcloud")
  if not gcloud:
    print(
      "error: gcloud (the Google Cloud SDK) is not installed; use --dry_run "
      "to print the job spec",
      file=sys.stderr,
    )
    return 2
  with tempfile.NamedTemporaryFile(
    "w", suffix=".json", prefix="seed_rl_job_", delete=False
  ) as f:
    tune = "studySpec" in job
    if tune:  # hp-tuning-jobs' --config: the job without its name
      config = {k: v for k, v in job.items() if k != "displayName"}
    else:
      config = job["jobSpec"]
    json.dump(config, f, indent=2)  # JSON is YAML, as --config wants
  cmd = [
    gcloud,
    "ai",
    "hp-tuning-jobs" if tune else "custom-jobs",
    "create",
    f"--region={region}",
    f"--display-name={job['displayName']}",
    f"--config={f.name}",
  ]
  if tune:
    cmd += [
      f"--max-trial-count={job['maxTrialCount']}",
      f"--parallel-trial-count={job['parallelTrialCount']}",
    ]
  if project:
    cmd.append(f"--project={project}")
  print("[vertex] " + " ".join(cmd), flush=True)
  try:
    return subprocess.call(cmd)
  finally:
    os.unlink(f.name)


def main(argv: Optional[List[str]] = None) -> int:
  args, learner_flags = build_parser().parse_known_args(argv)
  if args.tune_param and not args.tune:
    print("error: --tune_param needs --tune", file=sys.stderr)
    return 2
  try:
    build = build_tuning_job if args.tune else build_job
    job = build(args, learner_flags)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if args.dry_run:
    print(json.dumps(job, indent=2))
    return 0
  return submit(job, args.project, args.region)


if __name__ == "__main__":
  sys.exit(main())
