"""The toy domain's evaluation protocol, as docs/extending.md's recipe
says: `python -m seed_rl.evaluate` on a toy_domain run takes
--time_limit N (truncate the scored episodes after N steps instead of the
run's 4L) and its JSON line adds "time_limit"."""

import argparse
from typing import Any, Dict

from seed_rl.common.evaluation import EvaluationProtocol


class CorridorEvaluation(EvaluationProtocol):
  name = "toy_domain"
  flags = ("time_limit",)

  def add_flags(self, parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
      "--time_limit",
      type=int,
      default=None,
      metavar="N",
      help="toy_domain: truncate episodes after N steps (default: 4L)",
    )

  def check(self, args: argparse.Namespace) -> None:
    if args.time_limit is not None and args.time_limit < 1:
      raise ValueError(f"--time_limit must be >= 1, got {args.time_limit}")

  def env_overrides(self, args: argparse.Namespace) -> Dict[str, Any]:
    if args.time_limit is None:
      return {}
    return {"time_limit": args.time_limit}

  def extra_fields(
    self, args: argparse.Namespace, env, mean_return: float
  ) -> Dict[str, Any]:
    length = env.observation_spec.shape[0]  # one-hot positions
    return {"time_limit": args.time_limit or 4 * length}


EVALUATION_PROTOCOL = CorridorEvaluation()
