"""Training throughput of agents in the embedded runtime (i2a/run/train.py).

For each row (a named agent config), builds the real Trainer (actor,
learner, and the transport between them: `--transports local,reverb` puts
the in-process path and the embedded Reverb server's side by side) in a
temporary workdir, runs `--warmup` updates (tracing,
queues), then times `--updates` updates, each = batch_size // num_envs actor
unrolls + one learner step, and reports:
  env steps/s       environment steps over all envs per second of the loop
  learner steps/s   updates per second of the loop
  actor ms/unroll, learner ms/step   where the time goes
  x A2C             env steps/s over the A2C row's on the same environment
                    (same precision, transport, number of envs and
                    overlap: config.overlap_acting, `--overlap off,on`;
                    `--weight_copies on,off` adds rows ROW.../casts whose
                    actor acts on the weights, not their bfloat16 copies)
  GFLOP/window      float operations of acting on one window (TensorFlow's
                    graph profiler; an I2A's rollouts included, the
                    oracle's emulator steps not): the I2A's cost is its
                    envmodel's K x tau steps, which this makes visible
Writes benchmarks/results/train_throughput.json and prints a markdown table.
TensorFlow's thread pools are sized first thing as the binaries size them
(`--threads`, default auto, envmodels/precision.py; recorded in the
JSON): before that flag, every row ran with TensorFlow's default pools,
two threads per op on 2 cores, not what `python -m i2a.train` runs with
there (one).

  python benchmarks/train_throughput.py [--rows a2c/minipacman,a2c/mspacman]
      [--updates 100] [--warmup 10] [--precisions fp32,bf16]
      [--transports local,reverb] [--overlap off,on] [--repeats 3]
      [--weight_copies on,off]
      [--interleave B]
      [--writes B [--items_of 1,4,0]] [--threads auto] [--output FILE]

With --interleave B (and --transports local,reverb) each row's Trainers
of every transport are built side by side in one process and timed in B
alternating blocks of --updates updates: the steadiest ratio on a busy
machine. With --repeats R every cell is measured R times round-robin (all cells,
then all again), so that a machine whose load changes affects the cells
alike; each cell reports its median repeat and every repeat's env steps/s.

With --writes B each row's Reverb path alone is timed, ways an actor can
put its unroll batch {field: [N, ...]} into the `unrolls` queue side by
side in one process (agents/acting.py `write_unrolls`): items of U
unrolls for each U of --items_of (1: an item per environment, N appends
and create_items, one flush; 0: U = N, one item of the whole batch).
Real unroll batches of the row's actor are written and read back by the
learner's dataset (agents/learning.py `unroll_dataset`, batch_size
unrolls per read) in B alternating blocks of --updates updates; reported
per unroll batch: the writer's ms in append, create_item and flush, and
the learner's ms per batch read. Every layout's first batch read is
checked equal.

Other agents add rows to ROWS by name: a Row gives the config file, the
preset, overrides, and optionally `setup(tmpdir) -> overrides` for what a
row needs built first (e.g. an envmodel export for an I2A row).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import importlib
import math
import os
import platform
import sys
import tempfile
import time
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for configs/

# pylint: disable=wrong-import-position
import ml_collections
import numpy as np
import tensorflow as tf

from agents import learning
from agents.acting import unroll_signature, write_unrolls
from envmodels import precision as precision_lib
from i2a import io_utils
from i2a.replay import tables
from i2a.run import train as training

RESULTS = os.path.join(HERE, "results")


@dataclasses.dataclass(frozen=True)
class Row:
  config_file: str  # e.g. "configs/agents/a2c.py"
  preset: str
  overrides: Dict[str, Any] = dataclasses.field(default_factory=dict)
  # setup(tmpdir) -> more overrides, e.g. {"envmodel": export_dir}.
  setup: Optional[Callable[[str], Dict[str, Any]]] = None


def envmodel_export(model_config_file: str, agent_config_file: str,
                    preset: str) -> Callable[[str], Dict[str, Any]]:
  """A Row.setup: exports a freshly initialised model of
  `model_config_file`'s preset (kind, jump, context, sizes) for the agent
  config's protocol. Throughput does not depend on the weights, so nothing
  is pretrained; the model's architecture and compute are the real ones."""
  def setup(tmpdir: str) -> Dict[str, Any]:
    import envmodels  # pylint: disable=import-outside-toplevel
    from i2a import runs  # pylint: disable=import-outside-toplevel
    from i2a.run import pretrain as pretraining  # pylint: disable=import-outside-toplevel
    module = importlib.import_module(
        model_config_file[:-len(".py")].replace("/", "."))
    agent = importlib.import_module(
        agent_config_file[:-len(".py")].replace("/", "."))
    config = module.get_config(preset)
    protocol = runs.protocol_from_config(agent.get_config(preset))
    spec = pretraining.model_spec(config, protocol)
    # Untrained: the reward coding does not change the compute.
    model = envmodels.build(spec, seed=0, **pretraining.model_hyperparameters(
        config, reward_scale=1.0))
    model.create_variables()
    return {"envmodel": envmodels.export(
        model, os.path.join(tmpdir, f"{spec.kind}_export"))}
  return setup


