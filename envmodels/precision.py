"""Compute precision: reduced precision where the hardware has it.

Where it sits in the data flow: every binary that runs models
(`i2a.pretrain`, `i2a.train`, `i2a.evaluate`, `i2a.collect` with an agent,
`i2a.plan`, `i2a.launch`'s roles) calls `set_precision(config.precision)`
once at start; the choice holds for every tf.function the process runs
(pretraining steps, the actor's rollouts, the learner's update).

Precisions (config `precision`):
  'fp32'  float32 everywhere.
  'bf16'  bfloat16 compute, float32 variables: TensorFlow's oneDNN
          auto-mixed-precision graph rewrite (grappler's
          `auto_mixed_precision_onednn_bfloat16`) runs convolutions and
          matrix products, and the elementwise ops between them, in
          bfloat16 on CPUs with AMX or AVX512-BF16 (2-5x faster there);
          numerically sensitive ops (exp, log, softmax, sigmoid, softplus,
          reductions such as the loss, KL and likelihood sums: the rewrite's
          deny list plus FLOAT32_OPS) and the optimizer's updates stay in
          float32. The model code does not change: variables, inputs and
          outputs are float32.
  'fp16'  float16 compute on GPUs (grappler's `auto_mixed_precision`), the
          same rewrite for CUDA devices. Not available without a GPU.
  'auto'  'bf16' on a CPU-only machine whose CPU has AMX-BF16 or
          AVX512-BF16, else 'fp32' (also on GPUs: the fp16 path has not
          been measured against fp32 here; pass 'fp16' to use it).

The rewrite applies to graphs (tf.function), which is where the framework's
work runs; eager calls stay in float32. The setting is process-wide and can
be changed at any time (functions already traced are rewritten at their
next execution), so `scope` can compare precisions in one process.
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Iterator

import tensorflow as tf

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
# Ops the rewrite keeps in float32 beyond its own deny list (Exp, Log, Sum,
# Mean, Softmax, ...): the probabilities and scales whose products the
# models sum into rewards and likelihoods. Without them a reward decoded
# from its bit probabilities (sum of p_i 2^i) carries bfloat16's 2^-8
# relative error: +-6 points on a MsPacman reward of 1,600.
FLOAT32_OPS = ("Sigmoid", "Softplus", "Log1p", "Tanh", "Sqrt", "Rsqrt")
_LIST_ENV = "TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_{}"
# An op may sit in one list only: taken out of the others, added to deny.
_LIST_EDITS = ("DENYLIST_ADD", "INFERLIST_REMOVE", "CLEARLIST_REMOVE",
               "ALLOWLIST_REMOVE")
_REWRITES = {"bf16": "auto_mixed_precision_onednn_bfloat16",
             "fp16": "auto_mixed_precision"}


@functools.lru_cache(maxsize=None)
def cpu_flags() -> frozenset:
  """The CPU's feature flags (avx512_bf16, amx_bf16, ...) from /proc/cpuinfo;
  empty where that does not exist."""
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("flags"):
          return frozenset(line.split(":", 1)[1].split())
  except OSError:
    pass
  return frozenset()


def cpu_has_bf16() -> bool:
  """Whether this CPU computes bfloat16 natively (AMX-BF16 or AVX512-BF16;
  read from /proc/cpuinfo, so False where that does not exist)."""
  return bool(cpu_flags() & {"amx_bf16", "avx512_bf16"})


def _has_gpu() -> bool:
  return bool(tf.config.list_physical_devices("GPU"))


def check(precision: str) -> str:
  if precision not in PRECISIONS:
    raise ValueError(f"precision must be one of {PRECISIONS}, given "
                     f"{precision!r}.")
  return precision


def resolve(precision: str) -> str:
  """The precision `precision` means on this machine ('auto' resolved);
  ValueError for one the machine cannot run."""
  check(precision)
  gpu = _has_gpu()
  if precision == "auto":
    return "bf16" if (cpu_has_bf16() and not gpu) else "fp32"
  if precision == "fp16" and not gpu:
    raise ValueError("precision='fp16' is the GPU mixed-precision path, and "
                     "this machine has no GPU; use 'auto', 'bf16' or 'fp32'.")
  if precision == "bf16" and gpu:
    raise ValueError("precision='bf16' is the CPU (oneDNN) rewrite; on a GPU "
                     "use 'fp16' or 'fp32'.")
  return precision


def current() -> str:
  """The precision tf.functions run in now ('fp32', 'bf16' or 'fp16')."""
  options = tf.config.optimizer.get_experimental_options()
  for name, option in _REWRITES.items():
    if options.get(option):
      return name
  return "fp32"


def set_precision(precision: str) -> str:
  """Makes every tf.function of this process compute in `precision`
  (resolved); returns the resolved precision."""
  resolved = resolve(precision)
  if resolved != "fp32":  # read by the rewrite each time it runs
    for edit in _LIST_EDITS:
      name = _LIST_ENV.format(edit)
      listed = [op for op in os.environ.get(name, "").split(",") if op]
      os.environ[name] = ",".join(
          listed + [op for op in FLOAT32_OPS if op not in listed])
  tf.config.optimizer.set_experimental_options(
      {option: name == resolved for name, option in _REWRITES.items()})
  return resolved


@contextlib.contextmanager
def scope(precision: str) -> Iterator[str]:
  """Computes in `precision` inside the block, then restores the previous."""
  previous = current()
  try:
    yield set_precision(precision)
  finally:
    set_precision(previous)
