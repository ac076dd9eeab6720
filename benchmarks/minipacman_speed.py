"""Measures MiniPacman's speed on one CPU core, with uniformly random actions.

Reports, in one run:
  * steps per second of the bare `MiniPacmanEnv` (episodes reset when
    Pac-Man dies, resets included in the time), of the same env behind
    `gymnasium.make`'s default wrappers, and of `clone_state` +
    `restore_state` pairs (the perfect-simulator oracle's cost);
  * env steps per second through the protocol processing (the
    'minipacman' preset for the task: padding to 16x24, episode cap,
    same-step autoreset, infos) of `make_vector_env`'s `VectorMiniPacman`
    against the SyncVectorEnv of single envs it replaces
    (`vectorized=False`), for N = 16 and 64 environments, and their ratio
    (aim: >= 5x at N = 16).

Actions are drawn before the clock starts. The vector envs are timed
round-robin, best of `--vector_repeats` runs each, so both see the same
load (the machine may be shared); the rest is best of `--repeats`.
Prints a markdown table and writes JSON.

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

from i2a import environments
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


def vector_steps_per_second(envs: gymnasium.vector.VectorEnv,
                            actions: np.ndarray, seed: int) -> float:
  """Env steps per second (N per vector step) of a same-step autoreset
  vector env under actions int [T, N]."""
  envs.reset(seed=seed)
  step = envs.step
  start = time.perf_counter()
  for row in actions:
    step(row)
  return actions.size / (time.perf_counter() - start)


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


def vector_comparison(protocol: environments.Protocol, num_envs: int,
                      vector_steps: int, sync_steps: int, repeats: int,
                      seed: int) -> Dict[str, float]:
  """VectorMiniPacman against the SyncVectorEnv at `num_envs`, timed
  round-robin (best of `repeats` each)."""
  rng = np.random.default_rng(seed)
  actions = rng.integers(0, minipacman.NUM_ACTIONS,
                         size=(max(vector_steps, sync_steps) // num_envs,
                               num_envs))
  vector = environments.make_vector_env(protocol, num_envs)
  sync = environments.make_vector_env(protocol, num_envs, vectorized=False)
  assert type(vector).__name__ == "VectorMiniPacman", type(vector)
  best = {"vector": 0.0, "sync": 0.0}
  for _ in range(repeats):
    best["vector"] = max(best["vector"], vector_steps_per_second(
        vector, actions[:vector_steps // num_envs], seed))
    best["sync"] = max(best["sync"], vector_steps_per_second(
        sync, actions[:sync_steps // num_envs], seed))
  vector.close()
  sync.close()
  return {"num_envs": num_envs,
          "vector_env_steps_per_second": best["vector"],
          "sync_vector_env_steps_per_second": best["sync"],
          "speedup": best["vector"] / best["sync"]}


def markdown(results: Dict[str, object]) -> str:
  lines = [
      f"MiniPacman-{results['task']}-v0, one core "
      f"({results['pinned_to']}), load average {results['load_average']}",
      "",
      "| what | steps/s |",
      "|---|---|",
      f"| bare MiniPacmanEnv | {results['steps_per_second']:,.0f} |",
      "| gymnasium.make | "
      f"{results['gymnasium_make_steps_per_second']:,.0f} |",
      "| make_env (protocol wrappers) | "
      f"{results['protocol_env_steps_per_second']:,.0f} |",
      "| clone + restore pairs | "
      f"{results['clone_restore_pairs_per_second']:,.0f} |",
      "",
      "| N | VectorMiniPacman env steps/s | SyncVectorEnv env steps/s | "
      "speedup |",
      "|---|---|---|---|",
  ]
  for row in results["vector"]:
    lines.append(f"| {row['num_envs']} | "
                 f"{row['vector_env_steps_per_second']:,.0f} | "
                 f"{row['sync_vector_env_steps_per_second']:,.0f} | "
                 f"{row['speedup']:.1f}x |")
  return "\n".join(lines)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=200_000,
                      help="single-env steps per measurement")
  parser.add_argument("--vector_steps", type=int, default=200_000,
                      help="env steps per VectorMiniPacman measurement")
  parser.add_argument("--sync_steps", type=int, default=40_000,
                      help="env steps per SyncVectorEnv measurement")
  parser.add_argument("--num_envs", type=int, nargs="+", default=[16, 64])
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--vector_repeats", type=int, default=5,
                      help="round-robin repeats of the vector comparison")
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
  protocol = environments.preset(
      "minipacman", env_id=f"MiniPacman-{args.task}-v0")
  raw_env = minipacman.MiniPacmanEnv(args.task)
  made_env = gymnasium.make(f"MiniPacman-{args.task}-v0")
  protocol_env = environments.make_env(protocol)
  results: Dict[str, object] = {
      "steps_per_second": best_of(args.repeats, lambda: steps_per_second(
          raw_env, actions, args.seed)),
      "gymnasium_make_steps_per_second": best_of(
          args.repeats, lambda: steps_per_second(made_env, actions,
                                                 args.seed)),
      "protocol_env_steps_per_second": best_of(
          args.repeats, lambda: steps_per_second(
              protocol_env, actions[:args.steps // 4], args.seed)),
      "clone_restore_pairs_per_second": best_of(
          args.repeats, lambda: copies_per_second(
              raw_env, max(args.steps // 10, 1), args.seed)),
      "vector": [vector_comparison(protocol, n, args.vector_steps,
                                   args.sync_steps, args.vector_repeats,
                                   args.seed)
                 for n in args.num_envs],
      "protocol": protocol.to_json(),
      "task": args.task,
      "steps": args.steps,
      "vector_steps": args.vector_steps,
      "sync_steps": args.sync_steps,
      "repeats": args.repeats,
      "vector_repeats": args.vector_repeats,
      "seed": args.seed,
      "pinned_to": core,
      "load_average": (round(os.getloadavg()[0], 2)
                       if hasattr(os, "getloadavg") else None),
      "python": platform.python_version(),
      "numpy": np.__version__,
      "gymnasium": gymnasium.__version__,
      "machine": f"{platform.machine()} {platform.processor()}".strip(),
      "platform": platform.platform(),
      "date": datetime.datetime.now().isoformat(timespec="seconds"),
  }
  print(markdown(results))
  os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
  with open(args.output, "w") as f:
    json.dump(results, f, indent=2)
  print(f"wrote {args.output}")


if __name__ == "__main__":
  main()
