"""Tiled vectors: convolutions of a concatenation against its parts.

The state-space models' blocks read actions (and pool-and-inject's
pooled features, the VAE's time code) broadcast over the state's map;
`envmodels.networks.conv_parts` convolves the maps alone and adds each
vector's share as a matrix product (docs/envmodels.md). This script times
both ways side by side in one process, round-robin rounds, medians:
`concat` traces every block's first convolution on the concatenation with
the vectors tiled (as the blocks did before `conv_parts`), `parts` as the
models run now. Rows:
  rollout <size>/<kind>  the abstract rollouts of `rollout_speed.py`
                         (16 windows x K = 5 x depth 3), ms per call
  pretrain <kind>        one `small`-preset train step of batch 8
                         (`pretrain_speed.py`), ms
  act, learner step      the `small` MsPacman I2A's acting step as the
                         actor runs it (cached context encodings, bf16
                         weight copies under bf16) and its learner step
                         (`profile_i2a.py`), ms
Prints a markdown table and writes benchmarks/results/tiled_vectors.json.

  python benchmarks/tiled_vectors.py [--sizes small,paper]
      [--kinds ar,dssm_det,sssm,jumpy_dssm_det,jumpy_sssm]
      [--pretrain dssm_det,sssm] [--i2a on] [--precision auto] [--rounds 7]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from typing import Any, Callable, Dict, Iterator, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

# pylint: disable=wrong-import-position
import numpy as np

import pretrain_speed  # benchmarks/, on the path as the script's folder
import profile_i2a
import rollout_speed
from envmodels import networks, precision
from i2a import io_utils

RESULTS = os.path.join(HERE, "results")
VARIANTS = ("concat", "parts")


@contextlib.contextmanager
def tiled(variant: str) -> Iterator[None]:
  """While functions are traced: 'concat' convolves the concatenation of
  the parts (the vectors tiled), 'parts' runs `conv_parts` as is."""
  saved = networks.conv_parts
  if variant == "concat":
    networks.conv_parts = lambda conv, parts: conv(
        networks.concat_parts(parts))
  try:
    yield
  finally:
    networks.conv_parts = saved


def in_variant(fn: Callable[[], Any], variant: str) -> Callable[[], Any]:
  def call():
    with tiled(variant):
      return fn()
  return call


def targets(sizes: List[str], kinds: List[str], pretrain: List[str],
            i2a: bool, tmpdir: str) -> Dict[Any, Callable[[], Any]]:
  """(row, variant) -> a call that runs (and on its first call traces) it."""
  calls: Dict[Any, Callable[[], Any]] = {}
  for variant in VARIANTS:
    with tiled(variant):
      for size in sizes:
        for kind in kinds:
          model = rollout_speed.build(kind, size)
          fn = rollout_speed.functions(model)["abstract"]
          calls[(f"rollout {size}/{kind}", variant)] = in_variant(
              fn, variant)
      for kind in pretrain:
        calls[(f"pretrain {kind}", variant)] = in_variant(
            pretrain_speed.train_step_fn(kind, 8, False), variant)
      if i2a:
        parts = profile_i2a.parts(os.path.join(tmpdir, variant))
        calls[("act", variant)] = in_variant(
            parts["act (fused, cached context, bf16 weight copies)"],
            variant)
        calls[("learner step", variant)] = in_variant(parts["learner step"],
                                                      variant)
  return calls


def time_call(fn: Callable[[], Any], calls: int) -> float:
  start = time.perf_counter()
  for _ in range(calls):
    profile_i2a.finish(fn())
  return (time.perf_counter() - start) / calls


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--sizes", default="small,paper")
  parser.add_argument("--kinds",
                      default="ar,dssm_det,sssm,jumpy_dssm_det,jumpy_sssm")
  parser.add_argument("--pretrain", default="dssm_det,sssm")
  parser.add_argument("--i2a", default="on", choices=("on", "off"))
  parser.add_argument("--precision", default="auto")
  parser.add_argument("--rounds", type=int, default=7)
  parser.add_argument("--calls", type=int, default=3)
  parser.add_argument("--output",
                      default=os.path.join(RESULTS, "tiled_vectors.json"))
  args = parser.parse_args()
  split = lambda text: [x for x in text.split(",") if x]
  unknown = set(split(args.kinds)) - set(rollout_speed.KINDS)
  if unknown:
    parser.error(f"--kinds: unknown {sorted(unknown)}; known "
                 f"{sorted(rollout_speed.KINDS)}")
  threads = precision.set_threads(precision.THREADS_AUTO)  # before any op
  chosen = precision.resolve(args.precision)
  with precision.scope(chosen), tempfile.TemporaryDirectory() as tmpdir:
    calls = targets(split(args.sizes), split(args.kinds),
                    split(args.pretrain), args.i2a == "on", tmpdir)
    for fn in calls.values():  # trace, optimise, first optimizer slots
      time_call(fn, 2)
    samples: Dict[Any, List[float]] = {key: [] for key in calls}
    keys = list(calls)
    for round_ in range(args.rounds):
      for key in (keys if round_ % 2 == 0 else keys[::-1]):
        samples[key].append(1e3 * time_call(calls[key], args.calls))
      print(f"round {round_ + 1}/{args.rounds}", flush=True)
  rows = []
  for row in dict.fromkeys(key[0] for key in keys):
    median = {v: float(np.median(samples[(row, v)])) for v in VARIANTS}
    rows.append(dict(row=row, ms={v: median[v] for v in VARIANTS},
                     samples_ms={v: samples[(row, v)] for v in VARIANTS},
                     speedup=median["concat"] / median["parts"]))
  lines = ["| row | concat ms | parts ms | speed-up |", "|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['row']} | {r['ms']['concat']:.1f} | "
                 f"{r['ms']['parts']:.1f} | {r['speedup']:.2f}x |")
  lines.append(f"\n{chosen}; medians of {args.rounds} rounds of "
               f"{args.calls} calls, timed round-robin in one process.")
  text = "\n".join(lines)
  print(text)
  io_utils.atomic_write_json(args.output, dict(
      rows=rows, precision=chosen, rounds=args.rounds,
      threads=threads, load_average=os.getloadavg(),
      command=" ".join(sys.argv)))
  io_utils.atomic_write_text(os.path.splitext(args.output)[0] + ".md",
                             text + "\n")


if __name__ == "__main__":
  main()
