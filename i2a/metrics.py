"""Scalars of a run, to TensorBoard and to CSV files in the workdir.

`MetricsLog(workdir)` writes `metrics.csv` (train) and `eval.csv` (held-out)
in wide format, one row per logged step, and TensorBoard summaries under
`workdir/tb`. On resume, `truncate_after(step)` drops what the restored
checkpoint has not seen, so curves never hold two histories and no step
twice: CSV rows after `step` (and a row torn by a kill, and repeats of a
step), and TensorBoard events after `step`, rewritten out of the event
files before this run's writer opens its own.
"""

from __future__ import annotations

import csv
import glob
import io
import math
import os
from typing import Dict, List, Mapping, Optional

import numpy as np
import tensorflow as tf
from absl import logging

from i2a import io_utils


class CsvLog:
  """Rows of {column: value}; the header grows when new keys appear."""

  def __init__(self, path: str):
    self.path = path
    self._columns: List[str] = []
    if os.path.exists(path):
      with open(path, newline="") as f:
        reader = csv.reader(f)
        self._columns = next(reader, [])

  def rows(self) -> List[Dict[str, str]]:
    if not os.path.exists(self.path):
      return []
    with open(self.path, newline="") as f:
      return list(csv.DictReader(f))

  def _rewrite(self, rows: List[Mapping[str, object]]) -> None:
    with io_utils.atomic_path(self.path) as tmp:
      with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=self._columns, restval="")
        writer.writeheader()
        writer.writerows(rows)

  def write(self, row: Mapping[str, object]) -> None:
    new = [k for k in row if k not in self._columns]
    if new or not os.path.exists(self.path):
      rows = self.rows()
      self._columns += new
      self._rewrite(rows + [row])
      return
    with open(self.path, "a", newline="") as f:
      csv.DictWriter(f, fieldnames=self._columns, restval="").writerow(row)

  def truncate_after(self, step: int) -> None:
    """Keeps the rows of steps <= `step`, one per step (the last written),
    and drops a row torn by a kill (no final newline, or unparseable)."""
    if not os.path.exists(self.path):
      return
    with open(self.path, newline="") as f:
      text = f.read()
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith(("\n", "\r")):
      lines = lines[:-1]  # torn: the append was killed half-way
    rows = list(csv.DictReader(io.StringIO("".join(lines))))
    by_step: Dict[int, Mapping[str, object]] = {}
    for row in rows:
      row_step = _row_step(row)
      if row_step is not None and row_step <= step:
        by_step.pop(row_step, None)  # re-inserted: keeps the file's order
        by_step[row_step] = row
    kept = list(by_step.values())
    if len(kept) != len(rows) or "".join(lines) != text:
      self._rewrite(kept)


def _row_step(row: Mapping[str, Optional[str]]) -> Optional[int]:
  """A complete row's step, or None for a damaged row."""
  if None in row or any(value is None for value in row.values()):
    return None  # too many or too few fields
  try:
    value = float(row.get("step") or "")
  except ValueError:
    return None
  return int(value) if value.is_integer() else None


def truncate_events(tb_dir: str, step: int) -> int:
  """Drops TensorBoard summaries of steps > `step` from the event files in
  `tb_dir` (and a record torn by a kill); returns how many were dropped.

  Event files are TFRecord files of `Event` protos; a file that changes is
  rewritten atomically under its own name. Call it before a writer opens a
  new event file in `tb_dir` (MetricsLog does).
  """
  dropped = 0
  for path in sorted(glob.glob(os.path.join(tb_dir, "*tfevents*"))):
    if path.endswith(".tmp"):
      continue
    kept, drop, torn = [], 0, False
    try:
      for record in tf.data.TFRecordDataset(path):
        raw = record.numpy()
        event = tf.compat.v1.Event.FromString(raw)
        if event.step > step and event.WhichOneof("what") == "summary":
          drop += 1
        else:
          kept.append(raw)
    except tf.errors.DataLossError:
      torn = True  # the last record was cut short by a kill
    if drop or torn:
      with io_utils.atomic_path(path) as tmp:
        with tf.io.TFRecordWriter(tmp) as writer:
          for raw in kept:
            writer.write(raw)
      dropped += drop
  return dropped


def _scalar(value) -> float:
  return float(np.asarray(value))


class MetricsLog:
  """TensorBoard + metrics.csv + eval.csv for one run."""

  def __init__(self, workdir: str):
    self.tb_dir = os.path.join(workdir, "tb")
    # Opened on first use (a new event file), after any truncate_after.
    self._writer: Optional[tf.summary.SummaryWriter] = None
    self.train = CsvLog(os.path.join(workdir, "metrics.csv"))
    self.eval = CsvLog(os.path.join(workdir, "eval.csv"))

  @property
  def _summary(self) -> tf.summary.SummaryWriter:
    if self._writer is None:
      self._writer = tf.summary.create_file_writer(self.tb_dir)
    return self._writer

  def truncate_after(self, step: int) -> None:
    """Drops what was logged after `step` (the restored checkpoint's)."""
    self.train.truncate_after(step)
    self.eval.truncate_after(step)
    if self._writer is not None:  # its file must not be rewritten under it
      self._writer.close()
      self._writer = None
    dropped = truncate_events(self.tb_dir, step)
    if dropped:
      logging.info("dropped %d TensorBoard summaries after step %d (logged "
                   "after the checkpoint resumed from)", dropped, step)

  def write(self, step: int, metrics: Mapping[str, object],
            split: str = "train") -> Dict[str, float]:
    values = {k: _scalar(v) for k, v in metrics.items()}
    with self._summary.as_default(step=step):
      for key, value in values.items():
        if math.isfinite(value):
          tf.summary.scalar(f"{split}/{key}", value)
    (self.eval if split == "eval" else self.train).write(
        dict(step=step, **values))
    return values

  def image(self, step: int, name: str, image: np.ndarray) -> None:
    with self._summary.as_default(step=step):
      tf.summary.image(name, np.asarray(image)[None], max_outputs=1)

  def flush(self) -> None:
    if self._writer is not None:
      self._writer.flush()


def read_column(path: str, column: str) -> Optional[np.ndarray]:
  """One numeric column of a CSV log (None if absent)."""
  rows = CsvLog(path).rows()
  if not rows or column not in rows[0]:
    return None
  return np.array([float(r[column]) if r[column] != "" else np.nan
                   for r in rows])
