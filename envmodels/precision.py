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
          The environment variable I2A_AUTO_PRECISION (AUTO_ENV), where
          set, pins what 'auto' means in this process and the processes
          it starts: `I2A_AUTO_PRECISION=fp32 python -m i2a.sweep ...`
          keeps a sweep whose earlier runs computed in float32 in float32
          on a machine with bf16 too, without changing any run's config
          (and so its fingerprint). precision.json records the pin.

Weight copies (`WeightCopies`): under 'bf16' the rewrite casts each float32
weight at every call of a graph; where the weights change rarely (an
actor's between pulls, an evaluated or frozen network's never), graphs can
read bfloat16 copies made once per change instead (agents/acting.py,
i2a/run/evaluate.py), with the same values.

The rewrite applies to graphs (tf.function), which is where the framework's
work runs; eager calls stay in float32. The setting is process-wide and can
be changed at any time (functions already traced are rewritten at their
next execution), so `scope` can compare precisions in one process.

Thread pools (config `threads`, `set_threads`), set in the same start-up
call: TensorFlow's intra-op pool (the threads one op, e.g. a convolution,
splits its work over) and inter-op pool (independent ops run at once).
  'auto'     on up to SMALL_MACHINE_CORES physical cores (those this
             process may run on) of a CPU with AVX-512: intra = 1, inter =
             the physical cores: each op on one thread, independent ops
             side by side. The framework's ops are small (MiniPacman, and
             even the paper size's convolutions at 16 windows): there,
             split over 2 threads, they wait on each other longer than
             they gain: on 2 such cores (1, 2) trained the MiniPacman I2A
             1.5x as fast as (2, 2) and was level (within noise) or
             faster in every other measurement. On 2 cores with AVX2 only
             (slower kernels, fp32) (2, 2) was level or up to 1.9x faster
             (docs/performance.md, "Thread pools"). Elsewhere: intra = the
             physical cores, inter = 2 (TensorFlow's shape of pools, one
             thread per core).
  'default'  TensorFlow's own choice (both pools sized to the logical
             CPUs), as before this setting existed.
  'I,J'      intra = I, inter = J threads (positive integers).
Pools can only be sized before TensorFlow runs its first op, so the
binaries set them first thing; what was used goes into the workdir's
precision.json (`threads_record`).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import threading
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple

import sonnet as snt
import tensorflow as tf

from envmodels import branches

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
# Where set (non-empty), what 'auto' resolves to: 'fp32', 'bf16' or 'fp16'.
AUTO_ENV = "I2A_AUTO_PRECISION"


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
  if precision == "auto":
    pinned = auto_pin()
    if pinned:
      return resolve(pinned)
    return "bf16" if (cpu_has_bf16() and not _has_gpu()) else "fp32"
  gpu = _has_gpu()
  if precision == "fp16" and not gpu:
    raise ValueError("precision='fp16' is the GPU mixed-precision path, and "
                     "this machine has no GPU; use 'auto', 'bf16' or 'fp32'.")
  if precision == "bf16" and gpu:
    raise ValueError("precision='bf16' is the CPU (oneDNN) rewrite; on a GPU "
                     "use 'fp16' or 'fp32'.")
  return precision


def auto_pin() -> str:
  """The precision AUTO_ENV pins 'auto' to ('' where unset); ValueError
  for a value that is not a precision."""
  pinned = os.environ.get(AUTO_ENV, "")
  if pinned and pinned not in PRECISIONS[1:]:
    raise ValueError(
        f"{AUTO_ENV}={pinned!r}: expected one of {PRECISIONS[1:]} (what "
        "precision='auto' means in this process), or unset it for the "
        "machine's own choice.")
  return pinned


# What the last set_precision set (None: not called; then read off
# TensorFlow's options, a 30 us call that acting calls ask every step).
_current: Optional[str] = None


