"""How much of a run's training return is learning within its episodes:
a finished training run resumed twice, learning and with its weights
frozen, side by side.

Where it sits: the sweep reports (i2a/run/sweep_report.py) state two
returns per run, the training return over the last 10% of env steps
(the episodes the actor played while the learner updated the weights
every unroll) and evaluation returns (fixed checkpoints). An agent whose
weights change many times within one episode can score more while
learning than any of its checkpoints does frozen: the updates adapt it
to the episodes it is playing. This script measures that gap for one
trained run: it copies the workdir twice and resumes training from the
newest checkpoint (the actor's environments and frame history restored)
for `--extra_env_steps`, once as trained and once with the learning rate
set to 0 (the weights held, the acting path unchanged), and reports the
training return and episode length of each, per episode (the copies'
`episodes.csv`), over the env steps after `--skip_env_steps`, with a 95%
Welch interval of the difference over episodes. The episodes are not
independent draws (16 environments play side by side, and the learning
copy's weights move between them), so the interval is a guide, not a
test.

  PYTHONPATH=. python benchmarks/online_adaptation.py \\
      --workdir=SWEEP_DIR/train/emulator_oracle/seed3 \\
      [--extra_env_steps 120000] [--skip_env_steps 20000] [--output FILE]

The copies live in a temporary directory (the run's workdir is only
read). The frozen copy's config.json is edited to the learning rate 0:
`python -m i2a.train` refuses to resume with another config, which is
what keeps experiments apart; this is a measurement, not a run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Dict, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

# pylint: disable=wrong-import-position
import numpy as np

from i2a import io_utils, metrics, runs
from i2a.metrics import read_column
from i2a.run import statistics

MODES = ("learning", "frozen")
DEFAULT_OUTPUT = os.path.join(HERE, "results", "online_adaptation",
                              "result.json")


def _resume(copy: str, env_steps: int) -> None:
  """Child process: resumes the training run in `copy` to `env_steps`."""
  import ml_collections  # pylint: disable=import-outside-toplevel
  from i2a.run import train as training  # pylint: disable=import-outside-toplevel
  config = ml_collections.ConfigDict(
      io_utils.read_json(os.path.join(copy, runs.CONFIG)))
  config.env_steps = env_steps
  config.eval_every = 0  # no evaluations: the returns are the actor's
  training.run(config, copy)


def _returns_after(episodes: str, after: float) -> Dict[str, Any]:
  """The training episodes logged after `after` env steps (a copy's
  `episodes.csv`, one row per episode): their returns, and the mean
  return and length."""
  steps = read_column(episodes, "env_steps")
  if steps is None:
    raise ValueError(f"{episodes} is missing: the resumed run logged no "
                     "episode; raise --extra_env_steps.")
  returns = read_column(episodes, "episode_return")
  lengths = read_column(episodes, "episode_length")
  keep = steps > after
  if not keep.any():
    raise ValueError(f"{episodes}: no episode ended after {after:,.0f} env "
                     "steps; raise --extra_env_steps.")
  return dict(episodes=int(keep.sum()),
              mean_return=float(np.mean(returns[keep])),
              mean_length=float(np.mean(lengths[keep])),
              returns=[float(r) for r in returns[keep]])


def measure(workdir: str, extra_env_steps: int, skip_env_steps: int,
            scratch: Optional[str] = None) -> Dict[str, Any]:
  """Both resumes of `workdir` and their returns; the copies go under
  `scratch` (kept) or a temporary directory (removed)."""
  workdir = os.path.abspath(workdir)
  config_path = os.path.join(workdir, runs.CONFIG)
  if not os.path.isfile(config_path):
    raise ValueError(f"{workdir} holds no training run ({runs.CONFIG} is "
                     "missing); pass the workdir of a `python -m i2a.train` "
                     "run with a checkpoint.")
  if skip_env_steps >= extra_env_steps:
    raise ValueError(f"--skip_env_steps ({skip_env_steps}) must be below "
                     f"--extra_env_steps ({extra_env_steps}).")
  config = io_utils.read_json(config_path)
  start = float(read_column(os.path.join(workdir, "metrics.csv"),
                            "env_steps")[-1])
  target = int(start) + extra_env_steps
  out: Dict[str, Any] = dict(
      workdir=workdir, agent=config.get("agent"),
      model=config.get("network", {}).get("model"),
      env_id=config.get("protocol", {}).get("env_id"),
      learning_rate=config["optimizer"]["learning_rate"],
      resumed_at=start, extra_env_steps=extra_env_steps,
      skip_env_steps=skip_env_steps)
  with contextlib.ExitStack() as stack:
    tmp = scratch or stack.enter_context(
        tempfile.TemporaryDirectory(prefix="online_adaptation_"))
    for mode in MODES:
      copy = os.path.join(tmp, mode)
      shutil.copytree(workdir, copy, ignore=shutil.ignore_patterns("tb"))
      if mode == "frozen":
        frozen = io_utils.read_json(os.path.join(copy, runs.CONFIG))
        frozen["optimizer"]["learning_rate"] = 0.0
        io_utils.atomic_write_json(os.path.join(copy, runs.CONFIG), frozen)
      print(f"{mode}: resuming {workdir} from {start:,.0f} to {target:,} "
            "env steps", flush=True)
      subprocess.run([sys.executable, __file__, "--_resume", copy,
                      "--_env_steps", str(target)], check=True,
                     env=dict(os.environ, PYTHONPATH=REPO))
      out[mode] = _returns_after(os.path.join(copy, metrics.EPISODES),
                                 start + skip_env_steps)
  out["return_gap"] = (out["learning"]["mean_return"]
                       - out["frozen"]["mean_return"])
  gap = statistics.welch_interval(out["learning"]["returns"],
                                  out["frozen"]["returns"])
  out["return_gap_interval"] = dict(
      low=gap.low, high=gap.high, half_width=gap.half_width, df=gap.df,
      confidence=gap.confidence)
  return out


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--workdir")
  parser.add_argument("--extra_env_steps", type=int, default=120_000)
  parser.add_argument("--skip_env_steps", type=int, default=20_000)
  parser.add_argument("--output", default=DEFAULT_OUTPUT)
  parser.add_argument("--_resume", help=argparse.SUPPRESS)
  parser.add_argument("--_env_steps", type=int, help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args._resume:  # pylint: disable=protected-access
    _resume(args._resume, args._env_steps)  # pylint: disable=protected-access
    return
  if not args.workdir:
    parser.error("--workdir (a finished training run) is required")
  result = measure(args.workdir, args.extra_env_steps, args.skip_env_steps)
  result.update(
      benchmark="online_adaptation", machine=platform.node(), cpus=os.cpu_count(),
      date=datetime.datetime.now().isoformat(timespec="seconds"),
      command=" ".join(["benchmarks/online_adaptation.py"] + sys.argv[1:]))
  print("| mode | episodes | training return | episode length |")
  print("|---|---|---|---|")
  for mode in MODES:
    r = result[mode]
    print(f"| {mode} | {r['episodes']} | {r['mean_return']:.1f} | "
          f"{r['mean_length']:.0f} |")
  gap = result["return_gap_interval"]
  spread = ("" if gap["half_width"] is None else
            f" ± {gap['half_width']:.1f} (95% Welch interval over episodes, "
            f"[{gap['low']:+.1f}, {gap['high']:+.1f}])")
  print(f"learning minus frozen: {result['return_gap']:+.1f}{spread}")
  io_utils.atomic_write_json(args.output, result)
  print(f"wrote {args.output}")


if __name__ == "__main__":
  main()
