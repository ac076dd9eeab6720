"""Scalars of a run, to TensorBoard and to CSV files in the workdir.

`MetricsLog(workdir)` writes `metrics.csv` (train) and `eval.csv` (held-out)
in wide format, one row per logged step, and TensorBoard summaries under
`workdir/tb`. On resume, `truncate_after(step)` drops rows the restored
checkpoint has not seen, so curves never hold two histories.

The CSV `step` column is always the run's own step (pretraining steps,
learner steps), the one `truncate_after` compares; a TensorBoard summary may
sit at another step (`summary_step`: the agents put theirs at environment
steps, docs/agents.md "TensorBoard"). Animations (`animation`) are
TensorBoard image summaries whose encoded image is a GIF, which
TensorBoard's image dashboard plays.
"""

from __future__ import annotations

import csv
import math
import os
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
from tensorboard.plugins.image import metadata as image_metadata

from i2a import io_utils, pictures

TENSORBOARD = "tb"  # the TensorBoard directory under a workdir


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


def write_animation(name: str, frames: Sequence[np.ndarray], step: int,
                    duration_ms: int = 200, description: str = "") -> None:
  """An animated GIF image summary in the default summary writer.

  TensorBoard's image plugin reads a string tensor [width, height,
  encoded image]; an encoded GIF is shown (and played) as it is.
  """
  data = pictures.gif_bytes(frames, duration_ms)
  height, width = np.asarray(frames[0]).shape[:2]
  tensor = tf.constant([str(width).encode(), str(height).encode(), data],
                       dtype=tf.string)  # [3]
  tf.summary.write(
      tag=name, tensor=tensor, step=step,
      metadata=image_metadata.create_summary_metadata(
          display_name=name, description=description))


class MetricsLog:
  """TensorBoard + metrics.csv + eval.csv for one run.

  `tensorboard`: the summary directory under `workdir` ('tb'; `python -m
  i2a.evaluate` writes its own, 'tb/evaluate', a second TensorBoard run).
  """

  def __init__(self, workdir: str, tensorboard: str = TENSORBOARD):
    self._summary = tf.summary.create_file_writer(
        os.path.join(workdir, tensorboard))
    self.train = CsvLog(os.path.join(workdir, "metrics.csv"))
    self.eval = CsvLog(os.path.join(workdir, "eval.csv"))

  def truncate_after(self, step: int) -> None:
    self.train.truncate_after(step)
    self.eval.truncate_after(step)

  def write(self, step: int, metrics: Mapping[str, object],
            split: str = "train", summary_step: Optional[int] = None,
            csv: bool = True) -> Dict[str, float]:
    """One row: CSV at `step`, TensorBoard `split/key` scalars at
    `summary_step` (default `step`; where it differs, `split/step` holds
    `step`). `csv=False` writes TensorBoard only."""
    values = {k: _scalar(v) for k, v in metrics.items()}
    scalars = dict(values)
    if summary_step is not None and summary_step != step:
      scalars.setdefault("step", float(step))
    with self._summary.as_default(
        step=step if summary_step is None else summary_step):
      for key, value in scalars.items():
        if math.isfinite(value):
          tf.summary.scalar(f"{split}/{key}", value)
    if csv:
      (self.eval if split == "eval" else self.train).write(
          dict(step=step, **values))
    return values

  def image(self, step: int, name: str, image: np.ndarray) -> None:
    with self._summary.as_default(step=step):
      tf.summary.image(name, np.asarray(image)[None], max_outputs=1)

  def animation(self, step: int, name: str, frames: Sequence[np.ndarray],
                duration_ms: int = 200, description: str = "") -> None:
    """An animated GIF image summary at `step` (write_animation)."""
    with self._summary.as_default(step=step):
      write_animation(name, frames, step, duration_ms, description)

  def flush(self) -> None:
    self._summary.flush()


def read_column(path: str, column: str) -> Optional[np.ndarray]:
  """One numeric column of a CSV log (None if absent)."""
  rows = CsvLog(path).rows()
  if not rows or column not in rows[0]:
    return None
  return np.array([float(r[column]) if r[column] != "" else np.nan
                   for r in rows])


def read_summaries(directory: str) -> Dict[str, List[tuple]]:
  """{tag: [(step, value), ...]} of the event files directly in `directory`
  (not its subdirectories, which TensorBoard shows as runs of their own),
  in the order written. A scalar's value is a float; an image summary's is
  its string tensor as a list of bytes ([width, height, encoded image, ..]),
  with the plugin name first: ('images', [b'w', b'h', b'GIF89a...'])."""
  out: Dict[str, List[tuple]] = {}
  for path in sorted(tf.io.gfile.glob(os.path.join(directory, "events.*"))):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        array = tf.make_ndarray(value.tensor)
        plugin = value.metadata.plugin_data.plugin_name
        if array.dtype == object:
          item = (plugin, [bytes(b) for b in array.ravel()])
        else:
          item = float(array)
        out.setdefault(value.tag, []).append((event.step, item))
  return out
