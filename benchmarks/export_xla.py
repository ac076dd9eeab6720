"""Exports imagination and agent programs as XLA HLO, to time them on
machines without TensorFlow (a GPU machine: benchmarks/xla_speed.py).

Where it sits: `rollout_speed.py` and `train_throughput.py` time the
models and agents in this process with TensorFlow. A machine that cannot
install the project's pinned stack (TensorFlow 2.15 on Python 3.11, Reverb,
the emulator) can still run the same computations: TensorFlow lowers each
tf.function with `jit_compile=True` to an XLA HLO module, and another XLA
(jaxlib's, for one) compiles that module for its own device. The module
is the computation as TensorFlow traced it, op for op; only the compiler's
backend differs. Programs are traced with the API's value checks off
(their asserts are host ops XLA does not compile) and in one row branch.

Rollouts (`--kinds`, `--sizes`, `--envs`): per envmodel kind, size and
number of environments E, the three calls of `rollout_speed.py` (K = 5
rollouts, depth 3, untrained models):
  initial    uint8 context [E, L, H, W, 3] -> the s_t|t nest, tiled to the
             E * K rows (flattened)
  abstract   (s_t|t..., actions [3, R, c] int32, noise keys [3, R, 2]
             int32) -> features and reward of every step
  rendered   the same, plus a frame after every step
Agents (`--agents`, rows of `train_throughput.py`, untrained):
  act        one acting step of the row's num_envs windows, as the actor
             runs it (an I2A with its cache of context-frame encodings:
             the newest frame encoded, the K rollouts, encoder, heads)
  update     one learner update on a fed batch of batch_size unrolls
             (forward, backward, clipping, RMSProp). XLA needs static
             shapes, so the drop of malformed unrolls (a boolean mask,
             taken only when some are malformed) is traced as keeping
             them all: the timed batches are well formed, so the
             computation is the one the learner runs.
Pretraining (`--pretrain`, claim 1's models of
configs/sweeps/table1_small.py, or 'all'; `--pretrain-data` a `paper`
dataset, which sets their reward coding):
  pretrain   one pretraining step of the `paper` preset's model on a batch
             of windows (`export_pretrain`): its metrics, the variables
             updated in place (input/output aliases); every non-constant
             float variable drawn from a recipe (benchmarks/xla_pretrain.py
             trains them)
Written to DIR:
  manifest.json   every program: its HLO file, where each parameter comes
                  from (a generated input, an output of another program,
                  or a captured tensor), GFLOP per call (TensorFlow's
                  profiler), reference checksums of its outputs (sum and
                  sum of |x|, float64) from TensorFlow's XLA on this CPU,
                  and what the timing script needs to derive rates
  NAME.hlo.pb     the serialized HloModuleProto
  captures.npz    the captured tensors (variables, optimizer slots,
                  constants), each stored once under its content's hash;
                  variables over 64 KiB are redrawn from a recipe instead
                  (untrained either way; `Store.parameter`)
Inputs are not shipped: both sides draw them from numpy's legacy
RandomState (the same stream in every numpy version) by the manifest's
recipes (`xla_inputs.py`, numpy only).

  python benchmarks/export_xla.py --output DIR [--sizes paper,small]
      [--kinds dssm_det,...] [--envs 16,256] [--check-envs 16]
      [--agents a2c/mspacman_paper,i2a_distillation/mspacman_paper]
      [--pretrain all --pretrain-data DIR/dataset]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import sys
import tempfile
from typing import Any, Dict, Iterator, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # rollout_speed, ... beside this file

# pylint: disable=wrong-import-position
import numpy as np
import tensorflow as tf

import rollout_speed
import train_throughput
from xla_inputs import constant, draw, normal, randint
from agents import builder, learning
from envmodels import base, branches
from i2a import environments, io_utils, runs
from configs.sweeps import table1_small

ROLLOUTS, DEPTH = rollout_speed.ROLLOUTS, rollout_speed.DEPTH


def checksums(outputs: Any) -> List[Dict[str, Any]]:
  return [dict(shape=list(x.shape), dtype=str(x.dtype),
               sum=float(np.sum(x, dtype=np.float64)),
               abs_sum=float(np.sum(np.abs(x.astype(np.float64)))))
          for x in (np.asarray(o) for o in tf.nest.flatten(outputs))]


class Store:
  """Captured tensors, each kept once under its content's hash; a large
  variable is drawn instead (a recipe; see `parameter`)."""

  LARGE = 1 << 16  # bytes

  def __init__(self):
    self.large = self.LARGE  # export_pretrain lowers it to 0 while it runs
    self.arrays: Dict[str, np.ndarray] = {}
    # id -> (variable, recipe): holding the variable keeps its id unique.
    self._drawn: Dict[int, Any] = {}

  def add(self, array: np.ndarray) -> str:
    digest = hashlib.sha1(repr((array.dtype.str, array.shape)).encode())
    digest.update(np.ascontiguousarray(array).tobytes())
    self.arrays.setdefault(digest.hexdigest(), array)
    return digest.hexdigest()

  def parameter(self, value: np.ndarray,
                variable: Optional[tf.Variable]) -> Dict[str, Any]:
    """Where the timing side gets a captured tensor. A float variable over
    LARGE bytes (the `paper` torsos' fully connected weights and their
    optimizer slots would make the export hundreds of MB) is redrawn
    here from a recipe, a
    constant if all its values are equal, else a normal of its mean and
    standard deviation (the untrained initialiser's scale), so that both
    sides hold the same values."""
    if (variable is None or value.nbytes <= self.large or
        value.dtype != np.float32):
      return {"from": "captured", "key": self.add(value)}
    if id(variable) in self._drawn:
      return {"from": "drawn", "recipe": self._drawn[id(variable)][1]}
    if np.all(value == value.flat[0]):
      recipe = constant(value.shape, float(value.flat[0]), "float32")
    else:
      recipe = normal(value.shape, 1000 + len(self._drawn),
                      float(value.mean()), float(value.std()))
    variable.assign(draw(recipe))
    self._drawn[id(variable)] = (variable, recipe)
    return {"from": "drawn", "recipe": recipe}


def hlo_parameter_shapes(hlo_text: str) -> List[List[int]]:
  """The entry computation's parameter shapes, from the HLO's text."""
  layout = re.search(r"entry_computation_layout=\{\((.*?)\)->", hlo_text)
  if layout is None:
    raise ValueError("no entry_computation_layout in the HLO text")
  return [[int(d) for d in dims.split(",") if d] for dims in
          re.findall(r"\b[a-z]+\d*\[([\d,]*)\]", layout.group(1))]


def export(out_dir: str, store: Store, name: str, fn: Any,
           args: Sequence[Any], sources: Sequence[Dict[str, Any]],
           variables: Sequence[tf.Variable], check: bool,
           **metadata: Any) -> Dict[str, Any]:
  """Writes `fn` (a tf.function with jit_compile=True) traced on `args` as
  NAME.hlo.pb; returns its manifest entry. sources: where each flattened
  argument comes from on the timing side. The captured tensors are read
  before the reference call, which may update variables."""
  flat = tf.nest.flatten(args)
  if len(flat) != len(sources):
    raise ValueError(f"{name}: {len(flat)} flattened arguments but "
                     f"{len(sources)} sources")
  hlo = fn.experimental_get_compiler_ir(*args)(stage="hlo_serialized")
  with io_utils.atomic_path(os.path.join(out_dir, name + ".hlo.pb")) as tmp:
    with open(tmp, "wb") as f:
      f.write(hlo)
  concrete = fn.get_concrete_function(*args)
  by_handle = {id(v.handle): v
               for v in list(variables) + list(concrete.variables)}
  parameters = list(sources)
  for captured in concrete.captured_inputs:  # XLA appends them in order
    variable = by_handle.get(id(captured))
    if variable is None and captured.dtype == tf.resource:
      raise ValueError(f"{name} captures a resource that is none of the "
                       "given variables; it cannot be exported.")
    value = captured.numpy() if variable is None else variable.numpy()
    parameters.append(store.parameter(value, variable))
    if variable is not None:
      parameters[-1] = dict(parameters[-1], variable=variable.name)
  # Each source must have its parameter's shape, in XLA's order.
  shapes = [list(x.shape) for x in flat] + [
      list(store.arrays[p["key"]].shape) if p["from"] == "captured"
      else p["recipe"]["shape"] for p in parameters[len(flat):]]
  expected = hlo_parameter_shapes(
      fn.experimental_get_compiler_ir(*args)(stage="hlo"))
  if shapes != expected:
    raise ValueError(f"{name}: the parameters' shapes {shapes} are not the "
                     f"HLO's {expected}")
  entry = dict(name=name, hlo=name + ".hlo.pb", parameters=parameters,
               gflop=rollout_speed.gflop(concrete.graph), **metadata)
  if check:
    entry["reference"] = checksums(fn(*args))
  print(f"exported {name}: {len(hlo):,} bytes of HLO", flush=True)
  return entry


@contextlib.contextmanager
def static_shapes() -> Iterator[None]:
  """While tracing the learner's update: its drop of malformed unrolls
  keeps them all (see the module docstring)."""
  original = tf.boolean_mask
  tf.boolean_mask = lambda tensor, mask: tensor
  try:
    yield
  finally:
    tf.boolean_mask = original


def export_rollouts(out_dir: str, store: Store, size: str, kind: str,
                    envs: int, check: bool) -> List[Dict[str, Any]]:
  model = rollout_speed.build(kind, size)
  spec, rows = model.spec, envs * ROLLOUTS
  group = f"{size}_{kind}_{envs}"
  inputs = {
      "context": randint([envs, spec.context_length,
                          *rollout_speed.FRAMES[size]], 0, 256, "uint8", 0),
      "actions": randint([DEPTH, rows, spec.jump], 0, 5, "int32", 1),
      "keys": randint([DEPTH, rows, 2], -2**31, 2**31 - 1, "int32", 2),
  }
  context, actions, keys = (tf.constant(draw(inputs[n]))
                            for n in ("context", "actions", "keys"))
  metadata = dict(group="rollouts", model=group, size=size, kind=kind,
                  envs=envs, rows=rows, jump=spec.jump, inputs=inputs)

  @tf.function(jit_compile=True)
  def initial(context):
    state = model.initial_state(context)
    return tf.nest.flatten(tf.nest.map_structure(
        lambda x: tf.repeat(x, ROLLOUTS, 0), state))

  def rollout(render: bool):
    @tf.function(jit_compile=True)
    def run(flat_state, actions, keys):
      state = tf.nest.pack_sequence_as(structure, flat_state)
      outputs = []
      for t in range(DEPTH):
        state, out = model.step(state, actions[t], noise=keys[t])
        outputs += [out.features, out.reward]
        if render:
          outputs.append(model.render(state))
      return outputs
    return run

  entries = []
  with base.value_checks(False), branches.scope(1):
    structure = model.initial_state(context[:1])
    entries.append(export(out_dir, store, f"{group}_initial", initial,
                          (context,), [{"from": "input", "name": "context"}],
                          model.variables, check, function="initial",
                          transitions=0, **metadata))
    # After the export, which may have redrawn variables: the state the
    # timing side computes with the initial program.
    flat_state = initial(context)
    sources = ([{"from": "output", "function": "initial", "index": i}
                for i in range(len(flat_state))] +
               [{"from": "input", "name": "actions"},
                {"from": "input", "name": "keys"}])
    for function, render in (("abstract", False), ("rendered", True)):
      entries.append(export(
          out_dir, store, f"{group}_{function}", rollout(render),
          (flat_state, actions, keys), sources, model.variables, check,
          function=function, transitions=rows * DEPTH, **metadata))
  return entries


def export_agent(out_dir: str, store: Store, row_name: str, tmpdir: str
                 ) -> List[Dict[str, Any]]:
  row = train_throughput.ROWS[row_name]
  config = train_throughput.load_config(row, tmpdir)
  protocol = runs.protocol_from_config(config)
  num_actions = environments.num_actions(protocol)
  shape = tuple(protocol.observation_shape)
  model = (builder.load_envmodel(config.envmodel, protocol, num_actions)
           if config.get("envmodel") else None)
  network = builder.build_network(config, num_actions, shape, model)
  builder.create_variables(network, shape)
  num_envs, batch, n = (config.num_envs, config.batch_size,
                        config.unroll_length)
  group = row_name.replace("/", "_")
  window = [len(network.window_offsets), *shape]
  inputs: Dict[str, Recipe] = {
      "windows": randint([num_envs, *window], 0, 256, "uint8", 10)}
  windows = draw(inputs["windows"])
  cache = network.context_cache(np.repeat(
      windows[:, :1], network.window_offsets[0] + 1, axis=1))
  side = (network.side_inputs(windows[:1], None)  # their shapes
          if network.side_input_spec() else {})
  with base.value_checks(False), branches.scope(1):
    if cache is not None:  # the actor's cached step
      cache.advance(np.zeros(num_envs, bool))
      act_fn = tf.function(network._cached_act, jit_compile=True)  # pylint: disable=protected-access
      older, fresh = network._context_arguments(windows, cache)[1:]  # pylint: disable=protected-access
      inputs["older"] = normal(older.shape, 11)
      inputs["fresh"] = constant(fresh.shape, False, "bool")
      act_args = tuple(tf.constant(draw(inputs[k]))
                       for k in ("windows", "older", "fresh"))
      act_sources = [{"from": "input", "name": k}
                     for k in ("windows", "older", "fresh")]
    elif hasattr(network, "_fused_act"):
      act_fn = tf.function(network._fused_act, jit_compile=True)  # pylint: disable=protected-access
      act_args = (tf.constant(windows),)
      act_sources = [{"from": "input", "name": "windows"}]
    else:
      act_fn = tf.function(lambda w: network(w, None).policy_logits,
                           jit_compile=True)
      act_args = (tf.constant(windows),)
      act_sources = [{"from": "input", "name": "windows"}]
    batch_recipes = {
        "observation": randint([batch, n + 1, *window], 0, 256, "uint8", 20),
        "action": randint([batch, n], 0, num_actions, "int32", 21),
        "reward": normal([batch, n], 22),
        "discount": constant([batch, n], 1.0, "float32"),
        "behaviour_logits": constant([batch, n, num_actions], 0.0,
                                     "float32"),
    }
    for i, (name, value) in enumerate(sorted(side.items())):
      batch_recipes[name] = normal([batch, n + 1, *value.shape[1:]], 30 + i)
    inputs.update({f"batch/{k}": v for k, v in batch_recipes.items()})
    unrolls = {k: tf.constant(draw(v)) for k, v in batch_recipes.items()}
    learner = learning.Learner(
        network, tf.data.Dataset.from_tensors(unrolls).repeat(),
        learning.rmsprop(7e-4, 0.99, 1e-5), discount=0.99, value_coef=0.5,
        entropy_coef=0.01, clip_norm=0.5)
    update = tf.function(learner._update.python_function, jit_compile=True)  # pylint: disable=protected-access
    with static_shapes():
      update.get_concrete_function(unrolls)
    variables = (list(network.variables) + list(learner.optimizer.variables)
                 + [learner.learner_step] +
                 (list(model.variables) if model is not None else []))
    metadata = dict(group="agents", model=group, row=row_name,
                    num_envs=num_envs, batch_size=batch, unroll_length=n,
                    inputs=inputs)
    return [
        export(out_dir, store, f"{group}_act", act_fn, act_args,
               act_sources, variables, True, function="act", **metadata),
        export(out_dir, store, f"{group}_update", update, (unrolls,),
               [{"from": "input", "name": f"batch/{k}"}
                for k in sorted(unrolls)], variables, True,
               function="update", **metadata)]


def export_pretrain(out_dir: str, store: Store, name: str, kind: str,
                    jump: int, data: str, batch_size: int, check: bool,
                    preset: str = "paper") -> Dict[str, Any]:
  """One pretraining step of a `preset` model on `data`, as
  `i2a.pretrain` runs it (`Pretrainer._train_step_impl`: the loss, its
  gradients, global-norm clipping, the guarded fused Adam update). The
  model's and Adam's variables and the model's random generator are
  parameters that the step updates in place (the HLO's input/output
  aliases); its outputs are the step's metrics, sorted by name
  (`metric_names`), computed before the update: called on held-out
  windows with the variables copied, the step evaluates them. It computes
  in float32, what `precision: auto` resolves to on a GPU (the CPU's
  bfloat16 is a graph rewrite that XLA programs do not get)."""
  import sonnet as snt  # pylint: disable=import-outside-toplevel
  import envmodels  # pylint: disable=import-outside-toplevel
  from envmodels import optimization  # pylint: disable=import-outside-toplevel
  from i2a import cli  # pylint: disable=import-outside-toplevel
  from i2a.replay import datasets, files  # pylint: disable=import-outside-toplevel
  from i2a.run import pretrain as pretraining  # pylint: disable=import-outside-toplevel
  config = cli.load_config_file(f"configs/envmodels/{kind}.py:{preset}")
  config.update(dict(jump=jump, batch_size=batch_size, data=data,
                     precision="fp32"))
  protocol = pretraining.dataset_protocol(data)
  length = config.context_length + config.T
  train, test = (datasets.window_sampler(files.split_path(data, split),
                                         length, jump)
                 for split in ("train", "test"))
  scale = pretraining.resolve_reward_scale(config, train, test)
  model = envmodels.build(
      pretraining.model_spec(config, protocol), seed=0,
      **pretraining.model_hyperparameters(config, scale))
  optimizer = snt.optimizers.Adam(config.learning_rate)
  model.create_variables()
  optimization.create_slots(optimizer, model.trainable_variables)
  knobs = config.loss.to_dict()

  @tf.function(jit_compile=True)
  def step(batch):  # Pretrainer._train_step_impl, without the step counter
    with tf.GradientTape() as tape:
      out = model.loss(batch, **knobs)
    variables = model.trainable_variables
    gradients = tape.gradient(out.loss, variables)
    clipped, norm = tf.clip_by_global_norm(gradients, config.clip_norm)
    finite = optimization.apply_if_finite(optimizer, clipped, variables,
                                          out.loss, norm)
    return dict(out.metrics, gradient_norm=norm,
                nonfinite_update=1.0 - tf.cast(finite, tf.float32))

  shape = list(protocol.observation_shape)
  inputs = {
      "batch/action": randint([batch_size, length, jump], 0,
                              environments.num_actions(protocol), "int32", 40),
      "batch/discount": constant([batch_size, length], 1.0, "float32"),
      "batch/observation": randint([batch_size, length, *shape], 0, 256,
                                   "uint8", 41),
      "batch/reward": constant([batch_size, length], 0.0, "float32"),
  }
  batch = {k.split("/")[1]: tf.constant(draw(v)) for k, v in inputs.items()}
  # Every float variable that is not constant is drawn (`Store.parameter`):
  # a normal of its initial mean and spread, whose recipe seed the
  # training side shifts per model seed; the export stays small.
  store.large = 0
  try:
    with base.value_checks(False), branches.scope(1):
      metric_names = sorted(step.get_concrete_function(batch)
                            .structured_outputs)
      variables = list(model.variables) + list(optimizer.variables)
      return export(
          out_dir, store, f"{preset}_{name}_pretrain", step, (batch,),
          [{"from": "input", "name": k} for k in sorted(inputs)], variables,
          check, group="pretrain", model=name, kind=kind, jump=jump,
          size=preset, batch_size=batch_size, context_length=
          config.context_length, T=config.T, learning_rate=
          config.learning_rate, clip_norm=config.clip_norm,
          reward_scale=scale, metric_names=metric_names, inputs=inputs,
          config=config.to_dict())
  finally:
    store.large = store.LARGE


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--output", required=True,
                      help="directory to write (created; a manifest there "
                      "is replaced)")
  parser.add_argument("--sizes", default="paper,small")
  parser.add_argument("--kinds", default=",".join(rollout_speed.KINDS))
  parser.add_argument("--envs", default="16",
                      help="numbers of environments (rows = 5 x each)")
  parser.add_argument("--check-envs", default="16",
                      help="environment counts to compute reference "
                      "checksums for here (they run the programs on this "
                      "CPU)")
  parser.add_argument("--agents", default="a2c/mspacman_paper,"
                      "i2a_distillation/mspacman_paper",
                      help="rows of train_throughput.py ('' for none)")
  parser.add_argument("--pretrain", default="",
                      help="claim 1's models (names of "
                      "configs/sweeps/table1_small.py MODELS, or 'all') to "
                      "export one `paper`-preset pretraining step of")
  parser.add_argument("--pretrain-data", default="",
                      help="the `paper` dataset the models train on "
                      "(paper_data.py collect; sets their reward coding)")
  parser.add_argument("--pretrain-batch", type=int, default=16)
  args = parser.parse_args()
  sizes = [s for s in args.sizes.split(",") if s]
  kinds = [k for k in args.kinds.split(",") if k]
  agents = [a for a in args.agents.split(",") if a]
  for name, known, given in (("size", rollout_speed.FRAMES, sizes),
                             ("kind", rollout_speed.KINDS, kinds),
                             ("agent row", train_throughput.ROWS, agents)):
    unknown = sorted(set(given) - set(known))
    if unknown:
      parser.error(f"unknown {name}s {unknown}; choose from {sorted(known)}")
  try:
    envs = [int(e) for e in args.envs.split(",") if e]
    check_envs = {int(e) for e in args.check_envs.split(",") if e}
  except ValueError:
    parser.error("--envs and --check-envs take comma-separated positive "
                 f"integers; given {args.envs!r} and {args.check_envs!r}")
  if envs and min(envs) < 1:
    parser.error(f"--envs needs positive integers, given {args.envs!r}")
  claim1 = {name: (kind, jump) for name, kind, jump in table1_small.MODELS}
  pretrain = (list(claim1) if args.pretrain == "all" else
              [m for m in args.pretrain.split(",") if m])
  unknown = sorted(set(pretrain) - set(claim1))
  if unknown:
    parser.error(f"unknown --pretrain models {unknown}; choose from "
                 f"{sorted(claim1)} or 'all'")
  if pretrain and not args.pretrain_data:
    parser.error("--pretrain needs --pretrain-data DIR/dataset (a `paper` "
                 "dataset: benchmarks/paper_data.py collect)")
  os.makedirs(args.output, exist_ok=True)
  store = Store()
  programs: List[Dict[str, Any]] = []
  for name in pretrain:
    programs.append(export_pretrain(
        args.output, store, name, *claim1[name], args.pretrain_data,
        args.pretrain_batch, check=True))
  with tempfile.TemporaryDirectory() as tmpdir:
    for row in agents:
      programs += export_agent(args.output, store, row, tmpdir)
  for size in sizes:
    for kind in kinds:
      for e in envs:
        programs += export_rollouts(args.output, store, size, kind, e,
                                    e in check_envs)
  with io_utils.atomic_path(os.path.join(args.output, "captures.npz")) as tmp:
    with open(tmp, "wb") as f:
      np.savez(f, **store.arrays)
  io_utils.atomic_write_json(os.path.join(args.output, "manifest.json"), dict(
      programs=programs, rollouts=ROLLOUTS, depth=DEPTH, value_checks=False,
      branches=1, tensorflow=tf.__version__, command=" ".join(sys.argv)))
  print(f"wrote {len(programs)} programs to {args.output}")


if __name__ == "__main__":
  main()
