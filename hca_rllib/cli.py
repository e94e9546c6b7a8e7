"""Command line: `hca-rllib train` (also `python -m hca_rllib train`).

Trains on an embedded local Ray (loopback only, sized to this machine) unless
`--address` or `RAY_ADDRESS` points at a cluster. Writes the resolved config and one
JSON line per iteration into `--output`, and a checkpoint at the end.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

ALGORITHMS = ("HCA", "A2C")


class UsageError(Exception):
    """A bad argument: reported as one line, exit status 2, no traceback."""


def _parse_value(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_overrides(pairs: List[str]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise UsageError(f"--set expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        out[key.strip()] = _parse_value(value)
    return out


def build_config(args: argparse.Namespace):
    from hca_rllib import A2CConfig, HCAConfig
    from hca_rllib.credit import CREDIT_MODES

    if args.algo not in ALGORITHMS:
        raise UsageError(f"unknown algorithm {args.algo!r}; choose one of {list(ALGORITHMS)}")
    config = A2CConfig() if args.algo == "A2C" else HCAConfig()
    if args.credit is not None:
        if args.credit not in CREDIT_MODES:
            raise UsageError(f"unknown credit mode {args.credit!r}; choose one of {list(CREDIT_MODES)}")
        config.training(credit=args.credit)
    config.environment(args.env)
    config.env_runners(
        num_env_runners=args.num_env_runners,
        num_envs_per_env_runner=args.num_envs_per_env_runner,
    )
    config.debugging(seed=args.seed)
    overrides = parse_overrides(args.set)
    unknown = [key for key in overrides if not hasattr(config, key)]
    if unknown:
        raise UsageError(f"unknown config key(s) in --set: {unknown}")
    config.update_from_dict(overrides)
    try:
        config.validate()
    except ValueError as error:
        raise UsageError(str(error).splitlines()[0]) from None
    return config


def _check_env(env_id: str) -> None:
    import gymnasium as gym

    import hca_rllib  # noqa: F401  (registers the known-answer environments)

    if ":" in env_id:
        return  # gymnasium's "module:EnvName-v0" form imports the module itself
    if env_id not in gym.envs.registry:
        import difflib

        close = difflib.get_close_matches(env_id, list(gym.envs.registry), n=3)
        hint = f"; did you mean {close}?" if close else ""
        raise UsageError(f"unknown environment id {env_id!r}{hint}")


def _init_ray(address: str | None) -> None:
    import ray

    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address)
    else:
        ray.init(
            address="local",
            num_cpus=os.cpu_count() or 1,
            include_dashboard=False,
            object_store_memory=300 * 2**20,
            log_to_driver=False,
        )


def train(args: argparse.Namespace) -> int:
    _check_env(args.env)
    config = build_config(args)
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    (output / "config.json").write_text(json.dumps(config.to_dict(), default=repr, indent=1))
    _init_ray(args.address)
    algo = config.build_algo()
    start, steps = time.time(), 0
    with open(output / "results.jsonl", "a") as results_file:
        while steps < args.stop_timesteps:
            result = algo.train()
            steps = result["num_env_steps_sampled_lifetime"]
            learner = result.get("learners", {}).get("default_policy", {})
            line = {
                "iteration": result["training_iteration"],
                "env_steps": steps,
                "episode_return_mean": result.get("env_runners", {}).get("episode_return_mean"),
                "mutual_information": learner.get("info/mutual_information"),
                "reliability": learner.get("credit/reliability"),
                "policy_loss": learner.get("policy_loss"),
                "vf_loss": learner.get("vf_loss"),
                "entropy": learner.get("entropy"),
                "time_s": time.time() - start,
            }
            results_file.write(json.dumps(line, default=float) + "\n")
            results_file.flush()
            rate = steps / max(time.time() - start, 1e-9)
            left = max(args.stop_timesteps - steps, 0) / max(rate, 1e-9)
            ret = line["episode_return_mean"]
            mi = line["mutual_information"]
            print(
                f"steps {steps:>9,}  {rate:7.0f} steps/s  return "
                f"{'   n/a' if ret is None else f'{ret:6.1f}'}  MI "
                f"{'   n/a' if mi is None else f'{mi:+.4f}'} nats  left {left:5.0f} s",
                flush=True,
            )
    checkpoint = algo.save_to_path(str((output / "checkpoint").resolve()))
    print(f"checkpoint: {checkpoint}")
    algo.stop()
    return 0


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hca-rllib", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    t = commands.add_parser("train", help="train A2C or an HCA credit mode")
    t.add_argument("--algo", default="HCA", help="HCA or A2C")
    t.add_argument("--credit", default=None, help="a2c, hca, c2a2c or mix")
    t.add_argument("--env", default="CartPole-v1", help="any gymnasium id, or HCA/<Task>-v0")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--stop-timesteps", type=int, default=100_000)
    t.add_argument("--num-env-runners", type=int, default=0)
    t.add_argument("--num-envs-per-env-runner", type=int, default=8)
    t.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any config field, e.g. --set lr=3e-4 --set hca_ratio_clip=5")
    t.add_argument("--output", default="runs/train", help="directory for results and checkpoint")
    t.add_argument("--address", default=None, help="Ray cluster address (default: embedded local Ray)")
    return parser


def main(argv: List[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        if args.command == "train":
            return train(args)
    except UsageError as error:
        print(f"hca-rllib: error: {error}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