def current() -> str:
  """The precision tf.functions run in now ('fp32', 'bf16' or 'fp16'), as
  set_precision (or `scope`) last set it."""
  if _current is not None:
    return _current
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
  global _current
  _current = resolved
  return resolved


@contextlib.contextmanager
def scope(precision: str) -> Iterator[str]:
  """Computes in `precision` inside the block, then restores the previous."""
  previous = current()
  try:
    yield set_precision(precision)
  finally:
    set_precision(previous)


_READING_LOCK = threading.RLock()
_COPIES_KEYS = itertools.count()


class WeightCopies:
  """bfloat16 copies of float32 weights, read by graphs instead of casting.

  Under 'bf16' the rewrite casts every float32 weight a bfloat16 op reads,
  at every call of the graph: an actor's step recasts the same weights
  each of the n steps of an unroll (14.5% of the MsPacman act's kernel
  time: docs/performance.md, "The act's weights in bfloat16"). Graphs
  traced inside `reading()` read each weight here as a cast of its
  bfloat16 copy (a getter on the modules' attribute reads), a
  pair of casts the rewrite folds into the copy itself; the values are
  the rewrite's own (both round to nearest even). The copies are made
  from the weights' values at construction and again at each `refresh`:
  whoever changes the weights refreshes them (agents/acting.py, after
  each pull of the learner's weights).

  Weights are float32 variables of rank >= 2 (matrices and kernels: the
  casts that cost; biases and scales stay as they are).
  """

  def __init__(self, variables: Sequence[tf.Variable],
               refreshed: Optional[Sequence[tf.Variable]] = None):
    """variables: all the weights graphs may read (each copied once, now);
    refreshed: those `refresh` copies again (default: all), e.g. the
    learnable weights of a network whose frozen envmodel never changes."""
    weights = [v for v in variables
               if v.dtype == tf.float32 and v.shape.rank >= 2]
    self._copies: Dict[Any, tf.Variable] = {
        v.ref(): tf.Variable(tf.cast(v, tf.bfloat16), trainable=False,
                             name="bf16_copy") for v in weights}
    refreshed = weights if refreshed is None else [
        v for v in refreshed if v.ref() in self._copies]
    pairs = [(v, self._copies[v.ref()]) for v in refreshed]

    def refresh() -> None:
      for variable, copy in pairs:
        copy.assign(tf.cast(variable, tf.bfloat16))
    self._refresh = tf.function(refresh)
    self.refreshes = 0
    # Names these copies in trace caches (agents/compiled.py): unlike an
    # id(), never reused by later copies.
    self.key = ("bf16 weight copies", next(_COPIES_KEYS))

  def __len__(self) -> int:
    return len(self._copies)

  def refresh(self) -> None:
    """Copies the `refreshed` weights' current values (one tf.function)."""
    self._refresh()
    self.refreshes += 1

  @contextlib.contextmanager
  def reading(self) -> Iterator[None]:
    """Graphs traced in this block read the copies (trace time only).

    Sonnet's `custom_variable_getter` does this for every attribute of
    every module (through dm-tree, which warns on sets); this getter
    looks at variable attributes only, the way modules hold weights. The
    patch is the class's, so traces inside it are serialised (a lock):
    two threads' patches never interleave."""
    with _READING_LOCK:
      original = snt.Module.__getattribute__
      copies = self._copies

      def read(module: snt.Module, name: str) -> Any:
        value = original(module, name)
        if isinstance(value, tf.Variable):
          copy = copies.get(value.ref())
          if copy is not None:
            return tf.cast(copy, tf.float32)
        return value
      snt.Module.__getattribute__ = read
      try:
        yield
      finally:
        snt.Module.__getattribute__ = original


THREADS_AUTO, THREADS_DEFAULT = "auto", "default"
# 'auto' runs every op on one thread up to this many physical cores, on
# CPUs with AVX-512: the rule measured on 2 cores of such a CPU; on 2 cores
# of one with AVX2 only, two threads per op won (docs/performance.md,
# "Thread pools"); 4 extrapolates.
SMALL_MACHINE_CORES = 4
ONE_THREAD_PER_OP_FLAG = "avx512f"


