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
test. `--learning_rates` adds learning copies at other learning rates
(the optimizer's slots as trained), each compared with the frozen copy
too: whether a lower rate keeps what continued training at the run's own
rate loses.

  PYTHONPATH=. python benchmarks/online_adaptation.py \\
      --workdir=SWEEP_DIR/train/emulator_oracle/seed3 \\
      [--extra_env_steps 120000] [--skip_env_steps 20000] \\
      [--learning_rates 1e-3,5e-4] [--keep DIR] [--output FILE]

The copies live in a temporary directory, or under `--keep` (the run's
workdir is only read). The frozen copy's config.json is edited to the
learning rate 0 (the other rates' copies to theirs): `python -m
i2a.train` refuses to resume with another config, which is
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
from typing import Any, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

# pylint: disable=wrong-import-position
import numpy as np

from i2a import io_utils, metrics, runs
from i2a.metrics import read_column
from i2a.run import statistics

DEFAULT_OUTPUT = os.path.join(HERE, "results", "online_adaptation",
                              "result.json")


def modes(learning_rates: Sequence[float] = ()
          ) -> List[Tuple[str, Optional[float]]]:
  """(name, learning rate) of each resumed copy: always "learning" (None:
  the run's own rate) and "frozen" (0), then one per extra rate."""
  extra = [(f"learning_lr_{lr:g}", float(lr)) for lr in learning_rates]
  names = [name for name, _ in extra]
  if len(set(names)) != len(names) or any(lr <= 0 for _, lr in extra):
    raise ValueError(f"--learning_rates {list(learning_rates)}: expected "
                     "distinct rates above 0 (the frozen copy is the rate 0).")
  return [("learning", None), ("frozen", 0.0)] + extra


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
            scratch: Optional[str] = None,
            learning_rates: Sequence[float] = ()) -> Dict[str, Any]:
  """The resumes of `workdir` (`modes(learning_rates)`) and their
  returns; the copies go under `scratch` (kept) or a temporary directory
  (removed). `gaps`: each learning copy minus the frozen one."""
  resumes = modes(learning_rates)
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
    for mode, learning_rate in resumes:
      copy = os.path.join(tmp, mode)
      shutil.copytree(workdir, copy, ignore=shutil.ignore_patterns("tb"))
      if learning_rate is not None:
        edited = io_utils.read_json(os.path.join(copy, runs.CONFIG))
        edited["optimizer"]["learning_rate"] = learning_rate
        io_utils.atomic_write_json(os.path.join(copy, runs.CONFIG), edited)
      print(f"{mode}: resuming {workdir} from {start:,.0f} to {target:,} "
            "env steps", flush=True)
      subprocess.run([sys.executable, __file__, "--_resume", copy,
                      "--_env_steps", str(target)], check=True,
                     env=dict(os.environ, PYTHONPATH=REPO))
      out[mode] = _returns_after(os.path.join(copy, metrics.EPISODES),
                                 start + skip_env_steps)
  out["gaps"] = {}
  for mode, learning_rate in resumes:
    if mode == "frozen":
      continue
    gap = statistics.welch_interval(out[mode]["returns"],
                                    out["frozen"]["returns"])
    out["gaps"][mode] = dict(
        learning_rate=(out["learning_rate"] if learning_rate is None
                       else learning_rate),
        return_gap=out[mode]["mean_return"] - out["frozen"]["mean_return"],
        interval=dict(low=gap.low, high=gap.high, half_width=gap.half_width,
                      df=gap.df, confidence=gap.confidence))
  out["return_gap"] = out["gaps"]["learning"]["return_gap"]
  out["return_gap_interval"] = out["gaps"]["learning"]["interval"]
  return out


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--workdir")
  parser.add_argument("--extra_env_steps", type=int, default=120_000)
  parser.add_argument("--skip_env_steps", type=int, default=20_000)
  parser.add_argument("--learning_rates", default="",
                      help="comma-separated: more learning copies at these "
                      "rates, e.g. 1e-3,5e-4")
  parser.add_argument("--output", default=DEFAULT_OUTPUT)
  parser.add_argument("--keep", default=None,
                      help="a new folder to keep the resumed copies in "
                      "(their metrics, episodes and checkpoints); default: "
                      "a temporary folder, removed")
  parser.add_argument("--_resume", help=argparse.SUPPRESS)
  parser.add_argument("--_env_steps", type=int, help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args._resume:  # pylint: disable=protected-access
    _resume(args._resume, args._env_steps)  # pylint: disable=protected-access
    return
  if not args.workdir:
    parser.error("--workdir (a finished training run) is required")
  try:
    learning_rates = [float(lr) for lr in args.learning_rates.split(",")
                      if lr.strip()]
  except ValueError:
    parser.error(f"--learning_rates {args.learning_rates!r}: expected "
                 "comma-separated numbers, e.g. 1e-3,5e-4")
  if args.keep and os.path.exists(args.keep):
    parser.error(f"--keep {args.keep} exists; name a new folder (the "
                 "copies are made there).")
  result = measure(args.workdir, args.extra_env_steps, args.skip_env_steps,
                   scratch=args.keep, learning_rates=learning_rates)
  result.update(
      benchmark="online_adaptation", machine=platform.node(), cpus=os.cpu_count(),
      date=datetime.datetime.now().isoformat(timespec="seconds"),
      command=" ".join(["benchmarks/online_adaptation.py"] + sys.argv[1:]))
  print("| mode | learning rate | episodes | training return | "
        "episode length |")
  print("|---|---|---|---|---|")
  for mode, _ in modes(learning_rates):
    r = result[mode]
    rate = (result["gaps"][mode]["learning_rate"] if mode in result["gaps"]
            else 0.0)
    print(f"| {mode} | {rate:g} | {r['episodes']} | {r['mean_return']:.1f} "
          f"| {r['mean_length']:.0f} |")
  for mode, gap in result["gaps"].items():
    interval = gap["interval"]
    spread = ("" if interval["half_width"] is None else
              f" ± {interval['half_width']:.1f} (95% Welch interval over "
              f"episodes, [{interval['low']:+.1f}, {interval['high']:+.1f}])")
    print(f"{mode} minus frozen: {gap['return_gap']:+.1f}{spread}")
  io_utils.atomic_write_json(args.output, result)
  print(f"wrote {args.output}")


if __name__ == "__main__":
  main()
