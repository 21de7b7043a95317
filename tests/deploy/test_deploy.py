"""Deployment files: docker/, k8s/, gcp/ and seed_rl/cluster/.

No Docker daemon, cluster or cloud here: the Dockerfile is parsed (every
COPY source exists and enters the build context, non-root USER, module
entrypoints), the actor image's pip install is resolved without installing
(no TensorFlow), the Kubernetes overlays are built (kubectl kustomize when
present, a small kustomize subset otherwise, both when both can) and
validated against the Kubernetes API schemas, the Vertex AI job specs are
parsed as `google.cloud.aiplatform_v1` CustomJob messages, and every
command line that these files give the learner and the actors is parsed by
the real entry points.
"""

from __future__ import annotations

from tests.support import ROOT
from tests.support.vertex import SAMPLE_CLUSTER_SPEC
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Tuple

import pytest
import yaml

from seed_rl import learner_main
from seed_rl import registry
from seed_rl.actors import main as actor_main
from seed_rl.cluster import cluster_spec
from seed_rl.cluster import vertex

DOCKERFILE = os.path.join(ROOT, "docker", "Dockerfile")
K8S_VERSION = "1.33.0"  # the Kubernetes API the manifests are checked against
OVERLAYS = ("atari-r2d2", "mujoco-ppo", "classic-vtrace")
LEARNER_ENTRYPOINT = ["python", "-m", "seed_rl.learner_main"]
ACTOR_ENTRYPOINT = ["python", "-m", "seed_rl.actors.main"]
# What scripts/make_certs.sh writes, by role.
CERT_FILES = {"ca.pem", "learner.pem", "learner.key", "token"}


# ---------------------------------------------------------------- Docker


def _stages() -> Dict[str, List[Dict[str, Any]]]:
  from dockerfile_parse import DockerfileParser

  parser = DockerfileParser(path=DOCKERFILE)
  stages: Dict[str, List[Dict[str, Any]]] = {}
  current: List[Dict[str, Any]] = []
  for ins in parser.structure:
    if ins["instruction"] == "FROM":
      words = ins["value"].split()
      name = words[2] if len(words) == 3 and words[1].upper() == "AS" else ""
      current = stages.setdefault(name, [])
    current.append(ins)
  return stages


def _stage_chain(stages, name: str) -> List[Dict[str, Any]]:
  """The instructions of stage `name`, with those of its FROM stages."""
  out: List[Dict[str, Any]] = []
  while name in stages:
    ins = stages[name]
    out = ins + out
    name = ins[0]["value"].split()[0]
  return out


def _dockerignore_excludes(path: str) -> bool:
  """Whether docker/Dockerfile.dockerignore keeps repo path `path` out of
  the build context (Docker's rules: the last matching pattern wins, and a
  pattern matching a folder matches everything in it)."""
  with open(DOCKERFILE + ".dockerignore") as f:
    patterns = [
      line.strip()
      for line in f
      if line.strip() and not line.strip().startswith("#")
    ]
  parts = path.strip("/").split("/")
  prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
  excluded = False
  for pattern in patterns:
    negate = pattern.startswith("!")
    body = pattern.lstrip("!").strip("/")
    regex = ""
    i = 0
    while i < len(body):
      if body.startswith("**", i):
        regex += ".*"
        i += 2
      elif body[i] == "*":
        regex += "[^/]*"
        i += 1
      elif body[i] == "?":
        regex += "[^/]"
        i += 1
      else:
        regex += re.escape(body[i])
        i += 1
    if any(re.fullmatch(regex, p) for p in prefixes):
      excluded = not negate
  return excluded


