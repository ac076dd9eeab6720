"""Where an embedded training update's time goes, in Python's profiler.

Builds the real Trainer (i2a/run/train.py) of a row of
benchmarks/train_throughput.py, runs `--warmup` updates (tracing), then
profiles `--updates` updates (each batch_size // num_envs actor unrolls
and one learner step) with cProfile and reports ms per update in parts:
  actor unroll        Actor.unroll, all of it
    network calls     the policy / fused act / side-input calls (TensorFlow)
    weights pull      Actor.update (Reverb sample, tag check, assign; or the
                      in-process copy)
    unroll writes     the Reverb items, or the in-process queue's put
    environments      the vector env's step
  learner step        Learner.step, all of it
    update            the compiled update (TensorFlow), with its input
    publish           the weights to the actors (Reverb item and tag, or
                      the in-process copy)
The parts of one side do not sum to it: the rest is Python around them.
Profiling slows Python down, not TensorFlow's kernels; compare runs of
this script, not its totals with train_throughput.py's. It runs against
any checkout of the project (the transport argument is passed only if
given): copied into an older revision's benchmarks/ folder, it profiles
that revision the same way (docs/performance.md, "Training throughput").

  python benchmarks/profile_training.py [--row a2c/minipacman]
      [--updates 30] [--precision fp32] [--transport local|reverb]
      [--output FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from typing import Dict, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

# pylint: disable=wrong-import-position
import train_throughput  # benchmarks/, on the path as the script's folder
from i2a import io_utils
from i2a.run import train as training

try:  # checkouts before the thread settings: TensorFlow's own pools
  from envmodels import precision
except ImportError:
  precision = None

# part -> (the function's file suffix ('' any), its names, the caller's
# file suffix and name, or None: the function's time from every caller).
PARTS: Dict[str, Tuple[str, Tuple[str, ...], Optional[Tuple[str, str]]]] = {
    "actor unroll": ("agents/acting.py", ("unroll",), None),
    "network calls": ("agents/acting.py", ("_act", "_current_side_inputs"),
                      None),
    "weights pull": ("agents/acting.py", ("update",), None),
    "unroll writes": ("", ("_write", "put"), ("agents/acting.py", "unroll")),
    "environments": ("", ("step",), ("agents/acting.py", "unroll")),
    "learner step": ("agents/learning.py", ("step",), None),
    "update": ("", ("__call__", "error_handler"),
               ("agents/learning.py", "step")),
    "publish": ("agents/learning.py", ("_publish",), None),
}


def _cumulative_ms(stats: pstats.Stats, part: str) -> float:
  """The part's cumulative time (ms) over the profile: of its functions,
  or of their calls from its caller alone."""
  suffix, names, caller = PARTS[part]
  total = 0.0
  for (path, _, name), (_, _, _, cumulative, callers) in \
      stats.stats.items():  # pytype: disable=attribute-error
    if name not in names or not path.endswith(suffix):
      continue
    if caller is None:
      total += cumulative
      continue
    total += sum(edge[3] for (c_path, _, c_name), edge in callers.items()
                 if c_path.endswith(caller[0]) and c_name == caller[1])
  return 1e3 * total


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--row", default="a2c/minipacman",
                      help=f"one of {sorted(train_throughput.ROWS)}")
  parser.add_argument("--updates", type=int, default=30)
  parser.add_argument("--warmup", type=int, default=5)
  parser.add_argument("--precision", default="fp32")
  parser.add_argument("--transport", default=None,
                      help="local or reverb (i2a/run/train.py TRANSPORTS); "
                      "default: the checkout's own")
  parser.add_argument("--threads", default="auto",
                      help="TensorFlow's thread pools, sized first thing as "
                      "the binaries' config `threads` does")
  parser.add_argument("--output", default="",
                      help="a JSON file for the figures (default: none)")
  args = parser.parse_args()
  if precision is not None and hasattr(precision, "set_threads"):
    precision.set_threads(args.threads)  # before any TF op
  if args.row not in train_throughput.ROWS:
    parser.error(f"unknown row {args.row!r}; known: "
                 f"{sorted(train_throughput.ROWS)}")
  with tempfile.TemporaryDirectory() as tmpdir:
    config = train_throughput.load_config(train_throughput.ROWS[args.row],
                                          tmpdir)
    config.precision = args.precision
    kwargs = {} if args.transport is None else {"transport": args.transport}
    trainer = training.Trainer(config, os.path.join(tmpdir, "run"),
                               **kwargs)
    try:
      trainer.learner.publish()
      unrolls = config.batch_size // config.num_envs

      def update() -> None:
        for _ in range(unrolls):
          trainer.actor.unroll()
        trainer.learner.step()
      for _ in range(args.warmup):
        update()
      start = time.perf_counter()
      for _ in range(args.updates):
        update()
      plain_ms = 1e3 * (time.perf_counter() - start) / args.updates
      profile = cProfile.Profile()
      profile.enable()
      for _ in range(args.updates):
        update()
      profile.disable()
    finally:
      trainer.close()
  stats = pstats.Stats(profile)
  parts = {part: _cumulative_ms(stats, part) / args.updates
           for part in PARTS}
  # A checkout before the in-process transport always used Reverb.
  transport = getattr(trainer, "transport", "reverb")
  print(f"{args.row} @ {args.precision}, transport {transport}: "
        f"{plain_ms:.1f} ms per update unprofiled "
        f"({config.batch_size * config.unroll_length / plain_ms * 1e3:,.0f} "
        f"env steps/s), load average {os.getloadavg()[0]:.1f}")
  print("| part | ms per update (profiled) |\n|---|---|")
  for part, ms in parts.items():
    indent = "" if part in ("actor unroll", "learner step") else "- "
    print(f"| {indent}{part} | {ms:.1f} |")
  if args.output:
    io_utils.atomic_write_json(args.output, dict(
        row=args.row, precision=args.precision, transport=transport,
        updates=args.updates, ms_per_update_unprofiled=plain_ms,
        parts_ms_per_update=parts, load_average=list(os.getloadavg()),
        command=" ".join(sys.argv)))


if __name__ == "__main__":
  main()
