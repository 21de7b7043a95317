"""MuJoCo (gymnasium v5) and other continuous-control environments for actors.

gin binding names: `mujoco.create_environment.env_id = 'Hopper-v5'`,
`mujoco.create_environment.parallel = 'subprocess'`, ...

Observations are float32 (MuJoCo's float64 is cast). Time limits (1000 steps
for the v5 tasks, 200 for Pendulum) are reported as truncation, so the learner
bootstraps from the final observation. Actions from the learner are clipped to
the action Box in the actor right before `env.step` (EnvRunner does this for
every continuous action spec); the learner's stored actions stay unclipped,
which keeps log-probabilities of Gaussian policies exact.
"""

from __future__ import annotations

from seed_rl.actors.batched_env import BatchedEnv
from seed_rl.classic.env import gym_domain_factory

KNOWN_TASKS = (
  "HalfCheetah-v5",
  "Hopper-v5",
  "Walker2d-v5",
  "Ant-v5",
  "Humanoid-v5",
  "Pendulum-v1",
)


def _require_continuous(env: BatchedEnv, env_id: str) -> None:
  """Closes `env` and raises if its actions are discrete."""
  if env.action_spec.is_discrete:
    env.close()
    raise ValueError(
      f"mujoco.create_environment: {env_id!r} has a discrete action space "
      f"({env.action_spec.num_values} actions); the mujoco domain is for "
      f"continuous control ({', '.join(KNOWN_TASKS)}); use "
      "classic.create_environment for discrete-action envs"
    )


create_environment = gym_domain_factory(
  __name__,
  "mujoco",
  default_env_id="HalfCheetah-v5",
  check=_require_continuous,
  doc="""K continuous-action envs (defaults to HalfCheetah-v5).

  Args:
    num_envs: K.
    seed: env i is seeded with `seed + i`.
    env_id: a gymnasium id with a Box action space; tested with
      KNOWN_TASKS. Discrete-action ids are rejected (use the classic domain).
    max_episode_steps: time limit (truncation); None keeps the registered one.
    env_kwargs: keyword arguments for gym.make (e.g. {'ctrl_cost_weight': 0.1}).
    parallel: 'inline' (default) or 'subprocess'. A HalfCheetah step costs
      ~50 us, about a worker round trip (2 shared cores: 20k env steps/s
      inline vs 16k in 2 workers at K=8); 'subprocess' pays off with spare
      cores and heavier tasks (Humanoid, Ant).
    num_workers, start_method: for 'subprocess', see make_batched_env.

  Returns:
    A BatchedEnv with SEED autoreset semantics.
  """,
)