_I2A = "configs/agents/i2a.py"
# MsPacman 104x80, 5 actions; the `small` I2A: K = 5 rollouts (one per
# action) of depth tau = 3 of a jumpy (c = 3) model, abstract imaginations.
_DSSM_DET_SMALL = envmodel_export("configs/envmodels/dssm_det.py", _I2A,
                                  "small")
# MiniPacman 16x24, 5 actions; the `minipacman` I2A's dSSM-DET (c = 1).
_DSSM_DET_MINIPACMAN = envmodel_export("configs/envmodels/dssm_det.py", _I2A,
                                       "minipacman")

ROWS: Dict[str, Row] = {
    "a2c/minipacman": Row("configs/agents/a2c.py", "minipacman"),
    "i2a_distillation/minipacman": Row(_I2A, "minipacman",
                                       setup=_DSSM_DET_MINIPACMAN),
    # Rendered imaginations: the learner queries the model again and
    # renders ('auto' for pixels: 'recompute'), or reads the frames the
    # actor stored ('actor'), side by side.
    "i2a_pixels/minipacman": Row(
        _I2A, "minipacman", {"network.imagination": "pixels"},
        setup=_DSSM_DET_MINIPACMAN),
    "i2a_pixels_actor/minipacman": Row(
        _I2A, "minipacman", {"network.imagination": "pixels",
                             "network.learner_rollouts": "actor"},
        setup=_DSSM_DET_MINIPACMAN),
    # More environments per actor (the batch grows with them): what the
    # per-call costs come to when each call serves 32 windows.
    "a2c/minipacman_32envs": Row("configs/agents/a2c.py", "minipacman",
                                 {"num_envs": 32, "batch_size": 32}),
    "i2a_distillation/minipacman_32envs": Row(
        _I2A, "minipacman", {"num_envs": 32, "batch_size": 32},
        setup=_DSSM_DET_MINIPACMAN),
    # The emulator oracle: its rollouts run in the actor (side inputs).
    "i2a_oracle/minipacman": Row(_I2A, "minipacman",
                                 {"network.model": "oracle"}),
    "a2c/mspacman": Row("configs/agents/a2c.py", "small"),
    # The learner reads the actor's stored rollouts ('auto'), or queries
    # the model again ('recompute'): the saving, side by side.
    "i2a_distillation/mspacman": Row(_I2A, "small", setup=_DSSM_DET_SMALL),
    "i2a_distillation_recompute/mspacman": Row(
        _I2A, "small", {"network.learner_rollouts": "recompute"},
        setup=_DSSM_DET_SMALL),
    "i2a_learning_to_query/mspacman": Row(
        _I2A, "small", {"network.rollout_policy": "learning_to_query"},
        setup=_DSSM_DET_SMALL),
    "i2a_imagination_prior/mspacman": Row(
        _I2A, "small", {"network.rollout_policy": "imagination_prior"},
        setup=envmodel_export("configs/envmodels/sssm_action_free.py", _I2A,
                              "small")),
    "i2a_copy/mspacman": Row(_I2A, "small", {"network.model": "copy"},
                             setup=_DSSM_DET_SMALL),
    "i2a_pixels/mspacman": Row(_I2A, "small",
                               {"network.imagination": "pixels"},
                               setup=_DSSM_DET_SMALL),
    # The `paper` preset, 200x160 frames, 25x20 model states: A2C, and the
    # I2A-distillation over a jumpy dSSM-DET at the `small` rows' K = 5,
    # tau = 3 (the preset itself uses tau = 4), so that the sizes compare.
    "a2c/mspacman_paper": Row("configs/agents/a2c.py", "paper"),
    "i2a_distillation/mspacman_paper": Row(
        _I2A, "paper", {"network.depth": 3},
        setup=envmodel_export("configs/envmodels/dssm_det.py", _I2A,
                              "paper")),
}


