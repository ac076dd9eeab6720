"""Imagination speed of every envmodel kind, at each precision side by side.

What the I2A asks of a model at every agent step, for 16 environments with
K = 5 rollouts of depth tau = 3 (80 rows): the initial state s_t|t from the
3 context frames of 16 windows (tiled to the 80 rows), then 3 model steps
with noise keys, either abstract (features and reward; `render` never
called) or rendered (a frame after every step). Each function is one
tf.function; kinds, precisions and functions are timed round-robin
(`--repeats` rounds, median per cell) so machine load hits all alike.

Reported per kind, size and precision:
  abstract / rendered transitions/s   80 * 3 model transitions per call
  initial state ms                    the 16-window s_t|t
  x AR (per primitive step)           transitions/s * jump over AR's, with
                                      and without the initial state
  GFLOP/s, % of conv peak             TensorFlow's graph profiler's float
                                      operations of the abstract call over
                                      its time, against a 3x3 64->64
                                      convolution on the state map at the
                                      same precision and batch, in as many
                                      row branches (the peak the hardware
                                      reaches on these shapes)
`--noise` compares ways of drawing the stochastic kinds' keyed normals in
the same round-robin (the deterministic kinds draw none and run once):
  table   envmodels/noise.py's `normal`, drawn and scaled (mean + std *
          eps) in one fused kernel (`noise.affine_normal`: what the
          models use)
  table_unfused  the same normals drawn by one kernel and scaled by the
          ops after it (the models before the fusion)
  ndtri   the previous implementation: the inverse normal CDF (XLA's
          `ndtri`) of a 24-bit hashed uniform, fused by XLA
  free    no draws: each row's noise is one number (its key's parity)
          broadcast, which costs nothing and keeps the model's work (the
          ceiling for any noise)
  zeros   no draws, zeros: mean + std * 0 also lets grappler prune the
          std's computation, so this is above the attainable
`--threads` sizes TensorFlow's thread pools for the whole run as the
binaries' config `threads` does ('auto', 'default' or 'INTRA,INTER';
envmodels/precision.py): pools are fixed per process, so compare settings
with one run each (benchmarks/thread_settings.py alternates them).
Models are untrained (speed does not depend on the weights) and built with
the `paper` and `small` presets' hyperparameters (configs/envmodels/).

`--branches 1,auto` times the rollouts with their rows in one chain and in
the row branches the I2A runs them in (envmodels/branches.py; `auto`, the
default, is what the binaries run on this machine).

`--value-checks both` times every cell twice, traced with and without the
API's value checks (envmodels/base.py, `value_checks`), round-robin in one
run: their cost (docs/performance.md). The default `on` is what agents run.

  python benchmarks/rollout_speed.py [--sizes paper,small]
      [--kinds dssm_det,sssm,...] [--precisions fp32,bf16] [--repeats 5]
      [--value-checks on|off|both] [--noise table,table_unfused,ndtri,free]
      [--threads auto] [--branches 1,auto] [--output FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import platform
import sys
import time
from typing import Any, Callable, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for configs/

# pylint: disable=wrong-import-position
import numpy as np
import tensorflow as tf

import envmodels
from envmodels import base, branches, noise, precision
from i2a import io_utils
from i2a.run import pretrain as pretraining

RESULTS = os.path.join(HERE, "results")
ENVS, ROLLOUTS, DEPTH = 16, 5, 3
ROWS = ENVS * ROLLOUTS
# name: (config file, jump override or None)
KINDS = {
    "vae": ("configs/envmodels/vae.py", 1),
    "ar": ("configs/envmodels/ar.py", 1),
    "rar": ("configs/envmodels/rar.py", 1),
    "dssm_det": ("configs/envmodels/dssm_det.py", 1),
    "dssm_vae": ("configs/envmodels/dssm_vae.py", 1),
    "sssm": ("configs/envmodels/sssm.py", 1),
    "jumpy_dssm_det": ("configs/envmodels/dssm_det.py", 3),
    "jumpy_sssm": ("configs/envmodels/sssm.py", 3),
}
FRAMES = {"paper": (200, 160, 3), "small": (104, 80, 3)}
STOCHASTIC = ("vae", "dssm_vae", "sssm", "jumpy_sssm")  # draw normals
NOISE = ("table", "table_softplus_apart", "table_unfused", "ndtri", "free",
         "zeros")


@tf.function(jit_compile=True)
def _ndtri_normal(keys: tf.Tensor, shape: tf.Tensor,
                  counter: int) -> tf.Tensor:
  return tf.math.ndtri(noise.uniform(keys, shape, counter))


def ndtri_normal(keys: tf.Tensor, shape: noise.Shape,
                 counter: int = 0) -> tf.Tensor:
  """The keyed normals as drawn before the table (the `ndtri` variant)."""
  return _ndtri_normal(noise.as_keys(keys), tf.cast(
      tf.convert_to_tensor(shape), tf.int32), int(counter))


def zeros_normal(keys: tf.Tensor, shape: noise.Shape,
                 counter: int = 0) -> tf.Tensor:
  del counter
  return tf.zeros(tf.concat([tf.shape(keys)[:1], tf.cast(
      tf.convert_to_tensor(shape), tf.int32)], 0))


def free_normal(keys: tf.Tensor, shape: noise.Shape,
                counter: int = 0) -> tf.Tensor:
  del counter
  keys = noise.as_keys(keys)
  shape = tf.cast(tf.convert_to_tensor(shape), tf.int32)
  parity = tf.cast(tf.bitwise.bitwise_and(keys[:, 0], noise._u32(1)),  # pylint: disable=protected-access
                   tf.float32)  # [N]: not a constant grappler could fold
  rank = tf.size(shape)
  return tf.broadcast_to(
      tf.reshape(parity, tf.concat([[-1], tf.ones([rank], tf.int32)], 0)),
      tf.concat([tf.shape(keys)[:1], shape], 0))


@contextlib.contextmanager
def noise_variant(name: str):
  """Models draw their keyed normals with `name` inside the block (they
  call `noise.normal` at trace time; each variant has its own traces):
  'table' as the models do (draw, scale and the std's softplus in one
  kernel), 'table_softplus_apart' the same but the softplus as its own op
  (as before it joined the kernel), 'table_unfused' the table's draw alone,
  all else apart; the other variants draw differently, all else apart."""
  original = noise.normal, noise.affine_normal, noise.softplus_normal
  noise.normal = {"table": original[0], "table_softplus_apart": original[0],
                  "table_unfused": original[0], "ndtri": ndtri_normal,
                  "free": free_normal, "zeros": zeros_normal}[name]

  def unfused(keys, mean, std, counter=0):
    return mean + std * noise.normal(keys, tf.shape(mean)[1:], counter)

  def softplus_apart(keys, mean, raw_std, min_std, counter=0):
    return noise.affine_normal(keys, mean, tf.nn.softplus(raw_std) + min_std,
                               counter)
  if name != "table":
    noise.softplus_normal = softplus_apart
  if name not in ("table", "table_softplus_apart"):
    noise.affine_normal = unfused
  try:
    yield
  finally:
    noise.normal, noise.affine_normal, noise.softplus_normal = original


def build(kind: str, size: str) -> envmodels.EnvModel:
  config_file, jump = KINDS[kind]
  module = importlib.import_module(config_file[:-3].replace("/", "."))
  config = module.get_config(size)
  spec = envmodels.EnvModelSpec(
      kind=config.kind, observation_shape=FRAMES[size], num_actions=5,
      jump=jump, context_length=config.context_length,
      action_free=config.action_free)
  model = envmodels.build(spec, seed=0, **pretraining.model_hyperparameters(
      config, reward_scale=1.0))
  model.create_variables()
  return model


def functions(model: envmodels.EnvModel, checks: bool = True,
              n_branches: int = 1) -> Dict[str, Callable[[], Any]]:
  """The timed calls, on fixed inputs: initial state, abstract and rendered
  rollouts from a (precomputed) tiled initial state, the rollouts' rows in
  `n_branches` row branches as the I2A runs them (envmodels/branches.py);
  traced (on their first call) with the API's value checks on or off."""
  spec = model.spec
  rng = np.random.RandomState(0)
  context = tf.constant(rng.randint(
      0, 256, (ENVS, spec.context_length, *spec.observation_shape)), tf.uint8)
  actions = tf.constant(rng.randint(0, 5, (DEPTH, ROWS, spec.jump)),
                        tf.int32)
  keys = tf.constant(rng.randint(-2**31, 2**31 - 1, (DEPTH, ROWS, 2)),
                     tf.int32)

  @tf.function
  def initial(context):
    state = model.initial_state(context)
    return tf.nest.map_structure(lambda x: tf.repeat(x, ROLLOUTS, 0), state)

  def rollout(render: bool):
    def chain(state, actions, keys, rows):  # actions, keys: rows first
      del rows
      outputs = []
      for t in range(DEPTH):
        state, out = model.step(state, actions[:, t], noise=keys[:, t])
        outputs += [out.features, out.reward]
        if render:
          outputs.append(model.render(state))
      return outputs

    @tf.function
    def run(state, actions, keys):  # [DEPTH, ROWS, ...] -> rows first
      return branches.split_rows(
          chain, (state, tf.transpose(actions, [1, 0, 2]),
                  tf.transpose(keys, [1, 0, 2])), ROWS)
    return run

  def with_checks(fn: Callable[[], Any]) -> Callable[[], Any]:
    def call():
      with base.value_checks(checks), branches.scope(n_branches):
        return fn()
    return call

  state = with_checks(lambda: initial(context))()
  abstract, rendered = rollout(False), rollout(True)
  return {
      "initial": with_checks(lambda: initial(context)),
      "abstract": with_checks(lambda: abstract(state, actions, keys)),
      "rendered": with_checks(lambda: rendered(state, actions, keys)),
      "_abstract_graph": with_checks(lambda: abstract.get_concrete_function(
          state, actions, keys).graph),
  }


