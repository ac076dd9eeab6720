"""Scalars of a run, to TensorBoard and to CSV files in the workdir.

`MetricsLog(workdir)` writes `metrics.csv` (train) and `eval.csv` (held-out)
in wide format, one row per logged step, `episodes.csv` (agents: one row
per finished training episode, at the step of the row that logged it,
`write_episodes`), and TensorBoard summaries under `workdir/tb`. On
resume, `truncate_after(step, summary_step)` drops what the restored
checkpoint has not seen, so curves never hold two histories and no step
twice: CSV rows after `step` (and a row torn by a kill, and repeats of a
step in the per-step logs), and TensorBoard events after `summary_step`
(default `step`), rewritten out of the event files before this run's
writer opens its own.

The CSV `step` column is always the run's own step (pretraining steps,
learner steps), the one `truncate_after` compares; a TensorBoard summary may
sit at another step (`summary_step`: the agents put theirs at environment
steps, docs/agents.md "TensorBoard"). Animations (`animation`) are
TensorBoard image summaries whose encoded image is a GIF, which
TensorBoard's image dashboard plays.
"""

from __future__ import annotations

import csv
import glob
import io
import math
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import logging
from tensorboard.plugins.image import metadata as image_metadata

from i2a import io_utils, pictures

TENSORBOARD = "tb"  # the TensorBoard directory under a workdir
EPISODES = "episodes.csv"  # an agent's training episodes, one row each


class CsvLog:
  """Rows of {column: value}; the header grows when new keys appear.

  `one_per_step`: a step has one row (a repeat is an older history, which
  `truncate_after` drops); False where a step holds many (episodes).
  """

  def __init__(self, path: str, one_per_step: bool = True):
    self.path = path
    self.one_per_step = one_per_step
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
    self.write_rows([row])

  def write_rows(self, rows: Sequence[Mapping[str, object]]) -> None:
    """Appends `rows` (the file rewritten, atomically, when they bring new
    columns)."""
    if not rows:
      return
    new = [k for row in rows for k in row if k not in self._columns]
    if new or not os.path.exists(self.path):
      old = self.rows()
      self._columns += list(dict.fromkeys(new))
      self._rewrite(old + list(rows))
      return
    with open(self.path, "a", newline="") as f:
      csv.DictWriter(f, fieldnames=self._columns, restval="").writerows(rows)

  def truncate_after(self, step: int) -> None:
    """Keeps the rows of steps <= `step` (with `one_per_step`, one per step:
    the last written) and drops a row torn by a kill (no final newline, or
    unparseable)."""
    if not os.path.exists(self.path):
      return
    with open(self.path, newline="") as f:
      text = f.read()
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith(("\n", "\r")):
      lines = lines[:-1]  # torn: the append was killed half-way
    rows = list(csv.DictReader(io.StringIO("".join(lines))))
    if self.one_per_step:
      by_step: Dict[int, Mapping[str, object]] = {}
      for row in rows:
        row_step = _row_step(row)
        if row_step is not None and row_step <= step:
          by_step.pop(row_step, None)  # re-inserted: keeps the file's order
          by_step[row_step] = row
      kept = list(by_step.values())
    else:
      kept = [row for row in rows
              if (row_step := _row_step(row)) is not None and row_step <= step]
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
    self.tb_dir = os.path.join(workdir, tensorboard)
    # Opened on first use (a new event file), after any truncate_after.
    self._writer: Optional[tf.summary.SummaryWriter] = None
    self.train = CsvLog(os.path.join(workdir, "metrics.csv"))
    self.eval = CsvLog(os.path.join(workdir, "eval.csv"))
    self.episodes = CsvLog(os.path.join(workdir, EPISODES),
                           one_per_step=False)

  @property
  def _summary(self) -> tf.summary.SummaryWriter:
    if self._writer is None:
      self._writer = tf.summary.create_file_writer(self.tb_dir)
    return self._writer

  def truncate_after(self, step: int,
                     summary_step: Optional[int] = None) -> None:
    """Drops what was logged after the restored checkpoint: CSV rows after
    `step`, TensorBoard summaries after `summary_step` (default `step`;
    the checkpoint's position on the summaries' step axis)."""
    self.train.truncate_after(step)
    self.eval.truncate_after(step)
    self.episodes.truncate_after(step)
    if self._writer is not None:  # its file must not be rewritten under it
      self._writer.close()
      self._writer = None
    summary_step = step if summary_step is None else summary_step
    dropped = truncate_events(self.tb_dir, summary_step)
    if dropped:
      logging.info("dropped %d TensorBoard summaries after step %d (logged "
                   "after the checkpoint resumed from)", dropped,
                   summary_step)

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

  def write_episodes(self, step: int, env_steps: int,
                     episodes: Sequence[Any]) -> None:
    """One `episodes.csv` row per finished episode (`episode_return`,
    `length`, `terminated`: agents.acting.Episode), at the `step` and
    `env_steps` of the metrics row that logged it."""
    self.episodes.write_rows([
        dict(step=step, env_steps=env_steps,
             episode_return=float(e.episode_return),
             episode_length=int(e.length), terminated=int(e.terminated))
        for e in episodes])

  def image(self, step: int, name: str, image: np.ndarray) -> None:
    with self._summary.as_default(step=step):
      tf.summary.image(name, np.asarray(image)[None], max_outputs=1)

  def animation(self, step: int, name: str, frames: Sequence[np.ndarray],
                duration_ms: int = 200, description: str = "") -> None:
    """An animated GIF image summary at `step` (write_animation)."""
    with self._summary.as_default(step=step):
      write_animation(name, frames, step, duration_ms, description)

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


def event_files(directory: str) -> List[str]:
  """The event files directly in `directory`, in the order they were opened.

  A name is 'events.out.tfevents.SECOND.HOST.PID.COUNTER.v2'; two files
  opened in one second by one process differ only in the counter, and in
  plain string order '...9.v2' comes after '...10.v2'. So the names are
  compared with their digit runs as numbers.
  """
  def opened(path: str) -> List[Any]:
    return [int(part) if part.isdigit() else part
            for part in re.split(r"(\d+)", os.path.basename(path))]

  paths = tf.io.gfile.glob(os.path.join(directory, "events.*"))
  return sorted((p for p in paths if not p.endswith(".tmp")), key=opened)


def read_summaries(directory: str) -> Dict[str, List[tuple]]:
  """{tag: [(step, value), ...]} of the event files directly in `directory`
  (not its subdirectories, which TensorBoard shows as runs of their own),
  in the order written. A scalar's value is a float; an image summary's is
  its string tensor as a list of bytes ([width, height, encoded image, ..]),
  with the plugin name first: ('images', [b'w', b'h', b'GIF89a...'])."""
  out: Dict[str, List[tuple]] = {}
  for path in event_files(directory):
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