def load_config(row: Row, tmpdir: str) -> ml_collections.ConfigDict:
  module = importlib.import_module(
      row.config_file[:-len(".py")].replace("/", "."))
  config = module.get_config(row.preset)
  overrides = dict(row.overrides)
  if row.setup is not None:
    overrides.update(row.setup(tmpdir))
  for key, value in overrides.items():
    target = config
    *parents, leaf = key.split(".")
    for parent in parents:
      target = target[parent]
    target[leaf] = value
  return config


def forward_gflop_per_window(network: Any, batch: int,
                             observation_shape: Any) -> float:
  """Float operations of acting on one window (GFLOP), from TensorFlow's
  graph profiler over the traced network. Rollouts the actor stores (side
  inputs) are computed in the traced forward, as acting computes them; an
  emulator oracle's come in as inputs (its emulator steps count nothing)."""
  windows = tf.TensorSpec([batch, len(network.window_offsets),
                           *observation_shape], tf.uint8)
  side = None
  if getattr(network, "needs_env_states", False):
    side = {name: tf.TensorSpec([batch, *spec.shape], spec.dtype)
            for name, spec in network.side_input_spec().items()}
  graph = tf.function(lambda w, s: network(w, s).policy_logits
                      ).get_concrete_function(windows, side).graph
  options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
  options["output"] = "none"
  total = tf.compat.v1.profiler.profile(graph, options=options)
  return total.total_float_ops / batch / 1e9


def measure(row: Row, updates: int, warmup: int,
            precision: str = "", transport: str = "local",
            overlap: bool = False, weight_copies: bool = True
            ) -> Dict[str, Any]:
  with tempfile.TemporaryDirectory() as tmpdir:
    config = load_config(row, tmpdir)
    if precision:
      config.precision = precision
    config.overlap_acting = overlap
    config.queue_size = max(config.queue_size, 2 * config.batch_size)
    trainer = training.Trainer(config, os.path.join(tmpdir, "run"),
                               transport=transport)
    try:
      trainer.actor.use_weight_copies(weight_copies)
      gflop = forward_gflop_per_window(trainer.actor.network,
                                       config.num_envs,
                                       trainer.observation_shape)
      trainer.learner.publish()
      unrolls = config.batch_size // config.num_envs
      def update(times):
        if overlap:  # the loop's own update: acting beside the step
          start = time.perf_counter()
          trainer.loop.update()
          times[0] += time.perf_counter() - start
          return
        start = time.perf_counter()
        for _ in range(unrolls):
          trainer.actor.unroll()
        middle = time.perf_counter()
        trainer.learner.step()
        times[0] += middle - start
        times[1] += time.perf_counter() - middle
      ignored = [0.0, 0.0]
      for _ in range(warmup):
        update(ignored)
      times = [0.0, 0.0]
      start = time.perf_counter()
      for _ in range(updates):
        update(times)
      elapsed = time.perf_counter() - start
    finally:
      trainer.close()
  env_steps = updates * config.batch_size * config.unroll_length
  return dict(
      config_file=row.config_file, preset=row.preset,
      overrides={k: str(v) for k, v in row.overrides.items()},
      precision=config.precision, transport=transport,
      overlap_acting=overlap, weight_copies=weight_copies,
      env_id=config.protocol.env_id, num_envs=config.num_envs,
      unroll_length=config.unroll_length, batch_size=config.batch_size,
      observation_size=list(config.protocol.observation_size),
      updates=updates, env_steps_per_s=env_steps / elapsed,
      learner_steps_per_s=updates / elapsed,
      actor_ms_per_unroll=(math.nan if overlap else
                           1000 * times[0] / (updates * unrolls)),
      learner_ms_per_step=math.nan if overlap else 1000 * times[1] / updates,
      forward_gflop_per_window=gflop)