def check_cost(model: envmodels.EnvModel, repeats: int) -> Dict[str, float]:
  """Microseconds the value checks add to encoding one abstract call's
  actions (DEPTH steps of [ROWS, c]), int and relaxed: the same tf.function
  traced with and without them, interleaved, median of 50 * repeats calls
  each."""
  spec = model.spec
  rng = np.random.RandomState(1)
  inputs = {
      "int": tf.constant(rng.randint(0, spec.num_actions,
                                     (DEPTH, ROWS, spec.jump)), tf.int32),
      "relaxed": tf.nn.softmax(tf.constant(rng.normal(
          size=(DEPTH, ROWS, spec.jump, spec.num_actions)), tf.float32)),
  }
  cost = {}
  for name, actions in inputs.items():
    traced = {}
    for checks in (True, False):
      with base.value_checks(checks):
        fn = tf.function(lambda a: [model.encode_actions(a[t])
                                    for t in range(DEPTH)])
        fn(actions)  # traced here, under the scope
      traced[checks] = fn
    times: Dict[bool, List[float]] = {True: [], False: []}
    for _ in range(50 * repeats):
      for checks in (True, False):
        start = time.perf_counter()
        traced[checks](actions)
        times[checks].append(time.perf_counter() - start)
    cost[f"check_us_{name}"] = 1e6 * float(
        np.median(times[True]) - np.median(times[False]))
  return cost


