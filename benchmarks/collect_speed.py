"""Raw vectorised env stepping against collection onto disk.

Measures, in one run and on the same protocol (MsPacman, 'small' preset):
  raw         make_vector_env + uniform random actions, nothing written
  disk        the same plus the dataset SplitWriter (what `i2a.collect` does)
and MiniPacman single-env steps/s. Writes benchmarks/results/collect_speed.json
and prints a markdown table. Aim: collection >= 80% of raw stepping.

  python benchmarks/collect_speed.py [--steps 4000] [--num_envs 8]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

from i2a import environments
from i2a.run import collect as collection

RESULTS = os.path.join(os.path.dirname(__file__), "results")


def _minipacman_steps_per_s(steps: int) -> float:
  env = environments.make_env(environments.preset("minipacman"))
  env.reset(seed=0)
  actions = np.random.default_rng(0).integers(0, 5, steps)
  start = time.perf_counter()
  for action in actions:
    _, _, terminated, truncated, _ = env.step(int(action))
    if terminated or truncated:
      env.reset()
  return steps / (time.perf_counter() - start)


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=4000)
  parser.add_argument("--num_envs", type=int, default=8)
  parser.add_argument("--repeats", type=int, default=2)
  args = parser.parse_args()
  protocol = environments.preset("small")
  policy = collection.uniform_random_policy(environments.num_actions(protocol))
  modes = ("raw", "disk")
  rates = {mode: [] for mode in modes}
  with tempfile.TemporaryDirectory() as tmp:
    for repeat in range(args.repeats):  # Interleaved: same machine state.
      for mode in modes:
        split_dir = (os.path.join(tmp, f"{mode}{repeat}")
                     if mode == "disk" else None)
        stats = collection.collect_split(
            protocol, split_dir, args.steps, args.num_envs, repeat, policy,
            progress_name=f"bench {mode}")
        rates[mode].append(stats.steps_per_s)
  best = {mode: max(r) for mode, r in rates.items()}
  result = {
      "protocol": protocol.to_json(), "num_envs": args.num_envs,
      "steps": args.steps, "steps_per_s": best,
      "ratio_to_raw": {m: best[m] / best["raw"] for m in best},
      "minipacman_steps_per_s": _minipacman_steps_per_s(50_000),
  }
  os.makedirs(RESULTS, exist_ok=True)
  with open(os.path.join(RESULTS, "collect_speed.json"), "w") as f:
    json.dump(result, f, indent=2)
  print("\n| mode | env steps/s | ratio to raw |\n|---|---|---|")
  for mode in modes:
    print(f"| {mode} | {best[mode]:,.0f} | {result['ratio_to_raw'][mode]:.2f} |")
  print(f"\nMiniPacman (one env, protocol wrappers): "
        f"{result['minipacman_steps_per_s']:,.0f} steps/s")


if __name__ == "__main__":
  main()
