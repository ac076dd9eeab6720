"""Scalars of a run, to TensorBoard and to CSV files in the workdir.

`MetricsLog(workdir)` writes `metrics.csv` (train) and `eval.csv` (held-out)
in wide format, one row per logged step, and TensorBoard summaries under
`workdir/tb`. On resume, `truncate_after(step)` drops rows the restored
checkpoint has not seen, so curves never hold two histories.
"""

from __future__ import annotations

import csv
import math
import os
from typing import Dict, List, Mapping, Optional

import numpy as np
import tensorflow as tf

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
    rows = self.rows()
    kept = [r for r in rows if float(r.get("step") or 0) <= step]
    if len(kept) != len(rows):
      self._rewrite(kept)


def _scalar(value) -> float:
  return float(np.asarray(value))


class MetricsLog:
  """TensorBoard + metrics.csv + eval.csv for one run."""

  def __init__(self, workdir: str):
    self._summary = tf.summary.create_file_writer(os.path.join(workdir, "tb"))
    self.train = CsvLog(os.path.join(workdir, "metrics.csv"))
    self.eval = CsvLog(os.path.join(workdir, "eval.csv"))

  def truncate_after(self, step: int) -> None:
    self.train.truncate_after(step)
    self.eval.truncate_after(step)

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
    self._summary.flush()


def read_column(path: str, column: str) -> Optional[np.ndarray]:
  """One numeric column of a CSV log (None if absent)."""
  rows = CsvLog(path).rows()
  if not rows or column not in rows[0]:
    return None
  return np.array([float(r[column]) if r[column] != "" else np.nan
                   for r in rows])
