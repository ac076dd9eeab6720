"""i2a.metrics on resume: what was logged after the restored step, and what a
kill tore, is dropped from the CSV logs and the TensorBoard event files."""

import os

import tensorflow as tf

from i2a import metrics


def test_csv_truncation_drops_later_steps_repeats_and_a_torn_row(tmp_path):
  path = tmp_path / "metrics.csv"
  # Step 4 twice (an older history), then an append killed half-way.
  path.write_text("step,loss\n2,1.0\n4,0.9\n4,0.8\n6,0.7\n8,0.")
  log = metrics.CsvLog(str(path))
  log.truncate_after(6)
  assert path.read_text() == "step,loss\n2,1.0\n4,0.8\n6,0.7\n"
  log.write({"step": 8, "loss": 0.6})
  assert metrics.read_column(str(path), "step").tolist() == [2, 4, 6, 8]


def test_a_log_of_many_rows_per_step_keeps_them_all_on_truncation(tmp_path):
  path = tmp_path / "episodes.csv"
  log = metrics.CsvLog(str(path), one_per_step=False)
  log.write_rows([{"step": 2, "episode_return": 1.0},
                  {"step": 2, "episode_return": 3.0}])
  log.write_rows([])  # nothing to write: the file is left as it was
  log.write_rows([{"step": 4, "episode_return": 2.0, "terminated": 1}])
  assert path.read_text() == ("step,episode_return,terminated\n2,1.0,\n"
                              "2,3.0,\n4,2.0,1\n")
  with open(path, "a") as f:
    f.write("6,5.")  # an append killed half-way
  log.truncate_after(4)
  assert metrics.read_column(str(path), "episode_return").tolist() == [
      1.0, 3.0, 2.0]
  log.truncate_after(2)
  assert metrics.read_column(str(path), "step").tolist() == [2, 2]


def test_event_truncation_drops_later_steps_and_a_torn_record(tmp_path):
  tb = str(tmp_path / "tb")
  log = metrics.MetricsLog(str(tmp_path))
  for step in (2, 4, 6):
    log.write(step, {"loss": float(step)})
  log.flush()
  (path,) = [os.path.join(tb, name) for name in os.listdir(tb)]
  with open(path, "ab") as f:
    f.write(b"\x10\x00\x00")  # a record cut short by a kill
  resumed = metrics.MetricsLog(str(tmp_path))
  resumed.truncate_after(4)
  assert metrics.read_summaries(tb) == {"train/loss": [(2, 2.0), (4, 4.0)]}
  resumed.write(6, {"loss": 0.5})
  resumed.flush()
  assert metrics.read_summaries(tb) == {
      "train/loss": [(2, 2.0), (4, 4.0), (6, 0.5)]}
  assert not [n for n in os.listdir(tb) if n.endswith(".tmp")]
  assert tf.io.gfile.exists(path)


def test_summaries_are_read_in_the_order_their_files_were_opened(tmp_path):
  # Two files opened in one second by one process: the counter in their
  # names sorts the second ('...10.v2') before the first ('...9.v2').
  tb = str(tmp_path / "tb")
  for step, counter in ((2, 9), (4, 10)):
    log = metrics.MetricsLog(str(tmp_path))
    log.write(step, {"loss": float(step)})
    log.flush()
    (new,) = [n for n in os.listdir(tb) if not n.startswith("events.out.x")]
    os.rename(os.path.join(tb, new),
              os.path.join(tb, f"events.out.x.100.host.1.{counter}.v2"))
  assert sorted(os.listdir(tb))[0].endswith(".10.v2")
  assert [path[-5:] for path in metrics.event_files(tb)] == [".9.v2", "10.v2"]
  assert metrics.read_summaries(tb) == {"train/loss": [(2, 2.0), (4, 4.0)]}
