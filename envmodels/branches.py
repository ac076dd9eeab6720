"""Row branches: batch-wise work split into independent chains of ops.

Where it sits in the data flow: the actor's fused act of a learned
model's I2A (agents/imagination/networks.py) runs as `branches()`
independent chains over contiguous slices of its B windows, each chain
all of the act (initial state, K rollouts, rollout encoder, heads); the
imagination core (agents/imagination/imagination.py), wherever else it
runs its K rollouts of depth tau (the learner's recomputed rollouts, the
benchmarks), splits its B * K rows alike (`split_rows`); outputs are
concatenated after. Each row's arithmetic is the same (rows are
independent, and a stochastic model's noise is keyed per row), so the
outputs are too; the ops of one chain never wait on another's.

Why: with one thread per op (config `threads`, `auto` on small machines
with AVX-512, envmodels/precision.py) a rollout is a chain of
convolutions, each on one thread, and a 2-core machine's second core
idles; the inter-op pool runs ops of independent chains side by side. So
the rows are split into as many chains as the inter-op pool has threads
when every op runs on one thread (intra-op 1), and not at all where the
ops already split their work over threads. A training step gains nothing
from it (its backward pass already has independent ops to run side by
side: measured, not adopted). Measured in docs/performance.md ("Row
branches").

Only where it pays: a branch's ops must be large enough for the second
chain to gain more than it costs. The automatic number is reduced (to
one chain, if need be) so that each branch imagines at least
`MIN_BRANCH_WORK` frame elements: rows x H x W x C of the model's frames,
the measure of a row's work that every model kind shares. At 2^19,
MsPacman's acting splits (16 windows x K = 5 rows of 104x80x3 frames:
2.0M) while one window's act (5 rows; 0.5M even at 200x160) and
MiniPacman's (16 x 5 rows of 16x24x3: 92k), which the branches slowed,
run as one chain (docs/performance.md, "Row branches").

The environment variable I2A_ROW_BRANCHES (a positive integer) sets the
number for a process (1: one chain, as before the branches); `scope(n)`
for what is traced inside it (benchmarks' side-by-side runs, tests).
Either is taken as given, whatever the work. The value is read when a
function is traced, and recorded in each workdir's precision.json
(`row_branches`: the number before the work's reduction).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterator, List, Optional, Sequence

import tensorflow as tf

ENV = "I2A_ROW_BRANCHES"
MIN_BRANCH_WORK = 1 << 19  # frame elements a branch imagines, at least
_OVERRIDE: List[int] = []


def branches() -> int:
  """How many independent chains batch-wise work is split into: `scope`'s
  number, else I2A_ROW_BRANCHES, else the inter-op threads when each op
  runs on one thread, else 1."""
  if _OVERRIDE:
    return _OVERRIDE[-1]
  value = os.environ.get(ENV, "").strip()
  if value:
    if not value.isdigit() or int(value) < 1:
      raise ValueError(f"{ENV} must be a positive integer (the row "
                       f"branches; 1 for one chain), given {value!r}: fix "
                       "or unset it.")
    return int(value)
  intra = tf.config.threading.get_intra_op_parallelism_threads()
  inter = tf.config.threading.get_inter_op_parallelism_threads()
  return inter if intra == 1 and inter > 1 else 1


@contextlib.contextmanager
def scope(n: int) -> Iterator[int]:
  """Within it, `branches()` is `n` (>= 1): for functions traced inside."""
  if isinstance(n, bool) or not isinstance(n, int) or n < 1:
    raise ValueError(f"branches must be a positive integer, given {n!r}.")
  _OVERRIDE.append(n)
  try:
    yield n
  finally:
    _OVERRIDE.pop()


def parse_counts(spec: str) -> List[int]:
  """'1,auto' -> [1, branches()]: the numbers of branches a benchmark
  compares (distinct, in order); ValueError for anything else."""
  counts: List[int] = []
  for part in (p.strip() for p in spec.split(",") if p.strip()):
    if part == "auto":
      counts.append(branches())
    elif part.isdigit() and int(part) >= 1:
      counts.append(int(part))
    else:
      raise ValueError(f"branches are positive integers or 'auto', comma-"
                       f"separated (e.g. '1,auto'), given {spec!r}.")
  if not counts:
    raise ValueError(f"no branches given in {spec!r}; e.g. '1,auto'.")
  return list(dict.fromkeys(counts))


def given() -> bool:
  """Whether the number of branches is set (a `scope`, I2A_ROW_BRANCHES)
  rather than inferred from the thread pools."""
  return bool(_OVERRIDE) or bool(os.environ.get(ENV, "").strip())


def row_sizes(rows: Any, n: Optional[int] = None,
              row_work: Optional[int] = None) -> Optional[List[int]]:
  """The branches' row counts for `rows` rows (a Python int), the first
  ones one larger where they do not divide; None where there is nothing
  to split (one branch, fewer than 2 rows, or a row count unknown at trace
  time: None or a tensor). row_work: the frame elements one row imagines;
  where given and the number is the inferred one (neither `n` nor
  `given()`), branches are dropped until each has MIN_BRANCH_WORK."""
  inferred = n is None and not given()
  n = branches() if n is None else n
  if isinstance(rows, bool) or not isinstance(rows, int) or n < 2 or \
      rows < 2:
    return None
  if inferred and row_work is not None:
    n = min(n, rows * int(row_work) // MIN_BRANCH_WORK)
    if n < 2:
      return None
  n = min(n, rows)
  return [rows // n + (1 if i < rows % n else 0) for i in range(n)]


def split_rows(fn: Callable[..., Any], inputs: Sequence[Any], rows: Any,
               n: Optional[int] = None, row_work: Optional[int] = None
               ) -> Any:
  """fn(*inputs) as `branches()` (or `n`) calls on contiguous slices of
  the rows (fewer where `row_work` says they do not pay: `row_sizes`).

  inputs: nests whose tensors (and None) all have `rows` on their leading
  axis; each call gets its slices and the number of its rows as keyword
  `rows`. The outputs' nests (same structure each call) are concatenated
  back along the leading axis. With one branch, or `rows` not a Python int
  (a scalar tensor where the count is unknown at trace time), fn(*inputs,
  rows=rows) is called once.
  """
  sizes = row_sizes(rows, n, row_work)
  if sizes is None:
    return fn(*inputs, rows=rows)

  # Each tensor split once: pieces[j][i] is branch i's slice of leaf j.
  leaves = tf.nest.flatten(list(inputs))
  pieces = [[None] * len(sizes) if x is None else tf.split(x, sizes, axis=0)
            for x in leaves]
  outputs = []
  for i, size in enumerate(sizes):
    sliced = tf.nest.pack_sequence_as(list(inputs),
                                      [p[i] for p in pieces])
    with tf.name_scope(f"branch{i}"), scope(1):  # branches do not nest
      outputs.append(fn(*sliced, rows=size))
  return tf.nest.map_structure(
      lambda *parts: None if parts[0] is None else tf.concat(parts, 0),
      *outputs)