def gflop(graph: tf.Graph) -> float:
  options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
  options["output"] = "none"
  return tf.compat.v1.profiler.profile(
      graph, options=options).total_float_ops / 1e9


def conv_peak(state_shape: List[int], repeats: int,
              n_branches: int = 1) -> float:
  """GFLOP/s of a 3x3 64->64 convolution over [ROWS, h, w, 64] in the
  current precision (ten chained, to time more than the call overhead),
  its rows in `n_branches` row branches as the rollouts it is compared
  with: with one thread per op, one chain keeps one core busy, so a peak
  of one chain would be one core's."""
  x = tf.random.normal([ROWS, *state_shape[:2], 64])
  w = tf.random.normal([3, 3, 64, 64]) * 0.05

  def chain(x, rows):
    del rows  # every branch runs the same chain on its slice
    for _ in range(10):
      x = tf.nn.conv2d(x, w, 1, "SAME")
    return x

  @tf.function
  def chains(x):
    return branches.split_rows(chain, (x,), ROWS, n=n_branches)
  chains(x)
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    chains(x).numpy()
    times.append(time.perf_counter() - start)
  flops = 10 * 2 * 9 * 64 * 64 * ROWS * state_shape[0] * state_shape[1]
  return flops / float(np.median(times)) / 1e9