def test_dockerfile_stages_users_and_entrypoints():
  stages = _stages()
  assert {"base", "actor", "learner"} <= set(stages)
  for name, entrypoint in (
    ("actor", ACTOR_ENTRYPOINT),
    ("learner", LEARNER_ENTRYPOINT),
  ):
    chain = _stage_chain(stages, name)
    users = [i["value"].strip() for i in chain if i["instruction"] == "USER"]
    assert users, f"stage {name} runs as root"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), f"stage {name}: USER {users[-1]}"
    creates = " ".join(i["value"] for i in chain if i["instruction"] == "RUN")
    assert f"--uid {user}" in creates, f"no user with uid {user} is created"
    entry = [i for i in chain if i["instruction"] == "ENTRYPOINT"]
    assert json.loads(entry[-1]["value"]) == entrypoint, name
    # USER comes after the installs: nothing after it runs as root.
    last_user = max(i["startline"] for i in chain if i["instruction"] == "USER")
    assert all(
      i["startline"] < last_user for i in chain if i["instruction"] == "RUN"
    )
  # The learner is the default (last) target.
  assert list(stages)[-1] == "learner"


def test_dockerfile_copy_sources_exist_and_enter_the_context():
  copies = [i for i in _stages()["base"] if i["instruction"] == "COPY"]
  assert copies
  for ins in copies:
    words = [w for w in shlex.split(ins["value"]) if not w.startswith("--")]
    for src in words[:-1]:
      assert os.path.exists(os.path.join(ROOT, src)), f"COPY {src}: missing"
      assert not _dockerignore_excludes(src), f"COPY {src}: dockerignored"
  # What the images need is in the context; secrets and local state are not.
  for kept in (
    "seed_rl/atari/gin/r2d2.gin",
    "seed_rl/grpc/seed_rl.proto",
    "pyproject.toml",
    "setup.py",
    "seed_rl/common/_frame_push.c",
    "constraints.txt",
  ):
    assert os.path.exists(os.path.join(ROOT, kept)), kept
    assert not _dockerignore_excludes(kept), kept
  for dropped in (
    "certs/learner.key",
    "certs/token",
    ".venv/bin/python",
    "runs/x/checkpoints",
    ".git/config",
    "seed_rl/__pycache__/registry.cpython-311.pyc",
    # the host's build of the extension: the image compiles its own
    "seed_rl/common/_frame_push.cpython-311-x86_64-linux-gnu.so",
  ):
    assert _dockerignore_excludes(dropped), dropped


def _pip_install_args(stage: str) -> List[List[str]]:
  """The arguments after `pip install` of each RUN in `stage`, with paths
  made relative to the repository (the image's WORKDIR is a copy of it)."""
  out = []
  for ins in _stage_chain(_stages(), stage):
    if ins["instruction"] != "RUN" or "pip install" not in ins["value"]:
      continue
    command = [c for c in ins["value"].split("&&") if "pip install" in c][0]
    words = shlex.split(command)
    words = words[words.index("install") + 1 :]
    args = []
    for w in words:
      if w == "${TENSORFLOW}":
        w = "tensorflow"  # the ARG's default: the CPU learner
      if w == "." or w.startswith(".["):
        w = ROOT + w[1:]
      elif w.endswith(".txt"):
        w = os.path.join(ROOT, w)
      args.append(w)
    out.append(args)
  return out


