"""The emulator oracle on MiniPacman: snapshots stepped one by one against
stepped as arrays (the batch emulator), side by side in one process.

Where it sits: an I2A over the emulator oracle (envmodels/oracle.py) runs
its K x tau imagined steps per window on the real environment, in the
actor. The oracle's generic path restores one worker environment from
each snapshot, steps it and snapshots it again; for MiniPacman,
`i2a.environments.minipacman_oracle` steps every row of a query as
arrays, with the same outcomes (tests/envmodels/test_oracle_batched.py).
This script measures what that buys, alternating the two ways `--repeats`
times after a warm-up:

  host       the oracle's own work per acting step, as the agent queries
             it: snapshots of `--envs` live games, tau steps of B x K rows
             (the `minipacman` I2A's K = 5, tau = 3, one primitive action
             per step), the release; microseconds per rollout step.
  training   the `i2a_oracle/minipacman` row of train_throughput.py (the
             real Trainer, in-process transport): env steps/s and the
             actor's ms per unroll, with the batch emulator and without
             (make_oracle given none).

  PYTHONPATH=. python benchmarks/oracle_speed.py [--repeats 3]
      [--host_queries 200] [--updates 20] [--warmup 3] [--output FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import os
import platform
import statistics
import sys
import time
from typing import Any, Dict, Iterator, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # train_throughput beside this file

# pylint: disable=wrong-import-position
import numpy as np

import train_throughput
from envmodels import oracle as oracle_lib
from envmodels import precision as precision_lib
from i2a import io_utils
from i2a.environments import make_env, make_vector_env, minipacman_oracle
from i2a.environments import preset

RESULTS = os.path.join(HERE, "results")
ROW = "i2a_oracle/minipacman"
WAYS = ("one_by_one", "arrays")


def host_oracles(protocol: Any) -> Dict[str, oracle_lib.OracleModel]:
  env_fn = functools.partial(make_env, protocol)
  probe = env_fn()
  spec = oracle_lib.spec_for_env(probe, jump=1)
  probe.close()
  return {
      "one_by_one": oracle_lib.OracleModel(spec, env_fn=env_fn),
      "arrays": oracle_lib.OracleModel(
          spec, env_fn=env_fn,
          batch_emulator=minipacman_oracle.batch_emulator(protocol))}


def host_round(oracle: oracle_lib.OracleModel, envs: Any, queries: int,
               rollouts: int, depth: int, seed: int) -> Dict[str, float]:
  """`queries` acting steps' worth of oracle work; the live games move on
  one random step per query, as an actor's do."""
  rng = np.random.RandomState(seed)
  n = envs.num_envs
  seconds = 0.0
  for _ in range(queries):
    start = time.perf_counter()
    state = oracle.initial_state_from_envs(envs)
    first = state.handle.numpy()
    handles = np.repeat(first, rollouts)
    made = [first]
    for _ in range(depth):
      actions = rng.randint(0, 5, (len(handles), 1)).astype(np.int32)
      handles = oracle._step_host(handles, actions)[0]  # pylint: disable=protected-access
      made.append(handles)
    oracle.release(np.concatenate(made))
    seconds += time.perf_counter() - start
    envs.step(rng.randint(0, 5, n))
  steps = queries * n * rollouts * depth
  return dict(seconds=seconds, rollout_steps=steps,
              us_per_rollout_step=1e6 * seconds / steps)


def host(repeats: int, queries: int, num_envs: int, rollouts: int,
         depth: int) -> Dict[str, Any]:
  protocol = preset("minipacman")
  oracles = host_oracles(protocol)
  envs = make_vector_env(protocol, num_envs)
  envs.reset(seed=0)
  for oracle in oracles.values():  # warm-up
    host_round(oracle, envs, 5, rollouts, depth, seed=99)
  rounds: Dict[str, List[Dict[str, float]]] = {way: [] for way in WAYS}
  for repeat in range(repeats):
    for way in (WAYS if repeat % 2 == 0 else WAYS[::-1]):
      rounds[way].append(host_round(oracles[way], envs, queries, rollouts,
                                    depth, seed=repeat))
  ratios = [a["seconds"] / b["seconds"]
            for a, b in zip(rounds["one_by_one"], rounds["arrays"])]
  return dict(
      envs=num_envs, rollouts=rollouts, depth=depth, queries=queries,
      us_per_rollout_step={
          way: statistics.median(r["us_per_rollout_step"] for r in rs)
          for way, rs in rounds.items()},
      speedup=statistics.median(ratios), speedups=ratios, rounds=rounds)


