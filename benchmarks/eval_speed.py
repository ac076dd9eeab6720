"""Evaluation speed: episodes played one at a time against many at once.

Where it sits: `python -m i2a.evaluate`, the sweeps' evaluate runs and the
evaluation during training all play their episodes through
`i2a/run/evaluate.py` `run_episodes`, which steps `num_envs` environments
together, one acting call for all their windows. This script times it at
`num_envs` = 1 (one episode after another, as evaluations were played
before) and at `--envs`, side by side in one process: per row of
`train_throughput.py` (untrained networks; an I2A's envmodel is a freshly
initialised export of the real architecture), `--episodes` episodes
sampling their actions, the same seeds at both settings, alternating,
`--repeats` times after one warm-up round (which traces the acting calls
at both batch sizes).

Reported per row and setting: env steps/s (the steps of the counted
episodes over the wall time: spare episodes that keep the batch full near
the end are work the batched runner pays for), episodes/s, and the ratio
batched / one at a time (median of the repeats). A2C plays the same
episodes at both settings (tested in tests/agents/test_training.py), so
its ratio compares equal work.

  PYTHONPATH=. python benchmarks/eval_speed.py [--rows a2c/minipacman,...]
      [--episodes 32] [--envs 16] [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # train_throughput beside this file

# pylint: disable=wrong-import-position
import train_throughput
from i2a import io_utils, runs
from i2a.run import evaluate as evaluation

RESULTS = os.path.join(HERE, "results")
DEFAULT_ROWS = ("a2c/minipacman", "i2a_distillation/minipacman",
                "i2a_oracle/minipacman")


def play(network: Any, protocol: Any, episodes: int, num_envs: int,
         seed: int) -> Dict[str, float]:
  """One timed `run_episodes`: wall seconds, counted env steps, returns."""
  start = time.perf_counter()
  result = evaluation.run_episodes(network, protocol, episodes, greedy=False,
                                   seed=seed, num_envs=num_envs)
  seconds = time.perf_counter() - start
  steps = int(sum(result.lengths))
  return dict(seconds=seconds, env_steps=steps,
              env_steps_per_s=steps / seconds,
              episodes_per_s=episodes / seconds,
              mean_return=float(sum(result.returns) / episodes))


def measure(name: str, episodes: int, envs: int, repeats: int,
            tmpdir: str) -> Dict[str, Any]:
  row = train_throughput.ROWS[name]
  config = train_throughput.load_config(row, tmpdir)
  protocol = runs.protocol_from_config(config)
  precision = runs.use_precision(config)  # and the thread pools, as i2a.*
  network = evaluation.build_agent(config, protocol)
  settings = (1, envs)
  for num_envs in settings:  # warm-up: traces both batch sizes
    play(network, protocol, min(episodes, envs), num_envs, seed=10_000)
  rounds: Dict[int, List[Dict[str, float]]] = {n: [] for n in settings}
  for repeat in range(repeats):
    for num_envs in (settings if repeat % 2 == 0 else settings[::-1]):
      rounds[num_envs].append(play(network, protocol, episodes, num_envs,
                                   seed=repeat))
  summary = {}
  for num_envs, measured in rounds.items():
    summary[str(num_envs)] = dict(
        env_steps_per_s=statistics.median(
            m["env_steps_per_s"] for m in measured),
        episodes_per_s=statistics.median(m["episodes_per_s"]
                                         for m in measured),
        rounds=measured)
  ratios = [one["seconds"] / many["seconds"]
            for one, many in zip(rounds[1], rounds[envs])]
  return dict(row=name, precision=precision, episodes=episodes, envs=envs,
              settings=summary,
              speedup=statistics.median(ratios), speedups=ratios)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rows", default=",".join(DEFAULT_ROWS),
                      help="rows of train_throughput.py, comma-separated")
  parser.add_argument("--episodes", type=int, default=32)
  parser.add_argument("--envs", type=int, default=evaluation.EVAL_ENVS)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--output", default=os.path.join(RESULTS,
                                                       "eval_speed.json"))
  args = parser.parse_args()
  names = [r for r in args.rows.split(",") if r]
  unknown = sorted(set(names) - set(train_throughput.ROWS))
  if unknown:
    parser.error(f"unknown rows {unknown}; known: "
                 f"{sorted(train_throughput.ROWS)}")
  results = []
  with tempfile.TemporaryDirectory() as tmpdir:
    for name in names:
      results.append(measure(name, args.episodes, args.envs, args.repeats,
                             tmpdir))
      print(f"{name}: done", file=sys.stderr, flush=True)
  print(f"\n{args.episodes} episodes, sampled actions, median of "
        f"{args.repeats} alternating repeats\n")
  print(f"| row | env steps/s, 1 at a time | env steps/s, {args.envs} at "
        "once | episodes/s, 1 / batched | speed-up |")
  print("|---|---|---|---|---|")
  for r in results:
    one, many = r["settings"]["1"], r["settings"][str(args.envs)]
    print(f"| {r['row']} | {one['env_steps_per_s']:,.0f} | "
          f"{many['env_steps_per_s']:,.0f} | {one['episodes_per_s']:.2f} / "
          f"{many['episodes_per_s']:.2f} | {r['speedup']:.1f}x |")
  io_utils.atomic_write_json(args.output, dict(
      benchmark="eval_speed", rows=results, episodes=args.episodes,
      envs=args.envs, repeats=args.repeats, command=" ".join(sys.argv),
      host=platform.node(),
      cpus=os.cpu_count(),
      date=datetime.datetime.now().isoformat(timespec="seconds")))
  print(f"\nwrote {args.output}")


if __name__ == "__main__":
  main()
