"""When each seed of a sweep began to learn: its training episodes' mean
return in each stretch of env steps, and the first env step at which the
running mean of its last W training episodes rose above a threshold.

  SWEEP_DIR/train/CONFIG/seedN/episodes.csv (or a committed archive's
  benchmarks/results/<sweep>/archive/train/...), one row per training
  episode (step, env_steps, episode_return, ...: i2a/run/train.py)
      -> per seed: the mean return of the episodes in each --bin of env
         steps (default 1M), and the onset: the env steps logged with the
         episode at which the mean of the last --window episodes (default
         200) first exceeds --threshold (default 0: on MiniPacman-hunt,
         above the -20 of being caught at the start)
      -> OUT/learning_onset.md, .json   (with --output; printed always)

A description of the curves, read from the workdirs alone: on tasks where
seeds stay at a plateau for millions of env steps and then leave it, the
onset separates "learns later" from "learns less", which a final return
over 3 seeds cannot. It tests nothing; the sweep report's intervals do.

  PYTHONPATH=. python benchmarks/learning_onset.py SWEEP_DIR
      [--configs a2c,distill_dssm_det] [--bin 1000000] [--window 200]
      [--threshold 0] [--output DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from i2a import io_utils, metrics  # pylint: disable=g-import-not-at-top

_SEED = re.compile(r"seed(\d+)$")


def read_episodes(path: str) -> Dict[str, np.ndarray]:
  """episodes.csv -> {'env_steps': int64 [E], 'episode_return': [E]}, in
  the order the run logged them."""
  rows = metrics.CsvLog(path, one_per_step=False).rows()
  missing = {"env_steps", "episode_return"} - set(rows[0]) if rows else ()
  if missing:
    raise ValueError(f"{path}: expected the columns env_steps and "
                     f"episode_return (i2a/run/train.py's episodes.csv), "
                     f"missing {sorted(missing)}.")
  return dict(
      env_steps=np.asarray([int(r["env_steps"]) for r in rows], np.int64),
      episode_return=np.asarray([float(r["episode_return"]) for r in rows],
                                np.float64))


def bin_means(env_steps: np.ndarray, returns: np.ndarray, bin_size: int
              ) -> List[Optional[float]]:
  """The mean return of the episodes logged in each [k*bin, (k+1)*bin) of
  env steps, k = 0 .. the last episode's bin (None where a bin has none).
  An episode logged at exactly (k+1)*bin counts in bin k: the log at a
  million env steps closes the first million."""
  if not len(env_steps):
    return []
  index = np.maximum(env_steps - 1, 0) // bin_size  # [E]
  means: List[Optional[float]] = []
  for k in range(int(index.max()) + 1):
    chosen = returns[index == k]
    means.append(float(chosen.mean()) if len(chosen) else None)
  return means


def onset(env_steps: np.ndarray, returns: np.ndarray, window: int,
          threshold: float) -> Optional[int]:
  """The env steps logged with the first episode at which the mean of the
  last `window` episodes (that one included) exceeds `threshold`; None if
  it never does (or the run has fewer than `window` episodes)."""
  if len(returns) < window:
    return None
  sums = np.cumsum(np.concatenate([[0.0], returns]))
  running = (sums[window:] - sums[:-window]) / window  # [E - window + 1]
  above = np.flatnonzero(running > threshold)
  return None if not len(above) else int(env_steps[above[0] + window - 1])


def seeds_of(sweep_dir: str, config: str) -> List[str]:
  """The seed directories of train/CONFIG, in seed order."""
  directory = os.path.join(sweep_dir, "train", config)
  seeds = [(int(m.group(1)), name) for name in os.listdir(directory)
           if (m := _SEED.match(name))]
  return [os.path.join(directory, name) for _, name in sorted(seeds)]


def describe(sweep_dir: str, configs: Optional[Sequence[str]],
             bin_size: int, window: int, threshold: float
             ) -> List[Dict[str, Any]]:
  """One entry per (configuration, seed) with episodes: its bins' means,
  its onset, its episode count and last env steps."""
  train = os.path.join(sweep_dir, "train")
  if not os.path.isdir(train):
    raise FileNotFoundError(
        f"{sweep_dir} has no train/ directory: expected a sweep workdir "
        "(python -m i2a.sweep --workdir) or its archive.")
  known = sorted(os.listdir(train))
  for config in configs or ():
    if config not in known:
      raise ValueError(f"--configs: {config!r} has no runs in {train}; "
                       f"it has {', '.join(known)}.")
  rows = []
  for config in configs or known:
    for seed_dir in seeds_of(sweep_dir, config):
      path = os.path.join(seed_dir, metrics.EPISODES)
      if not os.path.exists(path):
        continue
      episodes = read_episodes(path)
      steps, returns = episodes["env_steps"], episodes["episode_return"]
      rows.append(dict(
          config=config, seed=os.path.basename(seed_dir),
          episodes=int(len(returns)),
          last_env_steps=int(steps[-1]) if len(steps) else 0,
          bin_means=bin_means(steps, returns, bin_size),
          onset=onset(steps, returns, window, threshold)))
  return rows


def _steps(n: Optional[int]) -> str:
  return "never" if n is None else f"{n / 1e6:.2f}M"


def markdown(rows: Sequence[Dict[str, Any]], bin_size: int, window: int,
             threshold: float) -> str:
  bins = max((len(r["bin_means"]) for r in rows), default=0)
  width = f"{bin_size / 1e6:g}M"
  head = ["configuration", "seed", "episodes", "env steps"] + [
      f"mean return, {width} #{k + 1}" for k in range(bins)] + [
          f"onset (mean of {window} > {threshold:g})"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    means = [("" if m is None else f"{m:.1f}") for m in r["bin_means"]]
    means += [""] * (bins - len(means))
    lines.append("| " + " | ".join(
        [r["config"], r["seed"], str(r["episodes"]),
         _steps(r["last_env_steps"])] + means + [_steps(r["onset"])]) +
                 " |")
  return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("sweep_dir")
  parser.add_argument("--configs", default="",
                      help="comma-separated configurations (default: all)")
  parser.add_argument("--bin", type=int, default=1_000_000)
  parser.add_argument("--window", type=int, default=200)
  parser.add_argument("--threshold", type=float, default=0.0)
  parser.add_argument("--output", default="")
  args = parser.parse_args(argv)
  if args.bin < 1 or args.window < 1:
    parser.error(f"--bin and --window must be >= 1, given {args.bin} and "
                 f"{args.window}.")
  configs = [c for c in args.configs.split(",") if c] or None
  rows = describe(args.sweep_dir, configs, args.bin, args.window,
                  args.threshold)
  table = markdown(rows, args.bin, args.window, args.threshold)
  print(table, flush=True)
  result = dict(sweep_dir=args.sweep_dir, bin=args.bin, window=args.window,
                threshold=args.threshold, rows=rows)
  if args.output:
    os.makedirs(args.output, exist_ok=True)
    base = os.path.join(args.output, "learning_onset")
    io_utils.atomic_write_text(base + ".md", table)
    io_utils.atomic_write_json(base + ".json", result)
    print(f"wrote {base}.md and .json", flush=True)
  return result


if __name__ == "__main__":
  main()
