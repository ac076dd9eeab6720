"""Where an I2A's time goes: one actor step and one learner step, in parts.

Builds the `small` MsPacman I2A (jumpy dSSM-DET of the `small` envmodel
preset, untrained: the compute does not depend on the weights; K = 5,
tau = 3, 16 environments) and times, at each precision side by side
(round-robin rounds, medians):
  env step          16 MsPacman environments stepped once (protocol wrappers)
  initial state     s_t|t of 16 windows (3 context frames each), tiled to 80
  model steps       the 3 imagined steps of the 80 rollouts
  act (fused)       a whole acting step: the above, the rollout encoder, the
                    model-free torso and the heads, in one tf.function
  act (fused, cached context)  the same step as the actor runs it, with
                    its cache of context-frame encodings (the newest frame
                    encoded, the older ones read: agents/base.py
                    ContextEncodings)
  act (fused, cached context, bf16 weight copies)  the same step reading
                    bfloat16 copies of the weights, as an actor that pulls
                    its weights runs it under 'bf16' (envmodels/precision.py
                    WeightCopies; under fp32 it is the step above)
  act (..., only the rollouts' rows in branches)  the same step as the
                    actor ran it before its windows were split into row
                    branches: one chain but for the imagination core's
                    rows (a variant for side-by-side runs)
  act (one window)  the fused step of one window, as evaluation runs it
                    (i2a/run/evaluate.py), on the weights and (", bf16
                    weight copies") on their copies
  learner step      one update on a batch of 16 unrolls of 5 steps with the
                    actor's stored rollouts (forward over 96 windows,
                    backward, RMSProp)
  learner step, Sonnet's update  the same step with Sonnet's RMSProp
                    `apply` in place of the fused kernels
                    (envmodels/optimization.py `apply_updates`)
`--branches 1,auto` builds the parts once per number of row branches
(envmodels/branches.py: the act's windows, and the learner's rollouts'
rows, as that many independent chains; `auto` is what the binaries run,
fewer where the work is small; a number is forced) and times them side
by side.
Prints a markdown table and writes benchmarks/results/profile_i2a.json.

  python benchmarks/profile_i2a.py [--precisions fp32,bf16] [--rounds 5]
      [--row i2a_distillation/mspacman] [--threads auto] [--branches auto]
      [--parts act]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

# pylint: disable=wrong-import-position
import numpy as np
import tensorflow as tf

from agents import builder, learning
import train_throughput  # benchmarks/, on the path as the script's folder
from envmodels import branches, precision
from i2a import environments, io_utils, runs

RESULTS = os.path.join(HERE, "results")


def parts(tmpdir: str, row_name: str = "i2a_distillation/mspacman"
          ) -> Dict[str, Callable[[], Any]]:
  row = train_throughput.ROWS[row_name]
  config = train_throughput.load_config(row, tmpdir)
  protocol = runs.protocol_from_config(config)
  num_actions = environments.num_actions(protocol)
  shape = tuple(protocol.observation_shape)
  model = builder.load_envmodel(config.envmodel, protocol, num_actions)
  network = builder.build_network(config, num_actions, shape, model)
  builder.create_variables(network, shape)
  envs = environments.make_vector_env(protocol, config.num_envs)
  envs.reset(seed=0)
  rng = np.random.RandomState(0)
  n, batch = config.unroll_length, config.batch_size
  windows = rng.randint(0, 256, (config.num_envs, len(network.window_offsets),
                                 *shape)).astype(np.uint8)
  context = tf.constant(network.model_context(windows))
  k = network.num_rollouts

  @tf.function
  def initial(context):
    return tf.nest.map_structure(lambda x: tf.repeat(x, k, 0),
                                 model.initial_state(context))
  state = initial(context)
  actions = tf.zeros([config.num_envs * k, model.spec.jump], tf.int32)

  @tf.function
  def steps(state):
    outputs = []
    for _ in range(network.depth):
      state, out = model.step(state, actions)
      outputs.append(out.features)
    return outputs

  side = network.side_inputs(windows[:1], None)
  history = np.repeat(windows[:, :1], network.window_offsets[0] + 1, axis=1)
  cache = network.context_cache(history)  # the actor's cached encodings
  unrolls = {
      "observation": rng.randint(0, 256, (batch, n + 1, *windows.shape[1:])
                                 ).astype(np.uint8),
      "action": rng.randint(0, num_actions, (batch, n)).astype(np.int32),
      "reward": rng.randn(batch, n).astype(np.float32),
      "discount": np.ones([batch, n], np.float32),
      "behaviour_logits": np.zeros([batch, n, num_actions], np.float32),
  }
  for name, value in side.items():
    unrolls[name] = np.repeat(np.repeat(value[:, None], n + 1, 1), batch, 0)

  def make_learner(optimizer: Any) -> learning.Learner:
    return learning.Learner(
        network, tf.data.Dataset.from_tensors(unrolls).repeat(), optimizer,
        discount=0.99, value_coef=0.5, entropy_coef=0.01, clip_norm=0.5)
  copies = precision.WeightCopies(network.variables,
                                   refreshed=network.learnable_variables)

  def acting(call: Callable[[], Any], weight_copies: bool
             ) -> Callable[[], Any]:
    def run():
      network.read_weight_copies(copies if weight_copies else None)
      return call()
    return run
  # pylint: disable=protected-access
  def rows_only(windows: tf.Tensor, older: tf.Tensor, fresh: tf.Tensor
                ) -> Any:
    keys = network.imagination_core.window_keys(tf.shape(windows)[0])
    return network._cached_act_rows(windows, older, fresh, keys)
  rows_only_act = network.acting_call(rows_only)

  def rows_only_cached_act() -> Any:
    cache.advance(np.zeros(len(windows), bool))
    logits, side, newest = rows_only_act(
        *network._context_arguments(windows, cache))
    cache.fill(newest.numpy())
    return logits, side
  # pylint: enable=protected-access
  learner = make_learner(learning.rmsprop(7e-4, 0.99, 1e-5))
  unfused = make_learner(SonnetApply(learning.rmsprop(7e-4, 0.99, 1e-5)))
  return {
      "env step": lambda: envs.step(rng.randint(0, num_actions,
                                                config.num_envs)),
      "initial state": lambda: initial(context),
      "model steps": lambda: steps(state),
      "act (fused)": acting(lambda: network.act(windows, None), False),
      "act (fused, cached context)": acting(
          lambda: cached_act(network, windows, cache), False),
      "act (fused, cached context, bf16 weight copies)": acting(
          lambda: cached_act(network, windows, cache), True),
      "act (fused, cached context, bf16 weight copies, only the "
      "rollouts' rows in branches)": acting(rows_only_cached_act, True),
      "act (one window)": acting(lambda: network.act(windows[:1], None),
                                 False),
      "act (one window, bf16 weight copies)": acting(
          lambda: network.act(windows[:1], None), True),
      "learner step": learner.step,
      "learner step, Sonnet's update": unfused.step,
  }


class SonnetApply:
  """An optimizer that `optimization.apply_updates` does not fuse, so the
  update goes through Sonnet's own `apply` (as before the fused kernels)."""

  def __init__(self, optimizer: Any):
    self.optimizer = optimizer

  def _initialize(self, variables: Any) -> None:
    self.optimizer._initialize(variables)  # pylint: disable=protected-access

  def apply(self, gradients: Any, variables: Any) -> None:
    self.optimizer.apply(gradients, variables)


