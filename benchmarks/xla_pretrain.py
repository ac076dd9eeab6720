"""Claim 1 at the `paper` preset on a machine without TensorFlow: trains the
exported pretraining steps with jaxlib's XLA (a GPU where there is one).

Where it sits: `paper_data.py` collects the `paper` preset's dataset (200x160
MsPacman, the `small` behaviour A2C's policy, epsilon 0.2) and packs it
(`packed_data.py`); `export_xla.py --pretrain all` writes each claim-1
model's pretraining step as the XLA HLO TensorFlow lowers it to
(`export_pretrain`: loss, gradients, clipping, guarded Adam, as
`i2a.pretrain` runs it). This script needs only numpy and jax: it compiles
each step, checks it against TensorFlow's outputs on the exporting CPU,
times it, fixes one budget of steps for every model from those timings
(`--budget_s`, unless `--steps` gives it), and trains every model at every
seed for that many steps, seed after seed, evaluating held-out windows
along the way. `xla_pretrain_report.py` makes the table and curves.

What a seed changes: the drawn initial weights (every float variable that
is not constant is a normal of its initial mean and spread, the recipe's
seed shifted per model seed), a stochastic model's random generator (the
key of its Philox state) and the order of the training windows. Held-out
windows: 256 of the test split, chosen as `i2a.evaluate_models` chooses
them (numpy's default_rng(0), sorted), context 3 + T 10 frames.

The JSON is rewritten after every evaluation, so a run stopped at its
time limit keeps what it measured. Compiling is slow on a GPU (XLA tunes
every convolution's algorithm: 327-353 s for the eight programs on an
H200); `--autotune_cache FILE` keeps the tuned algorithms for the next
run (docs/performance.md, "Pretraining at the `paper` preset, through
XLA").

  python benchmarks/xla_pretrain.py --programs DIR --data FILE.bin \\
      --output FILE.json [--seeds 0,1]
      [--budget_s 420 | --deadline_s 540 | --steps N]
      [--evals 6] [--eval_windows 256] [--only dssm_det,...]
      [--autotune_cache FILE.textproto]
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import importlib.util
import json
import os
import platform
import sys
import time
from typing import Any, Deque, Dict, Iterator, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# pylint: disable=wrong-import-position
import numpy as np

import jax
import jax.numpy as jnp

import packed_data
from xla_inputs import draw
from xla_speed import Program, relative_error

# The project's window sampler (numpy only), without importing the `i2a`
# package (its __init__ loads TensorFlow).
_spec = importlib.util.spec_from_file_location(
    "episodes", os.path.join(os.path.dirname(HERE), "i2a", "replay",
                             "episodes.py"))
episodes = importlib.util.module_from_spec(_spec)
sys.modules["episodes"] = episodes  # dataclasses look their module up
_spec.loader.exec_module(episodes)

EVAL_WINDOWS, EVAL_SEED = 256, 0  # as i2a.evaluate_models
SEED_STRIDE = 7919  # recipe seed shift per model seed
RNG_STATE = "StateVar"  # a tf.random.Generator's state variable's name


class Data:
  """The packed dataset: window samplers over palette-index frames, and
  the palette on the device (frames become RGB there)."""

  def __init__(self, path: str, device: Any):
    self.header, arrays = packed_data.read(path)
    self.arrays = arrays
    self.palette = jax.device_put(arrays["palette"], device)
    self.device = device
    self._rgb = jax.jit(lambda index, palette: palette[index])
    self._samplers: Dict[Any, Any] = {}

  def sampler(self, split: str, length: int, jump: int) -> Any:
    key = (split, length, jump)
    if key not in self._samplers:
      a = self.arrays
      self._samplers[key] = episodes.WindowSampler.from_arrays(
          [a[f"{split}/frames"]], a[f"{split}/episode_length"],
          a[f"{split}/action"], a[f"{split}/reward"], a[f"{split}/discount"],
          length, jump)
    return self._samplers[key]

  def batch(self, sampler: Any, ids: np.ndarray) -> Dict[str, jax.Array]:
    """Windows `ids` on the device: observation uint8 [B, L, H, W, 3]."""
    windows = sampler.gather(ids)
    out = {k: jax.device_put(v, self.device) for k, v in windows.items()}
    out["observation"] = self._rgb(out["observation"], self.palette)
    return out


class Model:
  """One exported pretraining step and the state it trains."""

  def __init__(self, directory: str, entry: Dict[str, Any], captures: Any,
               device: Any):
    self.entry, self.device, self.captures = entry, device, captures
    self.name = entry["model"]
    self.program = Program(os.path.join(directory, entry["hlo"]), device,
                           "fp32")
    self.inputs = [p["name"].split("/", 1)[1] for p in entry["parameters"]
                   if p["from"] == "input"]
    self.length = entry["context_length"] + entry["T"]
    self.aliased = sorted(p for p, _ in self.program.aliases)
    self.state: List[Optional[jax.Array]] = []  # None: an input
    self.step_s = float("nan")  # check_and_time measures it

  def initial_state(self, seed: int) -> None:
    """The variables at model seed `seed` (inputs left empty)."""
    state = []
    for p in self.entry["parameters"]:
      if p["from"] == "input":
        state.append(None)
        continue
      if p["from"] == "drawn":
        recipe = dict(p["recipe"])
        if recipe["draw"] == "normal":
          recipe["seed"] += SEED_STRIDE * seed
        value = draw(recipe)
      else:
        value = np.array(self.captures[p["key"]])
        if RNG_STATE in p.get("variable", "") and seed:
          value[-1] += seed  # the Philox key
      state.append(jax.device_put(value, self.device))
    self.state = state

  def _arguments(self, batch: Dict[str, jax.Array]) -> List[jax.Array]:
    arguments = list(self.state)
    for i, name in enumerate(self.inputs):
      arguments[i] = batch[name]
    return arguments

  def train(self, batch: Dict[str, jax.Array]) -> List[jax.Array]:
    """One step: updates the state; returns the metrics (before it)."""
    arguments = self._arguments(batch)
    outputs = self.program(arguments)  # donated buffers -> arguments
    self.state = [None if i < len(self.inputs) else a
                  for i, a in enumerate(arguments)]
    return outputs[:len(self.entry["metric_names"])]

  def evaluate(self, batch: Dict[str, jax.Array]) -> List[jax.Array]:
    """The metrics on `batch`, the state left as it was (copies donated)."""
    arguments = self._arguments(batch)
    for p in self.aliased:
      arguments[p] = jnp.copy(arguments[p])
    return self.program(arguments)[:len(self.entry["metric_names"])]


def prefetched(make: Any, ids: Iterator[np.ndarray],
               depth: int = 2) -> Iterator[Dict[str, jax.Array]]:
  """make(i) for each i of `ids`, in order, `depth` batches gathered ahead
  by a thread (numpy's gathers and the host-to-device copies release the
  GIL, so they overlap the device's steps)."""
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    pending: Deque[concurrent.futures.Future] = collections.deque()
    for i in ids:
      pending.append(pool.submit(make, i))
      if len(pending) > depth:
        yield pending.popleft().result()
    while pending:
      yield pending.popleft().result()


def training_batches(data: Data, model: Model, seed: int, count: int
                     ) -> Iterator[Dict[str, jax.Array]]:
  """`count` batches of uniformly drawn training windows (numpy's
  default_rng(seed), as i2a.pretrain's sampled batches), gathered ahead."""
  sampler = data.sampler("train", model.length, model.entry["jump"])
  rng = np.random.default_rng(seed)
  size = model.entry["batch_size"]
  ids = (rng.integers(0, sampler.num_windows, size) for _ in range(count))
  return prefetched(lambda i: data.batch(sampler, i), ids)


def held_out(model: Model, data: Data, batches: Sequence[np.ndarray]
             ) -> Dict[str, float]:
  """Metrics averaged over the fixed held-out windows (per window)."""
  sampler = data.sampler("test", model.length, model.entry["jump"])
  totals = np.zeros(len(model.entry["metric_names"]))
  count = 0
  for ids in batches:
    metrics = model.evaluate(data.batch(sampler, ids))
    totals += len(ids) * np.array([float(m) for m in metrics])
    count += len(ids)
  return dict(zip(model.entry["metric_names"], (totals / count).tolist()))


def eval_batches(data: Data, model: Model, num_windows: int
                 ) -> List[np.ndarray]:
  sampler = data.sampler("test", model.length, model.entry["jump"])
  rng = np.random.default_rng(EVAL_SEED)
  count = min(num_windows, sampler.num_windows)
  ids = np.sort(rng.choice(sampler.num_windows, count, replace=False))
  size = model.entry["batch_size"]
  # Equal batches only (the program's shapes are fixed): 256 = 16 x 16.
  return [ids[i:i + size] for i in range(0, count - size + 1, size)]


def write_json(path: str, record: Dict[str, Any]) -> None:
  tmp = f"{path}.tmp"
  with open(tmp, "w") as f:
    json.dump(record, f, indent=1)
  os.replace(tmp, path)


def check_and_time(model: Model, data: Data, time_steps: int
                   ) -> Dict[str, Any]:
  """Checks the step against TensorFlow's reference outputs (a fresh state
  on the recipe batch) and times it on training batches."""
  entry, device = model.entry, model.device
  model.initial_state(0)
  reference_batch = {k.split("/", 1)[1]: jax.device_put(draw(r), device)
                     for k, r in entry["inputs"].items()}
  error = relative_error(model.train(reference_batch), entry["reference"])
  # Timed as the runs train: batches gathered ahead by a thread.
  batches = training_batches(data, model, seed=0, count=time_steps + 1)
  jax.block_until_ready(model.train(next(batches)))
  tick = time.perf_counter()
  for _ in range(time_steps):
    out = model.train(next(batches))
  jax.block_until_ready(out)
  model.step_s = (time.perf_counter() - tick) / time_steps
  batches.close()
  return dict(
      kind=entry["kind"], jump=entry["jump"],
      compile_s=model.program.compile_s, relative_error_of_sums=error,
      step_ms=1e3 * model.step_s, gflop_per_step=entry["gflop"],
      tflop_per_s=entry["gflop"] / model.step_s / 1e3,
      learning_rate=entry["learning_rate"], batch_size=entry["batch_size"],
      reward_scale=entry["reward_scale"])


def use_autotune_cache(path: str) -> str:
  """Has XLA read its tuned algorithms from `path` if it exists, else
  write them there ('loaded', 'written'; '' without a path). XLA reads
  XLA_FLAGS when the first backend starts, so this runs before any
  device is touched. The flags apply to GPUs; other devices ignore them.
  """
  if not path:
    return ""
  path = os.path.abspath(path)
  loading = os.path.exists(path)
  flag = ("--xla_gpu_load_autotune_results_from=" if loading else
          "--xla_gpu_dump_autotune_results_to=") + path
  os.environ["XLA_FLAGS"] = " ".join(
      f for f in [os.environ.get("XLA_FLAGS", ""), flag] if f)
  return "loaded" if loading else "written"


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--programs", required=True)
  parser.add_argument("--data", required=True)
  parser.add_argument("--output", required=True)
  parser.add_argument("--seeds", default="0,1")
  parser.add_argument("--budget_s", type=float, default=420.0,
                      help="seconds for the training of every model and "
                      "seed, evaluations included; the steps per run "
                      "follow from the timed steps (a multiple of 100)")
  parser.add_argument("--deadline_s", type=float, default=0.0,
                      help="instead of --budget_s: the training ends about "
                      "this many seconds after the start (setup counted)")
  parser.add_argument("--steps", type=int, default=0,
                      help="steps per run, instead of --budget_s")
  parser.add_argument("--evals", type=int, default=6,
                      help="held-out evaluations after the one at step 0")
  parser.add_argument("--eval_windows", type=int, default=EVAL_WINDOWS)
  parser.add_argument("--time_steps", type=int, default=12,
                      help="steps timed per model before the budget is set")
  parser.add_argument("--compile_threads", type=int, default=8)
  parser.add_argument("--autotune_cache", default="",
                      help="XLA's tuned GPU algorithms: read from this "
                      "file where it exists (compiles skip most of their "
                      "autotuning), else written to it")
  parser.add_argument("--only", default="", help="model names, comma-separated")
  args = parser.parse_args()
  start = time.perf_counter()
  autotune = use_autotune_cache(args.autotune_cache)
  seeds = [int(s) for s in args.seeds.split(",") if s]
  with open(os.path.join(args.programs, "manifest.json")) as f:
    manifest = json.load(f)
  entries = [e for e in manifest["programs"] if e.get("group") == "pretrain"
             and (not args.only or e["model"] in args.only.split(","))]
  if not entries:
    raise SystemExit(f"no pretraining programs in {args.programs} "
                     f"(export_xla.py --pretrain all); --only={args.only!r}")
  device = jax.devices()[0]
  captures = np.load(os.path.join(args.programs, "captures.npz"))
  data = Data(args.data, device)
  record: Dict[str, Any] = dict(
      device=f"{device.device_kind} ({device.platform})",
      jax=jax.__version__, python=platform.python_version(),
      command=" ".join(sys.argv), export_command=manifest.get("command"),
      data=dict(path=args.data, splits={
          s: {k: v for k, v in h.items() if k != "manifest"} | dict(
              policy=h["manifest"].get("policy"))
          for s, h in data.header["splits"].items()}),
      seeds=seeds, autotune_cache=autotune, models={}, runs=[])
  print(f"data loaded in {time.perf_counter() - start:.0f} s", flush=True)

  # Compile (in parallel), check against TensorFlow's reference, time. A
  # model that fails is recorded and left out; the others go on.
  with concurrent.futures.ThreadPoolExecutor(args.compile_threads) as pool:
    compiling = [(e, pool.submit(Model, args.programs, e, captures, device))
                 for e in entries]
  models: List[Model] = []
  for entry, future in compiling:
    try:
      model = future.result()
      record["models"][entry["model"]] = check_and_time(
          model, data, args.time_steps)
    except Exception as error:  # pylint: disable=broad-except
      record["models"][entry["model"]] = dict(error=repr(error))
      print(f"{entry['model']}: FAILED {error!r}", flush=True)
      continue
    models.append(model)
    row = record["models"][model.name]
    print(f"{model.name}: compiled in {row['compile_s']:.1f} s, rel. error "
          f"{row['relative_error_of_sums']:.1e}, {row['step_ms']:.1f} "
          "ms/step", flush=True)
  if not models:
    write_json(args.output, record)
    raise SystemExit("no model compiled")

  # One budget of steps for every model, fixed before any trains.
  evals = max(1, args.evals)
  eval_calls = args.eval_windows // entries[0]["batch_size"] * (evals + 1)
  if args.steps:
    steps = args.steps
  else:
    # Evaluation calls copy the state and gather without a thread: about
    # 2 steps each, counted; 15% spare.
    budget = (args.budget_s if not args.deadline_s else
              args.deadline_s - (time.perf_counter() - start))
    per_step = sum(m.step_s for m in models) * len(seeds)
    overhead = 2.0 * eval_calls * per_step
    steps = int(max(0.0, budget - overhead) / (per_step * 1.15)) // 100 * 100
    if steps < 100:
      write_json(args.output, record)
      raise SystemExit(f"a budget of {budget:.0f} s leaves fewer than 100 "
                       f"steps per run ({per_step:.2f} s per step of every "
                       "model and seed)")
  record.update(steps=steps, evals=evals, eval_windows=args.eval_windows,
                budget_s=None if args.steps else budget,
                setup_s=time.perf_counter() - start)
  print(f"budget: {steps} steps of batch {entries[0]['batch_size']} for "
        f"every model and seed", flush=True)
  write_json(args.output, record)

  every = max(1, steps // evals)
  for seed in seeds:
    for model in models:
      entry = model.entry
      model.initial_state(seed)
      batches = training_batches(data, model, seed, steps)
      held = eval_batches(data, model, args.eval_windows)
      run = dict(model=model.name, seed=seed, steps=steps, curve=[],
                 train=[])
      record["runs"].append(run)
      tick = time.perf_counter()
      pending: List[List[jax.Array]] = []
      for step in range(steps + 1):
        if step % every == 0 or step == steps:
          run["curve"].append(dict(step=step, **held_out(model, data, held)))
          if pending:
            mean = np.mean([[float(x) for x in m] for m in pending], 0)
            run["train"].append(dict(step=step, **dict(zip(
                entry["metric_names"], mean.tolist()))))
            pending = []
          run["wall_s"] = time.perf_counter() - tick
          write_json(args.output, record)
        if step < steps:
          pending.append(model.train(next(batches)))
      batches.close()
      last = run["curve"][-1]
      print(f"seed {seed} {model.name}: held-out "
            f"{last['log_likelihood_per_frame']:.1f} nats/frame after "
            f"{steps} steps, {run['wall_s']:.0f} s", flush=True)
  record["total_s"] = time.perf_counter() - start
  write_json(args.output, record)


if __name__ == "__main__":
  main()
