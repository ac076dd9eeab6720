"""Times exported imagination and agent programs with jaxlib's XLA, on
whatever device it finds (a GPU where there is one), without TensorFlow.

Where it sits: `export_xla.py` writes the programs (the XLA HLO that
TensorFlow lowered the models' and agents' tf.functions to) with their
captured weights, input recipes (`xla_inputs.py`) and reference
checksums; this script needs only numpy and jax, so it runs where the project's pinned stack
cannot be installed. Every program is checked first: the largest relative
difference of any output's sum from TensorFlow's on the exporting CPU
(`rel. error`; the programs are deterministic given their inputs).

Rollouts (the GPU half of `rollout_speed.py`, same rows: E environments x
K = 5 rollouts x depth 3), per kind, size and E:
  abstract / rendered transitions/s, initial state ms, with-initial /s,
  x AR per primitive step (same size, E and precision), GFLOP/s
  (TensorFlow's profiler's count) against ten chained 3x3 64->64
  convolutions on the state map at the same precision and batch.
Agents (rows of `train_throughput.py`): ms per acting step of num_envs
windows and per learner update of batch_size unrolls, and the env steps/s
they bound the training loop to: batch_size x unroll_length env steps per
update, for batch_size / num_envs x unroll_length acting steps and one
update, run one after another (emulator and transport not included).
Precisions:
  fp32  the programs as exported: float32, XLA's default precision for
        convolutions and matrix products (on NVIDIA GPUs since Ampere:
        TF32 tensor cores, as in TensorFlow's own default there)
  bf16  every float32 convolution and matrix product (dot, dot_general)
        rewritten to take bfloat16 operands and give a bfloat16 result,
        converted back to float32 (the rest stays float32): the GPU
        counterpart of the CPU's `bf16`, which also runs the elementwise
        ops between them in bfloat16
It reaches into jaxlib's internals (`_jax.mlir.hlo_to_stablehlo`, a
client's `compile_and_load`, `execute_sharded`), as measured with jax
0.11.2; another jax may need these calls adjusted.
Each program is compiled once; timing is `--calls` calls back to back,
then a wait for the last, median of `--repeats` rounds. The JSON is
rewritten after every model, so a run stopped early keeps what it
measured.

  python benchmarks/xla_speed.py --programs DIR --output FILE.json
      [--precisions fp32,bf16] [--repeats 5] [--calls 20]
      [--only SUBSTR,...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from typing import Any, Callable, Dict, List, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # xla_inputs beside this file

# pylint: disable=wrong-import-position
import numpy as np

import jax
import jax.numpy as jnp
from jax._src import compiler
from jax._src.interpreters import mlir
from jax._src.lib import _jax, xla_client
from jaxlib.mlir import ir

from xla_inputs import draw

jax.config.update("jax_enable_x64", True)  # int64 parameters stay int64

PRECISIONS = ("fp32", "bf16")
MATRIX_OPS = ("stablehlo.convolution", "stablehlo.dot",
              "stablehlo.dot_general")
FUNCTIONS = {"rollouts": ("initial", "abstract", "rendered"),
             "agents": ("act", "update")}


def operations(module: ir.Module, names: Sequence[str]) -> List[Any]:
  """Every operation named one of `names` in `module`, nested ones too."""
  found = []

  def visit(op):
    if op.name in names:
      found.append(op)
    for region in op.regions:
      for block in region.blocks:
        for inner in block.operations:
          visit(inner.operation)
  visit(module.operation)
  return found


def drop_copies(module: ir.Module) -> int:
  """Removes `mhlo.copy` ops (identities TensorFlow leaves before a
  program's results, which XLA's GPU pipeline refuses to legalize)."""
  copies = operations(module, ("mhlo.copy",))
  for op in copies:
    op.result.replace_all_uses_with(op.operands[0])
    op.erase()
  return len(copies)


def to_bf16_matrix_ops(module: ir.Module) -> int:
  """Rewrites every float32 convolution, dot and dot_general in `module`
  to bfloat16 operands and result, converted back to float32 after it.
  Returns how many it rewrote."""
  f32, bf16 = ir.F32Type.get(), ir.BF16Type.get()
  targets = [op for op in operations(module, MATRIX_OPS) if all(
      ir.RankedTensorType(v.type).element_type == f32
      for v in list(op.operands) + list(op.results))]
  for op in targets:
    with ir.InsertionPoint(op), op.location:
      operands = [ir.Operation.create(
          "stablehlo.convert", results=[ir.RankedTensorType.get(
              ir.RankedTensorType(v.type).shape, bf16)],
          operands=[v]).result for v in op.operands]
      shape = ir.RankedTensorType(op.result.type).shape
      new = ir.Operation.create(
          op.name, results=[ir.RankedTensorType.get(shape, bf16)],
          operands=operands,
          attributes={op.attributes[i].name: op.attributes[i].attr
                      for i in range(len(op.attributes))})
    with ir.InsertionPoint.after(new), op.location:
      back = ir.Operation.create(
          "stablehlo.convert", results=[ir.RankedTensorType.get(shape, f32)],
          operands=[new.result])
    op.result.replace_all_uses_with(back.result)
    op.erase()
  return len(targets)


class Program:
  """One exported HLO module, compiled for `device` at `precision`.

  A program that updates variables (a learner's update) donates their
  buffers to its outputs (the module's input_output_alias, as TensorFlow
  runs it: in place); a call puts those outputs in its argument list, so
  the next call reads the updated values, as the learner's next step does.
  """

  def __init__(self, path: str, device: Any, precision: str):
    with open(path, "rb") as f:
      stablehlo = _jax.mlir.hlo_to_stablehlo(f.read())
    with mlir.make_ir_context():
      module = ir.Module.parse(stablehlo)
      drop_copies(module)
      aliases = (str(module.operation.attributes["mhlo.input_output_alias"])
                 if "mhlo.input_output_alias" in module.operation.attributes
                 else "")
      # [(parameter number, output index)], flat (untupled) outputs
      self.aliases = [(int(p), int(o)) for p, o in re.findall(
          r"parameter_number = (\d+)[^}]*}, output_index = array<i64: (\d+)>",
          aliases)]
      if aliases.count("parameter_number") != len(self.aliases):
        raise ValueError(f"{path}: could not read its input_output_alias "
                         f"{aliases[:200]!r}")
      self.rewritten = (to_bf16_matrix_ops(module)
                        if precision == "bf16" else 0)
      module.operation.verify()
      start = time.perf_counter()
      self._executable = device.client.compile_and_load(
          module, executable_devices=xla_client.DeviceList((device,)),
          compile_options=compiler.get_compile_options(num_replicas=1,
                                                       num_partitions=1))
      self.compile_s = time.perf_counter() - start

  def __call__(self, arguments: List[jax.Array]) -> List[jax.Array]:
    results = self._executable.execute_sharded(list(arguments))
    outputs = [out[0]
               for out in results.disassemble_into_single_device_arrays()]
    for parameter, output in self.aliases:  # their buffers were donated
      arguments[parameter] = outputs[output]
    return outputs


def seconds_per_call(fn: Callable[[], Any], calls: int,
                     repeats: int) -> List[float]:
  jax.block_until_ready(fn())  # warm
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    for _ in range(calls):
      outputs = fn()
    jax.block_until_ready(outputs)
    times.append((time.perf_counter() - start) / calls)
  return times


def relative_error(outputs: Sequence[jax.Array],
                   reference: Sequence[Dict[str, Any]]) -> float:
  """Largest |sum - reference sum| / reference sum of |x| over the outputs
  the reference has (an update's program also returns the variables'
  new values after them)."""
  if len(outputs) < len(reference):
    raise ValueError(f"{len(outputs)} outputs, fewer than the reference's "
                     f"{len(reference)}")
  errors = []
  for out, ref in zip(outputs, reference):
    x = np.asarray(out, dtype=np.float64)
    if list(x.shape) != ref["shape"]:
      raise ValueError(f"output shape {list(x.shape)} differs from the "
                       f"exported reference's {ref['shape']}")
    errors.append(abs(float(x.sum()) - ref["sum"]) /
                  max(ref["abs_sum"], 1e-30))
  return max(errors)


def conv_peak(rows: int, state_shape: Sequence[int], precision: str,
              device: Any, calls: int, repeats: int) -> float:
  """GFLOP/s of ten chained 3x3 64->64 convolutions on [rows, h, w, 64]."""
  dtype = jnp.bfloat16 if precision == "bf16" else jnp.float32
  key = jax.random.PRNGKey(0)
  x = jax.device_put(jax.random.normal(
      key, (rows, state_shape[0], state_shape[1], 64)).astype(dtype), device)
  w = jax.device_put((0.05 * jax.random.normal(
      key, (3, 3, 64, 64))).astype(dtype), device)

  @jax.jit
  def chain(x):
    for _ in range(10):
      x = jax.lax.conv_general_dilated(
          x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return x
  median = float(np.median(seconds_per_call(lambda: chain(x), calls,
                                            repeats)))
  return 10 * 2 * 9 * 64 * 64 * rows * state_shape[0] * state_shape[1] / (
      median * 1e9)


def run_model(directory: str, entries: Dict[str, Dict[str, Any]],
              captures: Any, precision: str, device: Any, calls: int,
              repeats: int) -> Dict[str, Any]:
  """Compiles, checks and times one model's programs: {function: median
  seconds}, and what the row records besides."""
  first = next(iter(entries.values()))
  inputs = {name: jax.device_put(draw(recipe), device)
            for name, recipe in first["inputs"].items()}
  programs, arguments, outputs = {}, {}, {}
  for function, entry in entries.items():
    programs[function] = Program(os.path.join(directory, entry["hlo"]),
                                 device, precision)
    arguments[function] = [
        inputs[p["name"]] if p["from"] == "input" else
        outputs[p["function"]][p["index"]] if p["from"] == "output" else
        jax.device_put(draw(p["recipe"]), device) if p["from"] == "drawn"
        else jax.device_put(captures[p["key"]], device)
        for p in entry["parameters"]]
    outputs[function] = programs[function](arguments[function])
  errors = {f: relative_error(outputs[f], e["reference"])
            for f, e in entries.items() if "reference" in e}
  samples = {f: seconds_per_call(
      lambda f=f: programs[f](arguments[f]), calls, repeats)
             for f in programs}
  return dict(
      precision=precision,
      compile_s={f: p.compile_s for f, p in programs.items()},
      matrix_ops_in_bf16={f: p.rewritten for f, p in programs.items()},
      relative_error_of_sums=errors,
      samples_ms={f: [1e3 * t for t in s] for f, s in samples.items()},
      seconds={f: float(np.median(s)) for f, s in samples.items()},
      output_shapes={f: [list(np.shape(o)) for o in outs]
                     for f, outs in outputs.items()})


def rollout_row(entries: Dict[str, Dict[str, Any]],
                result: Dict[str, Any]) -> Dict[str, Any]:
  first, seconds = entries["abstract"], result.pop("seconds")
  transitions = first["transitions"]
  return dict(
      group="rollouts", size=first["size"], kind=first["kind"],
      envs=first["envs"], rows=first["rows"], jump=first["jump"],
      state_shape=result["output_shapes"]["abstract"][0][1:],
      abstract_per_s=transitions / seconds["abstract"],
      rendered_per_s=transitions / seconds["rendered"],
      with_initial_per_s=transitions / (seconds["abstract"] +
                                        seconds["initial"]),
      initial_ms=1e3 * seconds["initial"],
      gflop_per_call=first["gflop"],
      gflop_per_s=first["gflop"] / seconds["abstract"], **result)


def agent_row(entries: Dict[str, Dict[str, Any]],
              result: Dict[str, Any]) -> Dict[str, Any]:
  first, seconds = entries["act"], result.pop("seconds")
  steps_per_update = first["batch_size"] * first["unroll_length"]
  acts_per_update = steps_per_update / first["num_envs"]
  loop_s = acts_per_update * seconds["act"] + seconds["update"]
  return dict(
      group="agents", row=first["row"], num_envs=first["num_envs"],
      batch_size=first["batch_size"], unroll_length=first["unroll_length"],
      act_ms=1e3 * seconds["act"], update_ms=1e3 * seconds["update"],
      act_windows_per_s=first["num_envs"] / seconds["act"],
      loop_env_steps_per_s=steps_per_update / loop_s,
      act_gflop=first["gflop"], update_gflop=entries["update"]["gflop"],
      **result)


def add_ratios(rows: List[Dict[str, Any]]) -> None:
  rollouts = [r for r in rows if r["group"] == "rollouts"]
  for row in rollouts:
    ar = [r for r in rollouts if r["kind"] == "ar" and
          r["size"] == row["size"] and r["envs"] == row["envs"] and
          r["precision"] == row["precision"]]
    if ar:
      row["x_ar"] = row["abstract_per_s"] * row["jump"] / ar[0][
          "abstract_per_s"]
      row["x_ar_with_initial"] = (row["with_initial_per_s"] * row["jump"] /
                                  ar[0]["with_initial_per_s"])


def markdown(rows: List[Dict[str, Any]], device: str) -> str:
  error = lambda r: max(r["relative_error_of_sums"].values(),
                        default=float("nan"))
  lines = [f"Device: {device}."]
  agents = [r for r in rows if r["group"] == "agents"]
  if agents:
    lines += ["", "| agent row | precision | envs | act ms | update ms | "
              "loop env steps/s | rel. error |", "|---" * 7 + "|"]
    lines += [f"| {r['row']} | {r['precision']} | {r['num_envs']} | "
              f"{r['act_ms']:.2f} | {r['update_ms']:.2f} | "
              f"{r['loop_env_steps_per_s']:,.0f} | {error(r):.1e} |"
              for r in agents]
  rollouts = [r for r in rows if r["group"] == "rollouts"]
  if rollouts:
    lines += ["", "| size | envs | kind | precision | abstract /s | "
              "with s_t\\|t /s | rendered /s | s_t\\|t ms | x AR (prim.) | "
              "x AR with s_t\\|t | GFLOP/s | % conv peak | rel. error |",
              "|---" * 13 + "|"]
    lines += [
        f"| {r['size']} | {r['envs']} | {r['kind']} | {r['precision']} | "
        f"{r['abstract_per_s']:,.0f} | {r['with_initial_per_s']:,.0f} | "
        f"{r['rendered_per_s']:,.0f} | {r['initial_ms']:.2f} | "
        f"{r.get('x_ar', float('nan')):.1f} | "
        f"{r.get('x_ar_with_initial', float('nan')):.1f} | "
        f"{r['gflop_per_s']:,.0f} | "
        f"{100 * r['gflop_per_s'] / r['conv_peak_gflop_per_s']:.0f} | "
        f"{error(r):.1e} |" for r in rollouts]
  return "\n".join(lines)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--programs", required=True,
                      help="directory written by export_xla.py")
  parser.add_argument("--output", required=True, help="JSON file to write")
  parser.add_argument("--precisions", default="fp32,bf16")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--calls", type=int, default=20)
  parser.add_argument("--only", default="",
                      help="comma-separated substrings: time only the "
                      "models whose name contains one, in that order")
  args = parser.parse_args()
  manifest_path = os.path.join(args.programs, "manifest.json")
  if not os.path.exists(manifest_path):
    parser.error(f"no manifest.json in --programs={args.programs!r}; write "
                 "one with benchmarks/export_xla.py --output DIR")
  precisions = [p for p in args.precisions.split(",") if p]
  if not precisions or set(precisions) - set(PRECISIONS):
    parser.error(f"--precisions takes some of {PRECISIONS}, given "
                 f"{args.precisions!r}")
  if args.repeats < 1 or args.calls < 1:
    parser.error(f"--repeats and --calls must be >= 1, given "
                 f"{args.repeats} and {args.calls}")
  with open(manifest_path) as f:
    manifest = json.load(f)
  models: Dict[str, Dict[str, Dict[str, Any]]] = {}
  for entry in manifest["programs"]:
    models.setdefault(entry["model"], {})[entry["function"]] = entry
  only = [s for s in args.only.split(",") if s]
  captures = np.load(os.path.join(args.programs, "captures.npz"))
  device = jax.devices()[0]
  described = f"{device.device_kind} ({device.platform}), jax {jax.__version__}"
  print(f"timing {len(models)} models on {described}", flush=True)
  rows: List[Dict[str, Any]] = []
  peaks: Dict[Any, float] = {}
  if only:  # in the order of the first substring each model contains
    rank = {name: min((i for i, s in enumerate(only) if s in name),
                      default=None) for name in models}
    models = {name: models[name] for name in sorted(
        (n for n in models if rank[n] is not None), key=lambda n: rank[n])}
  for name, entries in models.items():
    group = next(iter(entries.values()))["group"]
    entries = {f: entries[f] for f in FUNCTIONS[group]}
    for precision in precisions:
      start = time.perf_counter()
      result = run_model(args.programs, entries, captures, precision,
                         device, args.calls, args.repeats)
      if group == "agents":
        row = agent_row(entries, result)
        summary = (f"act {row['act_ms']:.2f} ms, update "
                   f"{row['update_ms']:.2f} ms, loop "
                   f"{row['loop_env_steps_per_s']:,.0f} env steps/s")
      else:
        row = rollout_row(entries, result)
        key = (row["rows"], tuple(row["state_shape"]), precision)
        if key not in peaks:
          peaks[key] = conv_peak(row["rows"], row["state_shape"], precision,
                                 device, args.calls, args.repeats)
        row["conv_peak_gflop_per_s"] = peaks[key]
        summary = (f"{row['abstract_per_s']:,.0f} abstract/s, "
                   f"{row['rendered_per_s']:,.0f} rendered/s, initial "
                   f"{row['initial_ms']:.2f} ms")
      rows.append(row)
      add_ratios(rows)
      errors = {f: f"{e:.1e}"
                for f, e in row["relative_error_of_sums"].items()}
      print(f"{name} {precision}: {summary}, rel. errors {errors} "
            f"({time.perf_counter() - start:.0f} s)", flush=True)
      tmp = args.output + ".tmp"
      with open(tmp, "w") as f:
        json.dump(dict(rows=rows, device=described,
                       host=platform.processor() or platform.machine(),
                       exported_with=manifest.get("tensorflow"),
                       command=" ".join(sys.argv)), f, indent=1)
      os.replace(tmp, args.output)
  table = markdown(rows, described)
  print(table)
  with open(os.path.splitext(args.output)[0] + ".md", "w") as f:
    f.write(table + "\n")


if __name__ == "__main__":
  main()