def time_call(fn: Callable[[], Any], calls: int) -> float:
  start = time.perf_counter()
  for _ in range(calls):
    result = fn()
  tf.nest.map_structure(lambda x: x.numpy(), result)
  return (time.perf_counter() - start) / calls


def measure(sizes, kinds, precisions, repeats: int, check_modes=(True,),
            variants=("table",), counts=(1,)) -> List[Dict[str, Any]]:
  rows: List[Dict[str, Any]] = []
  for size in sizes:
    models = {kind: build(kind, size) for kind in kinds}
    # A run is a kind traced with (True) or without the value checks, with
    # one of the noise variants (stochastic kinds only), in a number of
    # row branches.
    runs = [(kind, checks, v, b) for kind in kinds for checks in check_modes
            for v in (variants if kind in STOCHASTIC else variants[:1])
            for b in counts]
    calls = {}
    for run in runs:  # each run traces its own functions
      with noise_variant(run[2]):
        calls[run] = functions(models[run[0]], run[1], run[3])
    cells = [(run, p, name) for run in runs for p in precisions
             for name in ("initial", "abstract", "rendered")]

    def call(cell) -> float:
      run, p, name = cell
      with noise_variant(run[2]), precision.scope(p):
        return time_call(calls[run][name], 2)
    for cell in cells:  # warm up: trace and optimise each
      call(cell)
    samples: Dict[Any, List[float]] = {cell: [] for cell in cells}
    for round_ in range(repeats):
      # Alternate the order: no cell always runs right after another.
      for cell in (cells if round_ % 2 == 0 else cells[::-1]):
        samples[cell].append(call(cell))
      print(f"{size}: round {round_ + 1}/{repeats}", flush=True)
    state_shape = None
    for run in runs:
      kind, checks, v, b = run
      with noise_variant(v):
        graph = calls[run]["_abstract_graph"]()
      flops = gflop(graph)
      for p in precisions:
        median = {name: float(np.median(samples[(run, p, name)]))
                  for name in ("initial", "abstract", "rendered")}
        if state_shape is None:  # [h, w, d] of the first step's features
          state_shape = graph.outputs[0].shape.as_list()[1:]
        jump = models[kind].spec.jump
        rows.append(dict(
            size=size, kind=kind, precision=p, jump=jump,
            value_checks=checks, noise=v if kind in STOCHASTIC else "none",
            branches=b,
            abstract_per_s=ROWS * DEPTH / median["abstract"],
            rendered_per_s=ROWS * DEPTH / median["rendered"],
            with_initial_per_s=ROWS * DEPTH / (median["abstract"] +
                                               median["initial"]),
            initial_ms=1e3 * median["initial"],
            samples_ms={name: [1e3 * t for t in samples[(run, p, name)]]
                        for name in ("initial", "abstract", "rendered")},
            gflop_per_s=flops / median["abstract"],
            gflop_per_call=flops))
    with_peak = {}  # (precision, row branches) -> GFLOP/s
    for p in precisions:
      for b in counts:
        with precision.scope(p):
          with_peak[(p, b)] = conv_peak(state_shape, repeats, b)
    for row in rows:
      if row["size"] == size:
        row["conv_peak_gflop_per_s"] = with_peak[(row["precision"],
                                                  row["branches"])]
        row["state_shape"] = state_shape
    if len(check_modes) == 2:
      for kind in kinds:
        cost = check_cost(models[kind], repeats)
        for row in rows:
          if row["size"] == size and row["kind"] == kind:
            row.update(cost)
  for row in rows:  # x AR per primitive step, same size and precision
    ar = [r for r in rows if r["kind"] == "ar" and r["size"] == row["size"]
          and r["precision"] == row["precision"] and
          r["value_checks"] == row["value_checks"] and
          r["branches"] == row["branches"]]
    if ar:
      row["x_ar"] = (row["abstract_per_s"] * row["jump"] /
                     ar[0]["abstract_per_s"])
      row["x_ar_with_initial"] = (row["with_initial_per_s"] * row["jump"] /
                                  ar[0]["with_initial_per_s"])
  return rows


