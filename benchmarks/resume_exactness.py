"""Whether a training run's config resumes exactly: N updates in one go
against N/2, a checkpoint, and N/2 more, compared variable by variable.

Where it sits: `python -m i2a.train` promises that a resumed run
reproduces, update for update, the run that was not interrupted
(docs/agents.md, "Workdir, checkpoints and resume"); the tests check it
at the `tiny` presets (tests/agents/test_training.py). This script checks
it at a real run's own config (its precision, network, envmodel export
and environments), read from that run's `config.json`, in two fresh
workdirs under a temporary directory (the run itself is only read):

  PYTHONPATH=. python benchmarks/resume_exactness.py \\
      --workdir=SWEEP_DIR/train/distill_dssm_det/seed6 [--updates 20] \\
      [--output FILE]

It prints the largest absolute difference of every variable in the two
final checkpoints (network, optimizer slots, counters) and whether all
are 0, and writes them as JSON.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
from typing import Any, Dict, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

# pylint: disable=wrong-import-position
import ml_collections
import numpy as np
import tensorflow as tf

from i2a import io_utils, runs
from i2a.run import train as training

DEFAULT_OUTPUT = os.path.join(HERE, "results", "resume_exactness.json")


def _checkpoint(workdir: str) -> Dict[str, np.ndarray]:
  """The newest checkpoint's values, save bookkeeping left out."""
  path = tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints"))
  reader = tf.train.load_checkpoint(path)
  return {name: reader.get_tensor(name)
          for name in reader.get_variable_to_shape_map()
          if not name.startswith(("_CHECKPOINTABLE_OBJECT_GRAPH",
                                  "save_counter"))}


def measure(workdir: str, updates: int,
            scratch: Optional[str] = None) -> Dict[str, Any]:
  """Trains `updates` updates straight and split at `workdir`'s config;
  the per-variable largest absolute differences."""
  config_path = os.path.join(workdir, runs.CONFIG)
  if not os.path.isfile(config_path):
    raise ValueError(f"{workdir} holds no training run ({runs.CONFIG} is "
                     "missing); pass the workdir of a `python -m i2a.train` "
                     "run.")
  if updates < 2:
    raise ValueError(f"--updates must be 2 or more, given {updates}.")
  base = io_utils.read_json(config_path)
  per_update = base["batch_size"] * base["unroll_length"]  # as train.py

  def config(n: int) -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict(base)
    c.env_steps = per_update * n
    c.eval_every = 0
    return c

  with tempfile.TemporaryDirectory(prefix="resume_exactness_") as tmp:
    root = scratch or tmp
    straight = os.path.join(root, "straight")
    split = os.path.join(root, "split")
    training.run(config(updates), straight)
    training.run(config(updates // 2), split)
    training.run(config(updates), split)
    expected, got = _checkpoint(straight), _checkpoint(split)
  if sorted(expected) != sorted(got):
    missing = sorted(set(expected) ^ set(got))
    raise AssertionError(f"the checkpoints hold other variables: {missing}")
  differences = {
      name: float(np.max(np.abs(expected[name].astype(np.float64)
                                - got[name].astype(np.float64))))
      if expected[name].dtype.kind in "fiu" and expected[name].size
      else float(not np.array_equal(expected[name], got[name]))
      for name in expected}
  return dict(workdir=os.path.abspath(workdir), updates=updates,
              env_steps_per_update=per_update,
              precision=base.get("precision"), agent=base.get("agent"),
              variables=len(differences),
              exact=all(d == 0.0 for d in differences.values()),
              largest_differences=dict(sorted(
                  differences.items(), key=lambda kv: -kv[1])[:10]))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--updates", type=int, default=20)
  parser.add_argument("--output", default=DEFAULT_OUTPUT)
  args = parser.parse_args()
  result = measure(args.workdir, args.updates)
  result.update(
      benchmark="resume_exactness", machine=platform.node(),
      cpus=os.cpu_count(),
      date=datetime.datetime.now().isoformat(timespec="seconds"),
      command=" ".join(["benchmarks/resume_exactness.py"] + sys.argv[1:]))
  for name, difference in result["largest_differences"].items():
    print(f"{difference:.3g}  {name}")
  print(f"{result['variables']} variables after {args.updates} updates: "
        + ("bitwise equal" if result["exact"] else "DIFFERENT"))
  io_utils.atomic_write_json(args.output, result)
  print(f"wrote {args.output}")


if __name__ == "__main__":
  main()
