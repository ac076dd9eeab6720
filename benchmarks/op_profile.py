"""Where one call's time goes, op by op: TensorFlow's profiler, summed.

Where it sits: the step before an A/B. `profile_i2a.py` says which part of
an I2A's step is slow; this script says which TensorFlow ops inside one
compiled call are: it traces `--calls` calls with TensorFlow's profiler
(tf.profiler.experimental), reads the XPlane trace the profiler writes, and
sums the op kernels' time on TensorFlow's compute threads by op type (the
part after ':' in an event's name, e.g. `_MklNativeFusedConv2D`, `Cast`,
`StridedSliceGrad`) and by op instance (its graph name, e.g.
`gradient_tape/.../StridedSliceGrad`). The executor's wrappers
(`ExecutorState::Process` and its async parts) enclose the kernels and are
left out, so the total is the kernels' time; with an inter-op pool of 2
it can exceed the wall time (two ops run at once). An XLA-compiled
function called inside the graph (the keyed noise kernel,
envmodels/noise.py) runs inside an async wrapper and is not counted.

Targets (`--target`), each built as its benchmark builds it, untrained
(the compute does not depend on the weights):
  act            the `small` MsPacman I2A's fused acting step as an
                 actor that pulls its weights runs it: with its cache of
                 context encodings, on bfloat16 copies of the weights
                 under bf16 (`profile_i2a.py`; `--row` picks another I2A
                 row of train_throughput.py)
  act:casts      the same step on the weights themselves (the rewrite
                 casts each at every call)
  learner_step   that I2A's learner step (16 unrolls of 5 steps, stored
                 rollouts)
  pretrain:KIND  the `small` preset's pretraining step of KIND
                 (`pretrain_speed.py`, fixed batch of `--batch_size`)
  rollout:KIND:SIZE  K = 5 abstract rollouts of depth 3 from 16 initial
                 states of KIND at SIZE (`rollout_speed.py`)

Findings it led to (docs/performance.md): the zero-filled gradients of
per-step slices (`StridedSliceGrad`) in the rollout encoder, the
transition's ResConv and the sSSM's filtering; the two selects of the
Bernoulli likelihood.

  python benchmarks/op_profile.py --target learner_step [--precision bf16]
      [--calls 5] [--top 25] [--output results/op_profile_TARGET.json]
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

# pylint: disable=wrong-import-position
import tensorflow as tf

from envmodels import precision
from i2a import io_utils

# The executor's bookkeeping around kernels: they enclose the kernels' time.
WRAPPERS = ("Process", "Start", "Done", "ExecutorDoneCallback")


def build_target(target: str, tmpdir: str, row: str, batch_size: int
                 ) -> Callable[[], Any]:
  """The call to profile, traced and run once."""
  # pylint: disable=import-outside-toplevel
  import profile_i2a  # benchmarks/, on the path as the script's folder
  kind, _, rest = target.partition(":")
  if kind in ("act", "learner_step"):
    parts = profile_i2a.parts(tmpdir, row)
    fn = parts[{"act": "act (fused, cached context, bf16 weight copies)",
                "act:casts": "act (fused, cached context)",
                "learner_step": "learner step"}[target]]
    call = lambda: profile_i2a.finish(fn())
  elif kind == "pretrain" and rest:
    import pretrain_speed
    call = pretrain_speed.train_step_fn(rest, batch_size, False)
  elif kind == "rollout" and rest.count(":") == 1:
    import rollout_speed
    model_kind, size = rest.split(":")
    fn = rollout_speed.functions(rollout_speed.build(model_kind, size))[
        "abstract"]
    call = lambda: profile_i2a.finish(fn())
  else:
    raise ValueError(f"unknown target {target!r} (see --help).")
  call()
  return call


def trace(call: Callable[[], Any], calls: int
          ) -> Tuple[Dict[str, float], Dict[str, float], Dict[str, float]]:
  """Profiles `calls` calls: ps per call by op type and by op instance,
  and the count per call by type."""
  # pylint: disable=import-outside-toplevel
  from tensorflow.tsl.profiler.protobuf import xplane_pb2
  with tempfile.TemporaryDirectory() as logdir:
    tf.profiler.experimental.start(logdir)
    for _ in range(calls):
      call()
    tf.profiler.experimental.stop()
    paths = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"),
                      recursive=True)
    if not paths:
      raise RuntimeError(f"the profiler wrote no trace under {logdir}.")
    space = xplane_pb2.XSpace()
    with open(paths[0], "rb") as f:
      space.ParseFromString(f.read())
  by_type: Dict[str, float] = collections.Counter()
  by_name: Dict[str, float] = collections.Counter()
  count: Dict[str, float] = collections.Counter()
  for plane in space.planes:
    metadata = plane.event_metadata
    for line in plane.lines:
      if not line.name.startswith("tf_Compute"):
        continue
      for event in line.events:
        name = metadata[event.metadata_id].name
        op_type = name.rsplit(":", 1)[-1]
        if op_type in WRAPPERS or name.startswith("ExecutorState::"):
          continue
        by_type[op_type] += event.duration_ps / calls
        by_name[name] += event.duration_ps / calls
        count[op_type] += 1 / calls
  return dict(by_type), dict(by_name), dict(count)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--target", default="learner_step",
                      help="act, act:casts, learner_step, pretrain:KIND or "
                      "rollout:KIND:SIZE")
  parser.add_argument("--precision", default="auto")
  parser.add_argument("--calls", type=int, default=5,
                      help="calls traced (after 3 untraced warm-up calls)")
  parser.add_argument("--top", type=int, default=25)
  parser.add_argument("--row", default="i2a_distillation/mspacman",
                      help="act, learner_step: an I2A row of "
                      "benchmarks/train_throughput.py")
  parser.add_argument("--batch_size", type=int, default=8,
                      help="pretrain: windows per batch")
  parser.add_argument("--threads", default=precision.THREADS_AUTO)
  parser.add_argument("--output", default="",
                      help="where the sums go as JSON (default "
                      "results/op_profile_TARGET.json, ':' as '_')")
  args = parser.parse_args()
  if args.calls < 1 or args.top < 1:
    parser.error(f"--calls and --top must be >= 1, given {args.calls} and "
                 f"{args.top}.")
  kind, _, rest = args.target.partition(":")
  if not (args.target in ("act", "act:casts", "learner_step") or
          (kind == "pretrain" and rest) or
          (kind == "rollout" and rest.count(":") == 1)):
    parser.error(f"--target must be act, act:casts, learner_step, "
                 f"pretrain:KIND or "
                 f"rollout:KIND:SIZE (e.g. pretrain:dssm_det, "
                 f"rollout:sssm:paper), given {args.target!r}.")
  threads = precision.set_threads(args.threads)  # before any TF op
  chosen = precision.resolve(args.precision)
  with tempfile.TemporaryDirectory() as tmpdir, precision.scope(chosen):
    call = build_target(args.target, tmpdir, args.row, args.batch_size)
    for _ in range(2):
      call()
    start = time.perf_counter()
    for _ in range(args.calls):
      call()
    wall_ms = 1e3 * (time.perf_counter() - start) / args.calls
    by_type, by_name, count = trace(call, args.calls)
  total_ms = sum(by_type.values()) / 1e9
  lines = [f"{args.target} ({chosen}): {wall_ms:.1f} ms per call (wall, "
           f"untraced), kernels {total_ms:.1f} ms per call summed over "
           f"TensorFlow's compute threads ({threads['inter_op_threads']} "
           "inter-op)", "",
           "| op type | ms per call | share | ops per call |",
           "|---|---|---|---|"]
  ranked: List[Tuple[str, float]] = sorted(by_type.items(),
                                           key=lambda kv: -kv[1])
  for op_type, ps in ranked[:args.top]:
    lines.append(f"| {op_type} | {ps / 1e9:.2f} | {ps / 1e9 / total_ms:.1%} "
                 f"| {count[op_type]:.0f} |")
  lines += ["", "| op instance | ms per call |", "|---|---|"]
  for name, ps in sorted(by_name.items(), key=lambda kv: -kv[1])[:args.top]:
    lines.append(f"| `{name}` | {ps / 1e9:.2f} |")
  print("\n".join(lines))
  output = args.output or os.path.join(
      HERE, "results", f"op_profile_{args.target.replace(':', '_')}.json")
  io_utils.atomic_write_json(output, dict(
      target=args.target, precision=chosen, wall_ms=wall_ms,
      kernel_ms=total_ms, threads=threads,
      by_type_ms={k: v / 1e9 for k, v in ranked}, ops_per_call=count,
      top_instances_ms={k: v / 1e9 for k, v in sorted(
          by_name.items(), key=lambda kv: -kv[1])[:200]},
      load_average=os.getloadavg(), command=" ".join(sys.argv)))
  print(f"\nwrote {output}")


if __name__ == "__main__":
  main()