@contextlib.contextmanager
def without_batch_emulator() -> Iterator[None]:
  """make_oracle builds the oracle without a batch emulator meanwhile."""
  original = minipacman_oracle.batch_emulator
  minipacman_oracle.batch_emulator = lambda protocol: None
  try:
    yield
  finally:
    minipacman_oracle.batch_emulator = original


def training(repeats: int, updates: int, warmup: int) -> Dict[str, Any]:
  row = train_throughput.ROWS[ROW]
  rounds: Dict[str, List[Dict[str, Any]]] = {way: [] for way in WAYS}
  for repeat in range(repeats):
    for way in (WAYS if repeat % 2 == 0 else WAYS[::-1]):
      context = (without_batch_emulator() if way == "one_by_one" else
                 contextlib.nullcontext())
      with context:
        rounds[way].append(train_throughput.measure(row, updates, warmup))
      print(f"training {way} repeat {repeat}: "
            f"{rounds[way][-1]['env_steps_per_s']:,.0f} env steps/s",
            file=sys.stderr, flush=True)
  ratios = [b["env_steps_per_s"] / a["env_steps_per_s"]
            for a, b in zip(rounds["one_by_one"], rounds["arrays"])]
  summary = {
      way: dict(env_steps_per_s=statistics.median(
                    r["env_steps_per_s"] for r in rs),
                actor_ms_per_unroll=statistics.median(
                    r["actor_ms_per_unroll"] for r in rs),
                learner_ms_per_step=statistics.median(
                    r["learner_ms_per_step"] for r in rs))
      for way, rs in rounds.items()}
  return dict(row=ROW, updates=updates, warmup=warmup, ways=summary,
              speedup=statistics.median(ratios), speedups=ratios,
              precision=rounds["arrays"][0]["precision"], rounds=rounds)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--host_queries", type=int, default=200)
  parser.add_argument("--envs", type=int, default=16)
  parser.add_argument("--updates", type=int, default=20)
  parser.add_argument("--warmup", type=int, default=3)
  parser.add_argument("--skip_training", action="store_true")
  parser.add_argument("--threads", default=precision_lib.THREADS_AUTO,
                      help="TensorFlow's thread pools, as train_throughput")
  parser.add_argument("--output", default=os.path.join(RESULTS,
                                                       "oracle_speed.json"))
  args = parser.parse_args()
  threads = precision_lib.set_threads(args.threads)  # before any TF op
  # The `minipacman` I2A: K = 5 (one rollout per action), tau = 3.
  host_result = host(args.repeats, args.host_queries, args.envs,
                     rollouts=5, depth=3)
  print(f"host: {args.envs} games x K = 5 x tau = 3, median of "
        f"{args.repeats} alternating repeats of {args.host_queries} "
        "queries\n")
  print("| way | us per rollout step |")
  print("|---|---|")
  for way in WAYS:
    print(f"| {way} | {host_result['us_per_rollout_step'][way]:.1f} |")
  print(f"\nspeed-up {host_result['speedup']:.1f}x\n")
  training_result = None
  if not args.skip_training:
    training_result = training(args.repeats, args.updates, args.warmup)
    print(f"training ({ROW}, {args.updates} updates after {args.warmup}, "
          f"median of {args.repeats})\n")
    print("| way | env steps/s | actor ms/unroll | learner ms/step |")
    print("|---|---|---|---|")
    for way in WAYS:
      w = training_result["ways"][way]
      print(f"| {way} | {w['env_steps_per_s']:,.0f} | "
            f"{w['actor_ms_per_unroll']:.1f} | "
            f"{w['learner_ms_per_step']:.1f} |")
    print(f"\nspeed-up {training_result['speedup']:.2f}x")
  io_utils.atomic_write_json(args.output, dict(
      benchmark="oracle_speed", host=host_result, training=training_result,
      repeats=args.repeats, threads=threads, command=" ".join(sys.argv),
      machine=platform.node(), cpus=os.cpu_count(),
      date=datetime.datetime.now().isoformat(timespec="seconds")))
  print(f"\nwrote {args.output}")


if __name__ == "__main__":
  main()