def in_branches(calls: Dict[str, Callable[[], Any]], n: str
                ) -> Dict[str, Callable[[], Any]]:
  """The calls, each run (and so traced) with `n` row branches (a number,
  forced; 'auto': as the binaries run, no scope)."""
  def wrap(fn):
    def call():
      with (contextlib.nullcontext() if n == "auto"
            else branches.scope(int(n))):
        return fn()
    return call
  return {name: wrap(fn) for name, fn in calls.items()}


def cached_act(network: Any, windows: np.ndarray, cache: Any) -> Any:
  """An actor's step with its cache: the newest frame encoded, the older
  context frames' encodings read from the cache."""
  cache.advance(np.zeros(len(windows), bool))
  return network.act(windows, None, cache)


def finish(result: Any) -> None:
  for x in tf.nest.flatten(result):
    if isinstance(x, tf.Tensor):
      x.numpy()


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--precisions", default="")
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--calls", type=int, default=3)
  parser.add_argument("--row", default="i2a_distillation/mspacman",
                      help="an I2A row of benchmarks/train_throughput.py")
  parser.add_argument("--threads", default=precision.THREADS_AUTO,
                      help="TensorFlow's thread pools, as the binaries' "
                      "config `threads`: 'auto', 'default' or "
                      "'INTRA,INTER'")
  parser.add_argument("--branches", default="auto",
                      help="row branches to compare, e.g. '1,auto' "
                      "(envmodels/branches.py)")
  parser.add_argument("--parts", default="",
                      help="time only the parts whose names contain one of "
                      "these comma-separated strings, e.g. 'act'")
  parser.add_argument("--output",
                      default=os.path.join(RESULTS, "profile_i2a.json"))
  args = parser.parse_args()
  threads = precision.set_threads(args.threads)  # before any TF op
  precisions = ([p for p in args.precisions.split(",") if p] or
                list(dict.fromkeys(["fp32", precision.resolve("auto")])))
  branches.parse_counts(args.branches)  # refuses what is not a count
  counts = list(dict.fromkeys(c.strip() for c in args.branches.split(",")
                              if c.strip()))
  # A variant: a precision and a number of branches (its own network).
  variants = [(p, b) for b in counts for p in precisions]
  labels = {v: v[0] if len(counts) == 1 else f"{v[0]}, {v[1]} branch(es)"
            for v in variants}
  with tempfile.TemporaryDirectory() as tmpdir:
    wanted = [w for w in args.parts.split(",") if w]
    built = {b: {name: fn for name, fn in
                 in_branches(parts(tmpdir, args.row), b).items()
                 if not wanted or any(w in name for w in wanted)}
             for b in counts}
    if not built[counts[0]]:
      raise SystemExit(f"--parts={args.parts!r} matches no part.")
    for p, b in variants:  # trace and optimise each
      with precision.scope(p):
        for fn in built[b].values():
          finish(fn())
    names = list(built[counts[0]])
    samples: Dict[Any, List[float]] = {(v, name): [] for v in variants
                                       for name in names}
    for _ in range(args.rounds):
      for v in variants:
        with precision.scope(v[0]):
          for name, fn in built[v[1]].items():
            start = time.perf_counter()
            for _ in range(args.calls):
              finish(fn())
            samples[(v, name)].append(
                (time.perf_counter() - start) / args.calls)
  table = ["| part | " + " | ".join(f"{labels[v]} ms" for v in variants) +
           (" | speed-up |" if len(variants) > 1 else " |"),
           "|---" * (len(variants) + 1 + (len(variants) > 1)) + "|"]
  results = {}
  for name in names:
    ms = [1e3 * float(np.median(samples[(v, name)])) for v in variants]
    results[name] = dict(zip((labels[v] for v in variants), ms))
    speedup = (f" | {ms[0] / ms[-1]:.2f}x |" if len(ms) > 1 else " |")
    table.append(f"| {name} | " + " | ".join(f"{m:.1f}" for m in ms) +
                 speedup)
  text = "\n".join(table)
  print(text)
  io_utils.atomic_write_json(args.output, dict(
      parts_ms=results, row=args.row, rounds=args.rounds, threads=threads,
      branches=counts, load_average=os.getloadavg(),
      command=" ".join(sys.argv)))


if __name__ == "__main__":
  main()