def markdown(rows: List[Dict[str, Any]]) -> str:
  lines = ["| size | kind | noise | precision | value checks | branches | "
           "abstract /s | with s_t\\|t /s | rendered /s | s_t\\|t ms | "
           "x AR (prim.) | x AR with s_t\\|t | GFLOP/s | % conv peak |",
           "|---" * 14 + "|"]
  for r in rows:
    lines.append(
        f"| {r['size']} | {r['kind']} | {r.get('noise', 'table')} | "
        f"{r['precision']} | {'on' if r['value_checks'] else 'off'} | "
        f"{r.get('branches', 1)} | "
        f"{r['abstract_per_s']:,.0f} | {r['with_initial_per_s']:,.0f} | "
        f"{r['rendered_per_s']:,.0f} | {r['initial_ms']:.1f} | "
        f"{r.get('x_ar', float('nan')):.1f} | "
        f"{r.get('x_ar_with_initial', float('nan')):.1f} | "
        f"{r['gflop_per_s']:.0f} | "
        f"{100 * r['gflop_per_s'] / r['conv_peak_gflop_per_s']:.0f} |")
  lines.append(
      f"\n{ENVS} windows x K = {ROLLOUTS} rollouts x depth {DEPTH} "
      f"({ROWS} rows), noise keys, untrained models; median of the rounds, "
      "timed round-robin. Transitions are model steps; x AR compares per "
      "primitive step (a jumpy model's step is c of them).")
  costs = list({(r["size"], r["kind"], r["precision"]): r for r in rows
                if "check_us_int" in r and r["value_checks"]}.values())
  if costs:
    lines.append("\nValue checks alone (encoding one call's actions with "
                 "minus without them, us): " + ", ".join(
                     f"{r['size']} {r['kind']} {r['precision']}: int "
                     f"{r['check_us_int']:.0f}, relaxed "
                     f"{r['check_us_relaxed']:.0f}" for r in costs))
  return "\n".join(lines)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--sizes", default="paper,small")
  parser.add_argument("--kinds", default=",".join(KINDS))
  parser.add_argument("--precisions", default="")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--value-checks", default="on",
                      choices=("on", "off", "both"),
                      help="trace with the API's value checks (on, what "
                      "agents run), without, or both side by side")
  parser.add_argument("--noise", default="table",
                      help=f"keyed-normal variants to compare: {NOISE}")
  parser.add_argument("--threads", default=precision.THREADS_AUTO,
                      help="'auto', 'default' or 'INTRA,INTER'")
  parser.add_argument("--branches", default="auto",
                      help="row branches to compare, e.g. '1,auto' "
                      "(envmodels/branches.py; auto: what the I2A runs)")
  parser.add_argument("--output",
                      default=os.path.join(RESULTS, "rollout_speed.json"))
  args = parser.parse_args()
  threads = precision.set_threads(args.threads)  # before any TF op
  counts = branches.parse_counts(args.branches)
  sizes = [s for s in args.sizes.split(",") if s]
  kinds = [k for k in args.kinds.split(",") if k]
  variants = [v for v in args.noise.split(",") if v]
  for name, known, given in (("size", FRAMES, sizes), ("kind", KINDS, kinds),
                             ("noise variant", NOISE, variants)):
    unknown = sorted(set(given) - set(known))
    if unknown:
      parser.error(f"unknown {name}s {unknown}; choose from {sorted(known)}")
  precisions = ([p for p in args.precisions.split(",") if p] or
                list(dict.fromkeys(["fp32", precision.resolve("auto")])))
  for p in precisions:
    precision.resolve(p)  # refuses what this machine cannot run
  if not variants:
    parser.error(f"--noise is empty; choose from {NOISE}")
  check_modes = {"on": (True,), "off": (False,),
                 "both": (True, False)}[args.value_checks]
  rows = measure(sizes, kinds, precisions, args.repeats, check_modes,
                 variants, counts)
  table = markdown(rows)
  print(table)
  io_utils.atomic_write_json(args.output, dict(
      rows=rows, envs=ENVS, rollouts=ROLLOUTS, depth=DEPTH,
      load_average=os.getloadavg(), machine=platform.processor() or
      platform.machine(), cpu_has_bf16=precision.cpu_has_bf16(),
      tensorflow=tf.__version__, threads=threads,
      command=" ".join(sys.argv)))
  io_utils.atomic_write_text(os.path.splitext(args.output)[0] + ".md",
                             table + "\n")


if __name__ == "__main__":
  main()
