"""Speed of the keyed normals alone, against the previous implementation.

Where it sits: envmodels/noise.py's `normal` is what a stochastic model
(sSSM, dSSM-VAE) draws its latents with under noise keys; at the paper's
size a step draws [80 rows, 25, 20, 32] of them. This times that one draw
for each way of making it, round-robin (median of `--rounds`, ms):
  table          envmodels/noise.py's `normal` (one hash per element into
                 a tabulated piecewise-linear inverse normal CDF)
  ndtri          the previous implementation: XLA's `ndtri` of a 24-bit
                 hashed uniform (benchmarks/rollout_speed.py's variant)
  philox         TensorFlow's stateless normals (one seed for the whole
                 tensor, so not keyed per row: unusable, a reference)
  uniform        envmodels/noise.py's 24-bit uniforms (the hash alone)
Ideas measured and dropped (each keyed per row like `table`, XLA-fused):
  giles          Giles' single-precision erfinv polynomial of a 24-bit
                 uniform (one log, two polynomials, a sqrt)
  pair_ndtri     one hash for two 16-bit uniforms, `ndtri` of each
                 (interleaved: element j from hash j // 2)
  box_muller     one hash for two 16-bit uniforms, Box-Muller's two
                 normals (a log, a sqrt, a sin and a cos per pair)

  python benchmarks/noise_speed.py [--rounds 15] [--rows 80]
      [--shape 25,20,32] [--threads auto] [--output FILE]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from typing import Callable, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root
sys.path.insert(0, HERE)  # rollout_speed, for the previous implementation

# pylint: disable=wrong-import-position
import numpy as np
import tensorflow as tf

from envmodels import noise, precision
from i2a import io_utils
import rollout_speed

RESULTS = os.path.join(HERE, "results")


_u32 = noise._u32  # pylint: disable=protected-access


def _giles_erfinv(x: tf.Tensor) -> tf.Tensor:
  """Giles (2010), single precision: erfinv(x) for x in (-1, 1)."""
  w = -tf.math.log((1.0 - x) * (1.0 + x))
  central, tail = w - 2.5, tf.sqrt(w) - 3.0
  p, q = 2.81022636e-08, -0.000200214257
  for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
            -0.00125372503, -0.00417768164, 0.246640727, 1.50140941):
    p = c + p * central
  for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
            -0.0076224613, 0.00943887047, 1.00167406, 2.83297682):
    q = c + q * tail
  return tf.where(w < 5.0, p, q) * x


def _pairs(keys: tf.Tensor, size: int) -> List[tf.Tensor]:
  """Two 16-bit uniforms [N, ceil(size / 2)] from one hash each."""
  bits = tf.reshape(noise._bits(keys, [(size + 1) // 2], 0),  # pylint: disable=protected-access
                    [-1, (size + 1) // 2])
  high = tf.bitwise.right_shift(bits, _u32(16))
  low = tf.bitwise.bitwise_and(bits, _u32(0xFFFF))
  return [(tf.cast(half, tf.float32) + 0.5) * (1.0 / 65536)
          for half in (high, low)]


def _interleave(first: tf.Tensor, second: tf.Tensor, rows: int,
                shape: List[int]) -> tf.Tensor:
  size = int(np.prod(shape))
  both = tf.reshape(tf.stack([first, second], -1), [rows, -1])
  return tf.reshape(both[:, :size], [rows, *shape])


def draws(rows: int, shape: List[int]) -> Dict[str, Callable[[], tf.Tensor]]:
  keys = noise.as_keys(tf.constant(np.random.RandomState(0).randint(
      -2**31, 2**31 - 1, (rows, 2)), tf.int32))  # uint32 [rows, 2]
  philox = tf.function(lambda keys: tf.random.stateless_normal(
      [rows, *shape], seed=tf.bitcast(keys[0], tf.int32)))
  uniform = tf.function(jit_compile=True)(
      lambda keys: noise.uniform(keys, shape))
  size = int(np.prod(shape))
  xla = tf.function(jit_compile=True)
  giles = xla(lambda keys: np.sqrt(2.0).astype(np.float32) * _giles_erfinv(
      2.0 * noise.uniform(keys, shape) - 1.0))
  pair_ndtri = xla(lambda keys: _interleave(
      *[tf.math.ndtri(u) for u in _pairs(keys, size)], rows, shape))

  def box_muller(keys):
    first, second = _pairs(keys, size)
    radius = tf.sqrt(-2.0 * tf.math.log(first))
    angle = (2.0 * np.pi) * second
    return _interleave(radius * tf.cos(angle), radius * tf.sin(angle), rows,
                       shape)
  box_muller = xla(box_muller)
  return {
      "table": lambda: noise.normal(keys, shape),
      "ndtri": lambda: rollout_speed.ndtri_normal(keys, shape),
      "philox": lambda: philox(keys),
      "uniform": lambda: uniform(keys),
      "giles": lambda: giles(keys),
      "pair_ndtri": lambda: pair_ndtri(keys),
      "box_muller": lambda: box_muller(keys),
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rounds", type=int, default=15)
  parser.add_argument("--calls", type=int, default=5,
                      help="draws per timing")
  parser.add_argument("--rows", type=int, default=80)
  parser.add_argument("--shape", default="25,20,32",
                      help="the per-row shape, comma-separated")
  parser.add_argument("--threads", default=precision.THREADS_AUTO)
  parser.add_argument("--output",
                      default=os.path.join(RESULTS, "noise_speed.json"))
  args = parser.parse_args()
  threads = precision.set_threads(args.threads)  # before any TF op
  try:
    shape = [int(d) for d in args.shape.split(",")]
  except ValueError:
    parser.error(f"--shape: expected comma-separated integers such as "
                 f"25,20,32, given {args.shape!r}")
  fns = draws(args.rows, shape)
  for fn in fns.values():  # trace and compile
    fn().numpy()
  times: Dict[str, List[float]] = {name: [] for name in fns}
  for _ in range(args.rounds):
    for name, fn in fns.items():
      start = time.perf_counter()
      for _ in range(args.calls):
        out = fn()
      out.numpy()
      times[name].append((time.perf_counter() - start) / args.calls * 1e3)
  median = {name: float(np.median(t)) for name, t in times.items()}
  lines = ["| draw | ms | x ndtri |", "|---|---|---|"]
  lines += [f"| {name} | {ms:.2f} | {median['ndtri'] / ms:.2f} |"
            for name, ms in median.items()]
  lines.append(f"\n{args.rows} rows x {shape} normals per draw, median of "
               f"{args.rounds} rounds timed round-robin.")
  table = "\n".join(lines)
  print(table)
  io_utils.atomic_write_json(args.output, dict(
      median_ms=median, rows=args.rows, shape=shape, rounds=args.rounds,
      threads=threads, load_average=os.getloadavg(),
      machine=platform.processor() or platform.machine(),
      tensorflow=tf.__version__, command=" ".join(sys.argv)))
  io_utils.atomic_write_text(os.path.splitext(args.output)[0] + ".md",
                             table + "\n")


if __name__ == "__main__":
  main()