def interleaved(row: Row, blocks: int, updates: int, warmup: int,
                precision: str, transports: Sequence[str]
                ) -> Dict[str, Any]:
  """The row's Trainer at each transport, built side by side in this
  process and timed in alternating blocks of `updates` updates, so that
  a changing machine load falls on every transport alike; env steps/s of
  each block, and each block's rate over the first transport's block of
  the same round."""
  with tempfile.TemporaryDirectory() as tmpdir:
    config = load_config(row, tmpdir)
    if precision:
      config.precision = precision
    trainers = {}
    try:
      for transport in transports:
        trainers[transport] = training.Trainer(
            config, os.path.join(tmpdir, transport), transport=transport)
        trainers[transport].learner.publish()
      unrolls = config.batch_size // config.num_envs

      def run(trainer, count) -> float:
        start = time.perf_counter()
        for _ in range(count):
          for _ in range(unrolls):
            trainer.actor.unroll()
          trainer.learner.step()
        return time.perf_counter() - start
      for trainer in trainers.values():
        run(trainer, warmup)
      rates: Dict[str, list] = {t: [] for t in transports}
      for _ in range(blocks):
        for transport, trainer in trainers.items():
          rates[transport].append(
              updates * config.batch_size * config.unroll_length /
              run(trainer, updates))
    finally:
      for trainer in trainers.values():
        trainer.close()
  first = transports[0]
  return dict(
      config_file=row.config_file, preset=row.preset,
      precision=config.precision, blocks=blocks, updates_per_block=updates,
      env_steps_per_s={t: float(np.median(r)) for t, r in rates.items()},
      blocks_env_steps_per_s=rates,
      median_ratio_to_first={
          t: float(np.median(np.array(r) / np.array(rates[first])))
          for t, r in rates.items()})


class TimedWriter:
  """A reverb.TrajectoryWriter whose append, create_item and flush calls
  are timed: `seconds[call]` sums each kind's wall time."""

  def __init__(self, writer: Any):
    self._writer = writer
    self.seconds: Dict[str, float] = collections.defaultdict(float)

  @property
  def history(self) -> Any:
    return self._writer.history

  def _timed(self, call: str, *args, **kwargs) -> Any:
    start = time.perf_counter()
    try:
      return getattr(self._writer, call)(*args, **kwargs)
    finally:
      self.seconds[call] += time.perf_counter() - start

  def append(self, *args, **kwargs) -> None:
    self._timed("append", *args, **kwargs)

  def create_item(self, *args, **kwargs) -> None:
    self._timed("create_item", *args, **kwargs)

  def flush(self, *args, **kwargs) -> None:
    self._timed("flush", *args, **kwargs)

  def close(self) -> None:
    self._writer.close()