def _resolve(pip_args: List[str]) -> List[str]:
  proc = subprocess.run(
    [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet"]
    + ["--ignore-installed", "--no-build-isolation", "--report", "-"]
    + pip_args,
    capture_output=True,
    text=True,
    timeout=600,
  )
  if proc.returncode != 0:
    offline = (
      "NewConnectionError",
      "Failed to establish a new connection",
      "Temporary failure in name resolution",
      "Network is unreachable",
      "ConnectTimeoutError",
      "ReadTimeoutError",
    )
    if any(s in proc.stderr for s in offline):
      pytest.skip("pip cannot reach the package index: " + proc.stderr[-300:])
    raise AssertionError(f"pip could not resolve {pip_args}:\n{proc.stderr}")
  report = json.loads(proc.stdout)
  return sorted(i["metadata"]["name"].lower() for i in report["install"])


def test_actor_image_installs_no_tensorflow():
  assert sys.version_info[:2] == (3, 11)  # as the image's python:3.11
  with open(DOCKERFILE) as f:
    assert "python:3.11-" in f.read()
  installs = _pip_install_args("actor")
  assert len(installs) == 1, installs
  assert installs[0][-1] == ROOT, "the actor image installs seed_rl itself"
  names = _resolve(installs[0])
  assert "seed-rl" in names or "seed_rl" in names
  for needed in ("grpcio", "protobuf", "numpy", "gin-config", "gymnasium"):
    assert needed in names, needed
  assert "ale-py" in names and "mujoco" in names
  tf = [n for n in names if n.startswith(("tensorflow", "tf-keras", "keras"))]
  assert not tf, f"the actor image would install {tf}"


def test_learner_image_installs_tensorflow():
  installs = _pip_install_args("learner")
  assert len(installs) == 1, installs
  assert ROOT + "[learner]" in installs[0]
  assert "tensorflow" in installs[0]


@pytest.mark.parametrize(
  "argv",
  [
    LEARNER_ENTRYPOINT + ["--help"],
    ACTOR_ENTRYPOINT + ["--help"],
    # docker/README.md: the local launcher inside one container.
    ["python", "-m", "seed_rl.train", "--help"],
  ],
)
def test_entrypoints_run_outside_docker(argv):
  proc = subprocess.run(
    [sys.executable] + argv[1:],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == 0, proc.stderr
  assert f"usage: python -m {argv[2]}" in proc.stdout
  if argv[2] == "seed_rl.actors.main":
    assert cluster_spec.FROM_CLUSTER_SPEC in proc.stdout


def _interpolate(text: str) -> str:
  """Compose's ${NAME:-default} with nothing set: the defaults."""
  return re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: m.group(2), text)


def test_compose_commands_parse_and_match_the_images():
  with open(os.path.join(ROOT, "docker", "compose.yaml")) as f:
    compose = yaml.safe_load(_interpolate(f.read()))
  services = compose["services"]
  learner = services["learner"]
  assert learner["build"]["target"] == "learner"
  assert learner["build"]["dockerfile"] == "docker/Dockerfile"
  args = learner_main.build_parser().parse_args(learner["command"])
  assert not security_is_loopback(args.server_address)
  assert (
    args.tls_cert and args.tls_key and args.token_file and not args.insecure
  )
  registry.check_pair(args.env, args.agent)
  actors = {k: v for k, v in services.items() if k.startswith("actor")}
  assert len(actors) == args.num_actors
  ids = []
  for service in actors.values():
    assert service["build"]["target"] == "actor"
    assert service["user"].split(":")[0] not in ("0", "root")
    argv = service["entrypoint"] + service["command"]
    assert argv[:3] == ACTOR_ENTRYPOINT
    a = actor_main.parse_args(argv[3:])
    ids.append(a.actor_id)
    assert a.env == args.env and a.num_envs == args.envs_per_actor
    host, port = a.server_address.rsplit(":", 1)
    assert host == "learner" and port == args.server_address.rsplit(":", 1)[1]
    assert a.tls_ca and a.token_file
    gin_file = os.path.join(ROOT, a.gin_config[0])
    assert os.path.samefile(gin_file, registry.gin_file(args.env, args.agent))
  assert sorted(ids) == list(range(args.num_actors))
  # Secrets: make_certs.sh's files, each where the commands read it.
  files = {
    name: os.path.basename(s["file"]) for name, s in compose["secrets"].items()
  }
  assert set(files.values()) == CERT_FILES
  assert learner["command"].count(f"--tls_key=/run/secrets/{'learner_key'}")
  assert files["learner_key"] == "learner.key" and files["ca"] == "ca.pem"
  for service in services.values():
    argv = " ".join(service.get("entrypoint", []) + service["command"])
    for used in re.findall(r"/run/secrets/(\w+)", argv):
      assert used in service["secrets"], (used, service["secrets"])


def security_is_loopback(address: str) -> bool:
  from seed_rl.grpc import security

  return security.is_loopback(address)


# ------------------------------------------------------------ Kubernetes

_MERGE_KEYS = {
  "containers": "name",
  "initContainers": "name",
  "volumes": "name",
  "env": "name",
  "volumeMounts": "mountPath",
}


def _merge(base: Any, patch: Any, key: str = "") -> Any:
  """A strategic merge patch, as far as k8s/ uses it."""
  if isinstance(base, dict) and isinstance(patch, dict):
    out = dict(base)
    for k, v in patch.items():
      if v is None:
        out.pop(k, None)
      elif k in out:
        out[k] = _merge(out[k], v, k)
      else:
        out[k] = _merge({}, v, k) if isinstance(v, dict) else v
    return out
  if key in _MERGE_KEYS and isinstance(base, list) and isinstance(patch, list):
    field = _MERGE_KEYS[key]
    merged = list(base)
    for item in patch:
      at = [i for i, b in enumerate(merged) if b.get(field) == item.get(field)]
      if at:
        merged[at[0]] = _merge(merged[at[0]], item)
      else:
        merged.append(item)
    return merged
  return patch


def _kustomize(folder: str) -> List[Dict[str, Any]]:
  """A kustomize subset: resources, strategic-merge patches, images."""
  with open(os.path.join(folder, "kustomization.yaml")) as f:
    k = yaml.safe_load(f)
  allowed = {"apiVersion", "kind", "resources", "patches", "images"}
  assert set(k) <= allowed, f"the test's kustomize lacks {set(k) - allowed}"
  docs: List[Dict[str, Any]] = []
  for res in k.get("resources", []):
    path = os.path.join(folder, res)
    if os.path.isdir(path):
      docs += _kustomize(path)
    else:
      with open(path) as f:
        docs += [d for d in yaml.safe_load_all(f) if d]
  for p in k.get("patches", []):
    assert set(p) == {"path"}, p
    with open(os.path.join(folder, p["path"])) as f:
      patch = yaml.safe_load(f)
    hits = [
      i
      for i, d in enumerate(docs)
      if d["kind"] == patch["kind"]
      and d["metadata"]["name"] == patch["metadata"]["name"]
    ]
    assert len(hits) == 1, p
    docs[hits[0]] = _merge(docs[hits[0]], patch)
  for image in k.get("images", []):
    for d in docs:
      for c in _containers(d):
        name, _, tag = c["image"].partition(":")
        if name == image["name"]:
          name = image.get("newName", name)
          tag = image.get("newTag", tag)
          c["image"] = f"{name}:{tag}" if tag else name
  return docs


def _containers(doc) -> List[Dict[str, Any]]:
  spec = doc.get("spec", {}).get("template", {}).get("spec", {})
  return spec.get("containers", [])


def _build(overlay: str) -> List[Dict[str, Any]]:
  folder = os.path.join(ROOT, "k8s", "overlays", overlay)
  docs = _kustomize(folder)
  kubectl = shutil.which("kubectl")
  if kubectl:
    proc = subprocess.run(
      [kubectl, "kustomize", folder],
      capture_output=True,
      text=True,
      timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    real = [d for d in yaml.safe_load_all(proc.stdout) if d]

    def key(d):
      return (d["kind"], d["metadata"]["name"])

    assert sorted(real, key=key) == sorted(docs, key=key), (
      "kubectl kustomize and the test's kustomize subset disagree"
    )
  return docs


def _expand(value: str, env: Dict[str, str]) -> str:
  """The kubelet's $(NAME) expansion in command and args."""
  return re.sub(
    r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), value
  )


def _by_kind(docs) -> Dict[Tuple[str, str], Dict[str, Any]]:
  return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def _env(doc, container, config_maps, index: int = 0) -> Dict[str, str]:
  env: Dict[str, str] = {}
  for src in container.get("envFrom", []):
    env.update(config_maps[src["configMapRef"]["name"]]["data"])
  annotation = (
    "metadata.annotations['batch.kubernetes.io/job-completion-index']"
  )
  for var in container.get("env", []):
    if "value" in var:
      env[var["name"]] = var["value"]
    else:
      assert var["valueFrom"]["fieldRef"]["fieldPath"] == annotation, var
      assert doc["spec"]["completionMode"] == "Indexed"
      env[var["name"]] = str(index)
  return env


def _mounted_file(doc, container, path: str) -> Tuple[str, str]:
  """(kind, name) of the Secret/ConfigMap that `path` comes from, checking
  that it is mounted there and the file is one of its documented keys."""
  volumes = {v["name"]: v for v in doc["spec"]["template"]["spec"]["volumes"]}
  for m in container["volumeMounts"]:
    if os.path.dirname(path) == m["mountPath"]:
      v = volumes[m["name"]]
      name = os.path.basename(path)
      if "secret" in v:
        keys = {
          "seed-rl-learner-tls": {"tls.crt", "tls.key"},
          "seed-rl-ca": {"ca.crt"},
          "seed-rl-token": {"token"},
        }[v["secret"]["secretName"]]
        assert name in keys, (path, keys)
        assert v["secret"]["defaultMode"] & 0o007 == 0, "world-readable"
        return "Secret", v["secret"]["secretName"]
      items = [i["path"] for i in v["configMap"]["items"]]
      assert name in items, (path, items)
      return "ConfigMap", v["configMap"]["name"]
  raise AssertionError(f"{path} is not in a mounted volume")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_overlay_validates_against_the_kubernetes_schemas(overlay):
  import kubernetes_validate

  docs = _build(overlay)
  kinds = sorted(d["kind"] for d in docs)
  assert kinds == [
    "ConfigMap",
    "ConfigMap",
    "Job",
    "PersistentVolumeClaim",
    "Service",
    "StatefulSet",
  ]
  for doc in docs:
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
  # Negative control: a mistyped field fails the same validation.
  job = _by_kind(docs)[("Job", "actors")]
  bad = json.loads(json.dumps(job))
  bad["spec"]["template"]["spec"]["containers"][0]["argz"] = ["x"]
  with pytest.raises(kubernetes_validate.ValidationError):
    kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_overlay_commands_parse_and_agree(overlay):
  docs = _by_kind(_build(overlay))
  config_maps = {n: d for (k, n), d in docs.items() if k == "ConfigMap"}
  sts = docs[("StatefulSet", "learner")]
  job = docs[("Job", "actors")]
  service = docs[("Service", "learner")]
  env_name, agent = overlay.split("-")
  # The learner.
  (lc,) = _containers(sts)
  assert lc["command"] == LEARNER_ENTRYPOINT
  env = _env(sts, lc, config_maps)
  largs = learner_main.build_parser().parse_args(
    [_expand(a, env) for a in lc["args"]]
  )
  assert (largs.env, largs.agent) == (env_name, agent)
  registry.check_pair(largs.env, largs.agent)
  assert largs.tls_cert and largs.tls_key and largs.token_file
  assert not largs.insecure
  for path in [largs.tls_cert, largs.tls_key, largs.token_file]:
    assert _mounted_file(sts, lc, path)[0] == "Secret"
  for path in largs.gin_config:
    kind, name = _mounted_file(sts, lc, path)
    gin_text = config_maps[name]["data"][os.path.basename(path)]
    _check_gin(gin_text, largs.env)
  logdir_mounts = [m["mountPath"] for m in lc["volumeMounts"]]
  assert any(largs.logdir.startswith(m + "/") for m in logdir_mounts)
  port = int(largs.server_address.rsplit(":", 1)[1])
  (sport,) = service["spec"]["ports"]
  assert sport["port"] == port
  assert {p["name"]: p["containerPort"] for p in lc["ports"]}[
    sport["targetPort"]
  ] == port
  labels = sts["spec"]["template"]["metadata"]["labels"]
  assert service["spec"]["selector"].items() <= labels.items()
  # GPU: requested exactly when the learner image has CUDA.
  resources = lc["resources"]
  gpu = "nvidia.com/gpu" in resources.get("limits", {})
  assert gpu == ("nvidia.com/gpu" in resources.get("requests", {}))
  assert gpu == lc["image"].startswith("seed-rl-learner-gpu"), lc["image"]
  assert gpu == (overlay == "atari-r2d2")
  # The actors.
  spec = job["spec"]
  assert spec["completions"] == spec["parallelism"] == largs.num_actors
  (ac,) = _containers(job)
  assert ac["command"] == ACTOR_ENTRYPOINT
  assert ac["image"].split(":")[0] == "seed-rl-actor"
  ids = set()
  for index in range(spec["completions"]):
    env = _env(job, ac, config_maps, index)
    a = actor_main.parse_args([_expand(x, env) for x in ac["args"]])
    ids.add(a.actor_id)
    assert a.env == largs.env and a.num_envs == largs.envs_per_actor
    assert a.server_address == f"{service['metadata']['name']}:{port}"
    assert _mounted_file(job, ac, a.tls_ca) == ("Secret", "seed-rl-ca")
    assert _mounted_file(job, ac, a.token_file) == ("Secret", "seed-rl-token")
    pair_gin, extra_gin = a.gin_config
    assert os.path.samefile(
      os.path.join(ROOT, pair_gin), registry.gin_file(largs.env, largs.agent)
    )
    assert extra_gin in largs.gin_config
  assert ids == set(range(largs.num_actors))
  # Non-root everywhere, as the images.
  for doc in (sts, job):
    ctx = doc["spec"]["template"]["spec"]["securityContext"]
    assert ctx["runAsNonRoot"] and ctx["runAsUser"] == 10001


def _check_gin(text: str, env: str) -> None:
  import gin

  registry.env_module(env)  # registers the env's configurables
  try:
    gin.parse_config(text)
  finally:
    gin.clear_config()


# ---------------------------------------------------------------- Vertex


def _dry_run(script: str, *flags: str) -> Dict[str, Any]:
  proc = subprocess.run(
    ["bash", os.path.join(ROOT, "gcp", script)]
    + ["--project", "my-project", "--bucket", "gs://my-bucket/seed_rl"]
    + ["--image_repo", "us-central1-docker.pkg.dev/my-project/seed-rl"]
    + ["--display_name", "test-run", "--dry_run"]
    + list(flags),
    env=dict(os.environ, PYTHON=sys.executable),
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == 0, proc.stderr
  return json.loads(proc.stdout)


def _parse_custom_job(job: Dict[str, Any]):
  from google.cloud.aiplatform_v1.types import custom_job
  from google.protobuf import json_format

  # ignore_unknown_fields=False: an unknown or mistyped field is an error.
  return json_format.ParseDict(job, custom_job.CustomJob.pb()())


@pytest.mark.parametrize(
  "script,env,agent,gpu",
  [
    ("train_atari.sh", "atari", "r2d2", True),
    ("train_mujoco.sh", "mujoco", "ppo", False),
    ("train_classic.sh", "classic", "vtrace", False),
  ],
)
def test_vertex_job_specs_are_custom_jobs(script, env, agent, gpu, monkeypatch):
  job = _dry_run(script, "--gin_bindings", "VtraceConfig.entropy_cost = 0.01")
  pb = _parse_custom_job(job)
  assert pb.display_name == "test-run"
  learner_pool, actor_pool = pb.job_spec.worker_pool_specs
  assert learner_pool.replica_count == 1
  assert list(learner_pool.container_spec.command) == LEARNER_ENTRYPOINT
  assert list(actor_pool.container_spec.command) == ACTOR_ENTRYPOINT
  assert bool(learner_pool.machine_spec.accelerator_count) == gpu
  assert learner_pool.container_spec.image_uri.endswith(
    "/learner-gpu:latest" if gpu else "/learner:latest"
  )
  assert actor_pool.container_spec.image_uri.endswith("/actor:latest")
  largs = learner_main.build_parser().parse_args(
    list(learner_pool.container_spec.args)
  )
  assert (largs.env, largs.agent) == (env, agent)
  assert largs.num_actors == actor_pool.replica_count
  assert largs.gin_bindings == ["VtraceConfig.entropy_cost = 0.01"]
  assert largs.tls_cert.startswith("/gcs/my-bucket/seed_rl/certs/")
  assert largs.logdir == "/gcs/my-bucket/seed_rl/test-run"
  # An actor replica, given the CLUSTER_SPEC Vertex sets.
  monkeypatch.setenv("CLUSTER_SPEC", json.dumps(SAMPLE_CLUSTER_SPEC))
  a = actor_main.parse_args(list(actor_pool.container_spec.args))
  port = largs.server_address.rsplit(":", 1)[1]
  assert a.server_address == f"cmle-training-workerpool0-ab12cd-0:{port}"
  assert a.actor_id == 1
  assert a.num_envs == largs.envs_per_actor
  assert a.gin_bindings == largs.gin_bindings
  assert os.path.samefile(
    os.path.join(ROOT, a.gin_config[0]), registry.gin_file(env, agent)
  )
  assert a.tls_server_name == vertex.LEARNER_CERT_NAME
  assert a.token_file == largs.token_file


def test_vertex_arguments_reach_the_spec_and_bad_fields_fail():
  from google.protobuf import json_format

  job = _dry_run(
    "train_classic.sh",
    "--learner_machine_type",
    "g2-standard-8",
    "--accelerator_type",
    "NVIDIA_L4",
    "--accelerator_count",
    "2",
    "--num_actors",
    "5",
    "--max_env_steps",
    "1000",
    "--insecure",
  )
  pool0, pool1 = _parse_custom_job(job).job_spec.worker_pool_specs
  assert pool0.machine_spec.machine_type == "g2-standard-8"
  assert pool0.machine_spec.accelerator_count == 2
  assert pool1.replica_count == 5
  largs = learner_main.build_parser().parse_args(
    list(pool0.container_spec.args)
  )
  assert largs.max_env_steps == 1000 and largs.num_actors == 5
  assert largs.insecure and not largs.tls_cert
  assert "--tls_ca" not in pool1.container_spec.args
  # Negative controls: what the proto does not have fails to parse.
  for mutate in (
    lambda j: j["jobSpec"]["workerPoolSpecs"][0].update(replicaCnt=1),
    lambda j: j["jobSpec"]["workerPoolSpecs"][0]["machineSpec"].update(
      acceleratorType="NVIDIA_TESLA_A1000"
    ),
    lambda j: j["jobSpec"]["workerPoolSpecs"][1].update(replicaCount="many"),
  ):
    bad = json.loads(json.dumps(job))
    mutate(bad)
    with pytest.raises(json_format.ParseError):
      _parse_custom_job(bad)


def test_vertex_refuses_bad_arguments():
  parser = vertex.build_parser()
  base = ["--env", "atari", "--agent", "r2d2", "--bucket", "gs://b"]
  for extra, message in (
    ([], "--image_repo"),
    (["--image_repo", "r", "--num_actors", "0"], "--num_actors"),
    (["--image_repo", "r", "--bucket", "/local"], "Cloud Storage"),
    (["--image_repo", "r", "--agent", "nope"], "agent"),
  ):
    args, rest = parser.parse_known_args(base + extra)
    with pytest.raises(ValueError, match=message):
      vertex.build_job(args, rest)


def test_learner_address_from_cluster_spec():
  environ = {"CLUSTER_SPEC": json.dumps(SAMPLE_CLUSTER_SPEC)}
  learner = "cmle-training-workerpool0-ab12cd-0"
  resolve = cluster_spec.resolve_server_address
  assert resolve("from_cluster_spec:8686", environ) == f"{learner}:8686"
  assert resolve("from_cluster_spec", environ) == f"{learner}:2222"
  assert resolve("learner.example.com:8686", {}) == "learner.example.com:8686"
  assert cluster_spec.resolve_actor_id("from_cluster_spec", environ) == 1
  assert cluster_spec.resolve_actor_id("7", {}) == 7
  with pytest.raises(cluster_spec.ClusterSpecError, match="not set"):
    resolve("from_cluster_spec:8686", {})
  with pytest.raises(cluster_spec.ClusterSpecError, match="not JSON"):
    resolve("from_cluster_spec", {"CLUSTER_SPEC": "{"})
  with pytest.raises(cluster_spec.ClusterSpecError, match="1-65535"):
    resolve("from_cluster_spec:99999", environ)
  no_learner = dict(SAMPLE_CLUSTER_SPEC, cluster={"workerpool1": ["a:1"]})
  with pytest.raises(cluster_spec.ClusterSpecError, match="workerpool0"):
    resolve("from_cluster_spec", {"CLUSTER_SPEC": json.dumps(no_learner)})
  # The learner's own replica is no actor.
  chief = dict(SAMPLE_CLUSTER_SPEC, task={"type": "workerpool0", "index": 0})
  with pytest.raises(cluster_spec.ClusterSpecError, match="workerpool1"):
    cluster_spec.resolve_actor_id(
      "from_cluster_spec", {"CLUSTER_SPEC": json.dumps(chief)}
    )
  with pytest.raises(ValueError, match="neither"):
    cluster_spec.resolve_actor_id("three", {})


def test_actor_entrypoint_connects_to_the_cluster_spec_learner():
  # The real actor process resolves the learner from CLUSTER_SPEC and tries
  # it: nothing listens on 127.0.0.1:1, so it gives up after its timeout
  # and names the address it resolved.
  spec = dict(
    SAMPLE_CLUSTER_SPEC,
    cluster={"workerpool0": ["127.0.0.1:2222"], "workerpool1": ["x:2222"]},
    task={"type": "workerpool1", "index": 0},
  )
  proc = subprocess.run(
    [sys.executable]
    + ACTOR_ENTRYPOINT[1:]
    + ["--env", "classic", "--actor_id", "from_cluster_spec"]
    + ["--server_address", "from_cluster_spec:1", "--connect_timeout_s", "1"],
    cwd=ROOT,
    env=dict(os.environ, CLUSTER_SPEC=json.dumps(spec)),
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == actor_main.EXIT_PROTOCOL_ERROR, proc.stderr
  assert "learner at 127.0.0.1:1 failed" in proc.stderr
  # Without CLUSTER_SPEC the flag is refused up front, as a usage error.
  env = {k: v for k, v in os.environ.items() if k != "CLUSTER_SPEC"}
  proc = subprocess.run(
    [sys.executable]
    + ACTOR_ENTRYPOINT[1:]
    + ["--env", "classic", "--actor_id", "0"]
    + ["--server_address", "from_cluster_spec:8686"],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == 2 and "CLUSTER_SPEC" in proc.stderr, proc.stderr


def test_argparse_namespace_untouched_without_cluster_spec():
  a = actor_main.parse_args(
    ["--env", "classic", "--actor_id", "3", "--server_address", "h:1"]
  )
  assert isinstance(a, argparse.Namespace)
  assert (a.actor_id, a.server_address) == (3, "h:1")


def test_cluster_modules_need_neither_tensorflow_nor_google_sdks():
  # gcp/train_*.sh --dry_run works with a bare python3 (no venv).
  script = (
    "import sys\n"
    "before = set(sys.modules)  # site may preload namespace packages\n"
    "import seed_rl.cluster.vertex, seed_rl.cluster.cluster_spec\n"
    "new = set(sys.modules) - before\n"
    "bad = sorted(m for m in new if m.split('.')[0] in "
    "('tensorflow', 'keras', 'google', 'proto', 'grpc'))\n"
    "print('LOADED=' + ','.join(bad))\n"
  )
  proc = subprocess.run(
    [sys.executable, "-c", script],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == 0, proc.stderr
  assert "LOADED=\n" in proc.stdout, proc.stdout