@functools.lru_cache(maxsize=None)
def physical_cores() -> int:
  """The physical cores this process may run on: distinct (package, core)
  pairs of /proc/cpuinfo among the CPUs of its affinity mask (the logical
  CPUs of the mask where /proc/cpuinfo does not say)."""
  allowed = (os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity")
             else set(range(os.cpu_count() or 1)))
  cores, cpu, package = set(), None, "0"
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "processor":
          cpu, package = int(value), "0"
        elif key == "physical id":
          package = value
        elif key == "core id" and cpu in allowed:
          cores.add((package, value))
  except (OSError, ValueError):
    cores = set()
  return len(cores) or len(allowed) or 1


def resolve_threads(threads: str) -> Tuple[int, int]:
  """(intra, inter) for config `threads` ('auto', 'default' or 'I,J'); 0
  means TensorFlow's own choice. ValueError for anything else."""
  if threads == THREADS_AUTO:
    cores = physical_cores()
    if cores <= SMALL_MACHINE_CORES and ONE_THREAD_PER_OP_FLAG in cpu_flags():
      return 1, cores
    return cores, 2
  if threads == THREADS_DEFAULT:
    return 0, 0
  parts = str(threads).split(",")
  try:
    intra, inter = (int(part) for part in parts)
    if intra < 1 or inter < 1:
      raise ValueError
  except ValueError:
    raise ValueError(
        f"threads must be 'auto', 'default' or 'INTRA,INTER' (two positive "
        f"integers, e.g. '{physical_cores()},2'), given {threads!r}."
    ) from None
  return intra, inter


def set_threads(threads: str = THREADS_AUTO) -> Dict[str, Any]:
  """Sizes TensorFlow's intra- and inter-op thread pools as `threads` says
  (`resolve_threads`); returns `threads_record(threads)`, what the process
  runs with. Pools are fixed at TensorFlow's first op: call this at the
  start of the process. Where TensorFlow already runs with other pools,
  'auto' and 'default' keep them (with a warning: e.g. several runs in one
  test process), and explicit 'I,J' is refused (ValueError)."""
  intra, inter = resolve_threads(threads)
  try:
    tf.config.threading.set_intra_op_parallelism_threads(intra)
    tf.config.threading.set_inter_op_parallelism_threads(inter)
  except RuntimeError as e:
    if threads in (THREADS_AUTO, THREADS_DEFAULT):
      logging.warning(
          "threads=%r: TensorFlow has already started with its pools "
          "sized (intra=%d, inter=%d; 0: its default); keeping them.",
          threads, tf.config.threading.get_intra_op_parallelism_threads(),
          tf.config.threading.get_inter_op_parallelism_threads())
      return threads_record(threads)
    raise ValueError(
        f"threads={threads!r} asks for intra={intra}, inter={inter} "
        "threads, but TensorFlow has already started with intra="
        f"{tf.config.threading.get_intra_op_parallelism_threads()}, inter="
        f"{tf.config.threading.get_inter_op_parallelism_threads()} (0: its "
        "default): set the threads before running any TensorFlow op, or "
        "pass threads='default'.") from e
  return threads_record(threads)


def threads_record(requested: str = "") -> Dict[str, Any]:
  """What the process's pools are, for a workdir's precision.json: 0 is
  TensorFlow's default (pools of `logical_cpus` threads)."""
  record = dict(
      intra_op_threads=tf.config.threading.get_intra_op_parallelism_threads(),
      inter_op_threads=tf.config.threading.get_inter_op_parallelism_threads(),
      row_branches=branches.branches(),
      physical_cores=physical_cores(),
      logical_cpus=(len(os.sched_getaffinity(0))
                    if hasattr(os, "sched_getaffinity") else os.cpu_count()))
  if requested:
    record["threads"] = requested
  return record