def writes(row: Row, blocks: int, updates: int, warmup: int,
           precision: str, items_of: Sequence[int],
           distinct_batches: int = 4) -> Dict[str, Any]:
  """The row's unroll batches written to and read from a Reverb `unrolls`
  queue as items of each of `items_of` unrolls (0: the whole batch),
  alternating blocks of `updates` updates (each: batch_size // num_envs
  batches written, one learner batch read) in one process with one
  embedded server; ms per unroll batch in each writer call and per
  learner read, medians over the blocks, keyed by unrolls per item."""
  with tempfile.TemporaryDirectory() as tmpdir:
    config = load_config(row, tmpdir)
    if precision:
      config.precision = precision
    trainer = training.Trainer(config, os.path.join(tmpdir, "run"),
                               transport="local")
    try:  # Real unrolls: their contents (and how they compress) are a run's.
      trainer.learner.publish()
      batches = [trainer.actor.unroll()[0] for _ in range(distinct_batches)]
      network = trainer.actor.network
      layouts = sorted({u or config.num_envs for u in items_of})
      signatures = {per_item: unroll_signature(
          config.unroll_length, len(network.window_offsets),
          trainer.observation_shape, trainer.num_actions,
          network.side_input_spec(), per_item) for per_item in layouts}
      chosen = training.unrolls_per_item(config, signatures[1])
    finally:
      trainer.close()
  server = tables.start_server([
      tables.unrolls_table(signatures[per_item],
                           config.queue_size // per_item,
                           name=f"unrolls_{per_item}")
      for per_item in layouts])
  unrolls = config.batch_size // config.num_envs
  writers, readers = {}, {}
  try:
    client = server.localhost_client()
    for per_item in layouts:
      writers[per_item] = TimedWriter(client.trajectory_writer(
          num_keep_alive_refs=1))
      readers[per_item] = iter(learning.unroll_dataset(
          f"localhost:{server.port}", config.batch_size,
          table=f"unrolls_{per_item}", timeout_ms=60_000,
          unrolls_per_item=per_item))
    written = [0]

    def run(per_item: int, count: int) -> Tuple[Dict[str, float], Any]:
      writer = writers[per_item]
      writer.seconds.clear()
      read_s = write_s = 0.0
      first = None
      for _ in range(count):
        start = time.perf_counter()
        for _ in range(unrolls):
          write_unrolls(writer, f"unrolls_{per_item}",
                        batches[written[0] % len(batches)], per_item)
          written[0] += 1
        middle = time.perf_counter()
        batch = next(readers[per_item])
        read_s += time.perf_counter() - middle
        write_s += middle - start
        first = first if first is not None else batch
      times = {f"{call}_ms": 1000 * seconds / (count * unrolls)
               for call, seconds in writer.seconds.items()}
      times.update(write_ms=1000 * write_s / (count * unrolls),
                   read_ms=1000 * read_s / count,
                   update_ms=1000 * (write_s + read_s) / count)
      return times, first

    firsts = {}
    for per_item in layouts:
      written[0] = 0  # Every layout's first read holds the same unrolls.
      _, firsts[per_item] = run(per_item, max(warmup, 1))
    for per_item in layouts:
      for name, value in firsts[per_item].items():
        np.testing.assert_array_equal(value.numpy(),
                                      firsts[layouts[0]][name].numpy())
    samples: Dict[int, list] = {per_item: [] for per_item in layouts}
    for _ in range(blocks):
      for per_item in layouts:
        samples[per_item].append(run(per_item, updates)[0])
  finally:
    for writer in writers.values():
      writer.close()
    server.stop()
  medians = {per_item: {key: float(np.median([s[key] for s in runs]))
                        for key in runs[0]}
             for per_item, runs in samples.items()}
  update_ms = {per_item: np.array([s["update_ms"] for s in runs])
               for per_item, runs in samples.items()}
  return dict(
      config_file=row.config_file, preset=row.preset,
      precision=config.precision, num_envs=config.num_envs,
      unroll_length=config.unroll_length, batch_size=config.batch_size,
      mb_per_unroll_batch=sum(v.nbytes for v in batches[0].values()) / 2**20,
      runtime_unrolls_per_item=chosen, blocks=blocks,
      updates_per_block=updates, ms=medians,
      blocks_update_ms={u: list(map(float, t)) for u, t in update_ms.items()},
      median_update_ratio_to_items_of_1={
          u: float(np.median(t / update_ms[layouts[0]]))
          for u, t in update_ms.items()})


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--rows", default=",".join(ROWS),
                      help=f"comma-separated names among {sorted(ROWS)}")
  parser.add_argument("--updates", type=int, default=100)
  parser.add_argument("--warmup", type=int, default=10)
  parser.add_argument("--precisions", default="",
                      help="comma-separated (fp32, bf16, auto): each row at "
                      "each, named ROW@PRECISION; default: the configs'")
  parser.add_argument("--transports", default="local",
                      help="comma-separated among "
                      f"{training.TRANSPORTS}: how the embedded actor and "
                      "learner exchange unrolls and weights "
                      "(i2a/run/train.py); each row at each, named "
                      "ROW[@PRECISION]/TRANSPORT when more than one")
  parser.add_argument("--overlap", default="off",
                      help="comma-separated among off, on: config."
                      "overlap_acting (the actor acts the next update "
                      "beside the learner's step); each row at each, "
                      "named ROW.../overlap when on (the parts' ms are "
                      "then not separable: nan)")
  parser.add_argument("--weight_copies", default="on",
                      help="on, off or both: the actor acts on bfloat16 "
                      "copies of its weights under bf16 (agents/acting.py; "
                      "rows named ROW.../casts when off)")
  parser.add_argument("--repeats", type=int, default=1,
                      help="measure every cell this many times, round-"
                      "robin (all cells once, then again), and report "
                      "each cell's median (and every repeat's figure)")
  parser.add_argument("--interleave", type=int, default=0,
                      help="instead of the table: build every transport's "
                      "Trainer of each row side by side and time this many "
                      "alternating blocks of --updates updates each "
                      "(one process; the ratio between transports is the "
                      "figure)")
  parser.add_argument("--writes", type=int, default=0,
                      help="instead of the table: time this many "
                      "alternating blocks of --updates updates of the "
                      "Reverb writes and reads alone, with items of each "
                      "of --items_of unrolls (one process)")
  parser.add_argument("--items_of", default="1,0",
                      help="with --writes: comma-separated unrolls per "
                      "Reverb item, divisors of num_envs (0: num_envs, "
                      "an item per unroll batch)")
  parser.add_argument("--threads", default=precision_lib.THREADS_AUTO,
                      help="TensorFlow's thread pools, sized first thing as "
                      "the binaries' config `threads` does ('auto', "
                      "'default' or 'INTRA,INTER')")
  parser.add_argument("--output",
                      default=os.path.join(RESULTS, "train_throughput.json"),
                      help="where the JSON report goes")
  args = parser.parse_args()
  threads = precision_lib.set_threads(args.threads)  # before any TF op
  names = [n for n in args.rows.split(",") if n]
  unknown = sorted(set(names) - set(ROWS))
  if unknown:
    parser.error(f"unknown rows {unknown}; known: {sorted(ROWS)}")
  precisions = [p for p in args.precisions.split(",") if p] or [""]
  transports = [t for t in args.transports.split(",") if t]
  unknown = sorted(set(transports) - set(training.TRANSPORTS))
  if unknown or not transports:
    parser.error(f"unknown transports {unknown or transports}; known: "
                 f"{training.TRANSPORTS}")
  if args.repeats < 1:
    parser.error(f"--repeats must be >= 1, given {args.repeats}")
  if args.writes:
    items_of = [int(u) for u in args.items_of.split(",") if u]
    report = {}
    for name in names:
      for precision in precisions:
        label = f"{name}@{precision}" if precision else name
        print(f"timing the writes of {label} ...", file=sys.stderr,
              flush=True)
        report[label] = r = writes(ROWS[name], args.writes, args.updates,
                                   args.warmup, precision, items_of)
        for per_item, ms in r["ms"].items():
          print(f"{label}, items of {per_item} of {r['num_envs']} unrolls "
                f"({r['mb_per_unroll_batch']:.2f} MB per unroll batch): "
                f"write {ms['write_ms']:.2f} ms/unroll batch (append "
                f"{ms['append_ms']:.2f}, create_item "
                f"{ms['create_item_ms']:.2f}, flush {ms['flush_ms']:.2f}), "
                f"read {ms['read_ms']:.2f} ms/learner batch, update "
                f"{ms['update_ms']:.2f} ms "
                f"(x{r['median_update_ratio_to_items_of_1'][per_item]:.2f})")
        print(f"{label}: the runtimes write items of "
              f"{r['runtime_unrolls_per_item']}")
    io_utils.atomic_write_json(args.output, dict(
        writes=report, command=" ".join(sys.argv), threads=threads,
        load_average=list(os.getloadavg()),
        date=time.strftime("%Y-%m-%dT%H:%M:%S")))
    return
  if args.interleave:
    report = {}
    for name in names:
      for precision in precisions:
        label = f"{name}@{precision}" if precision else name
        print(f"interleaving {label} ...", file=sys.stderr, flush=True)
        report[label] = interleaved(ROWS[name], args.interleave,
                                    args.updates, args.warmup, precision,
                                    transports)
        r = report[label]
        print(f"{label}: " + ", ".join(
            f"{t} {r['env_steps_per_s'][t]:,.0f} env steps/s "
            f"(x{r['median_ratio_to_first'][t]:.2f})" for t in transports))
    io_utils.atomic_write_json(args.output, dict(
        interleaved=report, command=" ".join(sys.argv), threads=threads,
        load_average=list(os.getloadavg()),
        date=time.strftime("%Y-%m-%dT%H:%M:%S")))
    return
  overlaps = [o for o in args.overlap.split(",") if o]
  if not overlaps or set(overlaps) - {"off", "on"}:
    parser.error(f"--overlap takes off, on; given {args.overlap!r}")
  copies = [c for c in args.weight_copies.split(",") if c]
  if not copies or set(copies) - {"off", "on"}:
    parser.error(f"--weight_copies takes off, on; given "
                 f"{args.weight_copies!r}")
  cells = {}
  for name in names:
    for precision in precisions:
      for transport in transports:
        for overlap in overlaps:
          for copy in copies:
            label = f"{name}@{precision}" if precision else name
            if len(transports) > 1:
              label += f"/{transport}"
            if overlap == "on":
              label += "/overlap"
            if copy == "off":
              label += "/casts"
            cells[label] = (name, precision, transport, overlap == "on",
                            copy == "on")
  samples: Dict[str, list] = {label: [] for label in cells}
  for repeat in range(args.repeats):
    for label, (name, precision, transport, overlap, copy) in cells.items():
      print(f"measuring {label} (repeat {repeat + 1} of {args.repeats}) ...",
            file=sys.stderr, flush=True)
      samples[label].append(measure(ROWS[name], args.updates, args.warmup,
                                    precision, transport, overlap, copy))
  results = {}
  for label, runs in samples.items():
    rates = [r["env_steps_per_s"] for r in runs]
    median = runs[int(np.argsort(rates)[len(rates) // 2])]
    results[label] = dict(median, repeats_env_steps_per_s=rates)
  report = dict(
      rows=results, command=" ".join(sys.argv), repeats=args.repeats,
      threads=threads,
      python=platform.python_version(),
      tensorflow=tf.__version__, numpy=np.__version__,
      machine=platform.machine(), cpus=os.cpu_count(),
      load_average=list(os.getloadavg()),
      date=time.strftime("%Y-%m-%dT%H:%M:%S"))
  # Each row against A2C on the same environment at the same precision,
  # measured in this run.
  a2c = {(r["env_id"], r["precision"], r["transport"], r["num_envs"],
          r["overlap_acting"], r["weight_copies"]): r["env_steps_per_s"]
         for name, r in results.items() if name.startswith("a2c/")}
  for r in results.values():
    key = (r["env_id"], r["precision"], r["transport"], r["num_envs"],
           r["overlap_acting"], r["weight_copies"])
    r["relative_to_a2c"] = (r["env_steps_per_s"] / a2c[key]
                            if key in a2c else None)
  io_utils.atomic_write_json(args.output, report)
  print("\n| row | environment | envs x unroll | env steps/s | x A2C | "
        "learner steps/s | actor ms/unroll | learner ms/step | "
        "GFLOP/window |")
  print("|---|---|---|---|---|---|---|---|---|")
  for name, r in results.items():
    ratio = r["relative_to_a2c"]
    print(f"| {name} | {r['env_id']} {r['observation_size'][0]}x"
          f"{r['observation_size'][1]} | {r['num_envs']} x "
          f"{r['unroll_length']} | {r['env_steps_per_s']:,.0f} | "
          f"{'-' if ratio is None else f'{ratio:.2f}'} | "
          f"{r['learner_steps_per_s']:,.1f} | "
          f"{r['actor_ms_per_unroll']:.1f} | {r['learner_ms_per_step']:.1f} | "
          f"{r['forward_gflop_per_window']:.3f} |")


if __name__ == "__main__":
  main()
