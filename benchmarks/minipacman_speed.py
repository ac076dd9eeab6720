"""Measures MiniPacman's speed on one CPU core, with uniformly random actions.

Reports steps per second of the bare `MiniPacmanEnv` (episodes reset when
Pac-Man dies, resets included in the time), of the same env behind
`gymnasium.make`'s default wrappers, and of `clone_state` + `restore_state`
pairs (the perfect-simulator oracle's cost). Actions are drawn before the
clock starts. Best of `--repeats` runs; prints the numbers and writes JSON.

Run from the repository root:
  PYTHONPATH=. python benchmarks/minipacman_speed.py [--steps 200000]
"""

import argparse
import datetime
import json
import os
import platform
import time
from typing import Callable, Dict, List

import gymnasium
import numpy as np

from i2a.environments import minipacman


def pin_to_one_core() -> str:
  """Keeps this process on one core (Linux); returns which, for the record."""
  if not hasattr(os, "sched_setaffinity"):
    return "not pinned (no sched_setaffinity)"
  core = min(os.sched_getaffinity(0))
  os.sched_setaffinity(0, {core})
  return f"core {core}"


def steps_per_second(env: gymnasium.Env, actions: List[int],
                     seed: int) -> float:
  env.reset(seed=seed)
  step, reset = env.step, env.reset
  start = time.perf_counter()
  for action in actions:
    if step(action)[2]:
      reset()
  return len(actions) / (time.perf_counter() - start)


def copies_per_second(env: minipacman.MiniPacmanEnv, count: int,
                      seed: int) -> float:
  env.reset(seed=seed)
  for action in [minipacman.UP] * 3:
    env.step(action)
  clone, restore = env.clone_state, env.restore_state
  start = time.perf_counter()
  for _ in range(count):
    restore(clone())
  return count / (time.perf_counter() - start)


def best_of(repeats: int, measure: Callable[[], float]) -> float:
  return max(measure() for _ in range(repeats))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=200_000)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--task", default="regular",
                      choices=list(minipacman.TASKS))
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--output",
                      default="benchmarks/results/minipacman_speed.json")
  args = parser.parse_args()

  core = pin_to_one_core()
  actions = np.random.default_rng(args.seed).integers(
      0, minipacman.NUM_ACTIONS, size=args.steps).tolist()
  minipacman.register()
  raw_env = minipacman.MiniPacmanEnv(args.task)
  made_env = gymnasium.make(f"MiniPacman-{args.task}-v0")
  results: Dict[str, object] = {
      "steps_per_second": best_of(args.repeats, lambda: steps_per_second(
          raw_env, actions, args.seed)),
      "gymnasium_make_steps_per_second": best_of(
          args.repeats, lambda: steps_per_second(made_env, actions,
                                                 args.seed)),
      "clone_restore_pairs_per_second": best_of(
          args.repeats, lambda: copies_per_second(
              raw_env, max(args.steps // 10, 1), args.seed)),
      "task": args.task,
      "steps": args.steps,
      "repeats": args.repeats,
      "seed": args.seed,
      "pinned_to": core,
      "python": platform.python_version(),
      "numpy": np.__version__,
      "gymnasium": gymnasium.__version__,
      "machine": f"{platform.machine()} {platform.processor()}".strip(),
      "platform": platform.platform(),
      "date": datetime.datetime.now().isoformat(timespec="seconds"),
  }
  for key in ("steps_per_second", "gymnasium_make_steps_per_second",
              "clone_restore_pairs_per_second"):
    print(f"{key}: {results[key]:,.0f}")
  os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
  with open(args.output, "w") as f:
    json.dump(results, f, indent=2)
  print(f"wrote {args.output}")


if __name__ == "__main__":
  main()
