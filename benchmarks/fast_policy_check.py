"""Issue 12: the lean sampler's `sample()` with and without `hca_rllib.fast_policy`,
interleaved in one process (process CPU time per 512-step sample, median over calls),
on MinAtar Breakout 8 envs x 64 steps; also prints the conv kernel the runner picked and
whether both runners, seeded alike with the same weights, took the same actions.

    PYTHONPATH=. nice -n 19 .venv/bin/python benchmarks/fast_policy_check.py [calls]
"""

import sys
import time

import numpy as np
import torch


def main(calls: int = 10) -> None:
    torch.set_num_threads(1)
    from hca_rllib import A2CConfig
    from hca_rllib.env_runner import LeanEnvRunner, PlainLeanEnvRunner

    def runner(cls):
        config = (A2CConfig().environment("minatar/Breakout")
                  .env_runners(num_envs_per_env_runner=8, rollout_fragment_length=64)
                  .training(train_batch_size_per_learner=512).debugging(seed=0))
        config.validate()
        return cls(config=config)

    fast, plain = runner(LeanEnvRunner), runner(PlainLeanEnvRunner)
    plain.module.set_state(fast.module.get_state())
    torch.manual_seed(0)
    eps_fast = [fast.sample() for _ in range(3)]
    torch.manual_seed(0)
    eps_plain = [plain.sample() for _ in range(3)]
    same = all(np.array_equal(x.get_actions(), y.get_actions())
               for a, b in zip(eps_fast, eps_plain) for x, y in zip(a, b))
    print("conv kernels:", fast._conv_backends.choice, "| same actions:", same)
    times = {"fast": [], "plain": []}
    for _ in range(calls):
        for name, r in (("fast", fast), ("plain", plain)):
            t = time.process_time()
            r.sample()
            times[name].append(time.process_time() - t)
    med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    print(f"ms per sample(): fast {med['fast']:.1f}, plain {med['plain']:.1f}, "
          f"plain / fast {med['plain'] / med['fast']:.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
