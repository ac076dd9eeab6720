"""python -m i2a.sweep --archive: finished runs kept outside the sweep
directory, and a lost sweep directory rebuilt from them elsewhere (tiny
presets, MiniPacman)."""

import io
import json
import os
import re
import shutil
import threading
import time

import pytest

from i2a import io_utils
from i2a.metrics import read_column
from i2a.run import sweep as sweeping
from i2a.run import sweep_archive as archiving

GRID = """
import ml_collections


def get_config(preset=""):
  grid = ml_collections.ConfigDict()
  grid.name = "test_archive"
  grid.seeds = (0,)
  grid.a2c_steps = 48
  grid.collect = (dict(name="random", config="configs/collect.py:tiny"),)
  grid.pretrain = (dict(
      name="dssm_det", config="configs/envmodels/dssm_det.py:tiny",
      data="collect/random",
      overrides=dict(train_steps=4, eval_every=2, image_every=100)),)
  grid.train = (dict(name="a2c", config="configs/agents/a2c.py:tiny",
                     overrides=dict(env_steps=grid.get_ref("a2c_steps"))),)
  grid.evaluate = dict(episodes=2)
  return grid
"""


def _run(grid, sweep_dir, archive):
  stream = io.StringIO()
  result = sweeping.run_sweep(grid, sweep_dir, stream=stream,
                              progress_every_s=60.0, archive=archive)
  return result, stream.getvalue()


def _files(root):
  return sorted(os.path.relpath(os.path.join(d, n), root)
                for d, _, names in os.walk(root) for n in names)


@pytest.fixture(scope="module")
def archived(tmp_path_factory):
  """The grid run in one sweep directory with an archive; that directory
  deleted; the grid run again in another one with the same archive."""
  tmp = tmp_path_factory.mktemp("archive")
  grid_file = tmp / "grid.py"
  grid_file.write_text(GRID)
  archive = str(tmp / "archive")
  first_dir, second_dir = str(tmp / "first"), str(tmp / "elsewhere" / "sw")
  first, first_output = _run(sweeping.load_grid(str(grid_file)), first_dir,
                             archive)
  first_report = io_utils.read_json(first["report"]["json"])
  archive_files = _files(archive)
  archived_texts = {
      f: open(os.path.join(archive, f), encoding="utf-8",
              errors="replace").read()
      for f in archive_files if f.endswith(".json")}
  shutil.rmtree(first_dir)  # the machine is gone
  listed = sweeping.list_runs(sweeping.make_plan(
      sweeping.load_grid(str(grid_file)), second_dir), archive=archive)
  second, second_output = _run(sweeping.load_grid(str(grid_file)),
                               second_dir, archive)
  return dict(grid_file=str(grid_file), archive=archive, first=first,
              first_output=first_output, first_report=first_report,
              archive_files=archive_files, archived_texts=archived_texts,
              first_dir=first_dir, second_dir=second_dir, second=second,
              second_output=second_output, listed=listed)


def test_the_archive_keeps_results_and_exports_not_checkpoints(archived):
  files, first_dir = archived["archive_files"], archived["first_dir"]
  assert "archive.json" in files and archiving.HISTORY in files
  pretrain = [f for f in files if f.startswith("pretrain/dssm_det/seed0/")]
  train = [f for f in files if f.startswith("train/a2c/seed0/")]
  for needed in ("sweep_run.json", "pretrain_done.json", "metrics.csv",
                 "config.json"):
    assert f"pretrain/dssm_det/seed0/{needed}" in pretrain
  assert any(f.startswith("pretrain/dssm_det/seed0/export/") for f in files)
  for needed in ("sweep_run.json", "metrics.csv", "checkpoints/checkpoint",
                 "eval/scores.json"):
    assert f"train/a2c/seed0/{needed}" in train
  # No checkpoint data, TensorBoard events, datasets or transient files.
  assert not [f for f in files if "/checkpoints/" in f and
              not f.endswith("/checkpoints/checkpoint")]
  assert not [f for f in files if "/tb/" in f or f.startswith("collect/")]
  assert not [f for f in files if f.endswith(("sweep_job.json",
                                              "sweep_result.json", ".tmp"))]
  assert "evaluate/a2c/seed0/sweep_run.json" in files
  assert "report/report.md" in files and "report/report.json" in files
  # Paths in the sweep directory are archived as ${SWEEP_DIR} in the runs'
  # records and configs (their outputs are kept byte for byte).
  record = json.loads(archived["archived_texts"][
      "pretrain/dssm_det/seed0/sweep_run.json"])
  assert record["config"]["data"] == os.path.join(
      "${SWEEP_DIR}", "collect", "random", "seed0", "dataset")
  for name, text in archived["archived_texts"].items():
    if os.path.basename(name) in ("sweep_run.json", "config.json",
                                  "run_info.json", "identity.json"):
      assert first_dir not in text, name
  # Archived after each run: the pretraining, the training, then the
  # evaluation with its training run (its scores are in that workdir).
  assert re.findall(r"archived (\d+) run\(s\) in", archived[
      "first_output"]) == ["1", "1", "2"]


def test_a_lost_sweep_directory_is_rebuilt_elsewhere_from_the_archive(
    archived):
  second, second_dir = archived["second"], archived["second_dir"]
  assert sorted(second["restored"]) == ["evaluate/a2c/seed0",
                                        "pretrain/dssm_det/seed0",
                                        "train/a2c/seed0"]
  assert "3 run(s) restored from the archive" in archived["second_output"]
  # Before it, --list told which runs the archive holds.
  lines = {line.split()[1]: line for line in
           archived["listed"].splitlines()[2:]}
  assert lines["train/a2c/seed0"].startswith("pending ")
  assert "archived done (restored by the next invocation that runs)" in \
      lines["train/a2c/seed0"]
  assert "archived" not in lines["collect/random/seed0"]
  # Only the collection (not archived) ran again; the rest is done.
  assert second["ran"] == ["collect/random/seed0"]
  assert not second["pending"] and not second["failed"]
  record = io_utils.read_json(os.path.join(second_dir, "pretrain",
                                           "dssm_det", "seed0",
                                           sweeping.RECORD))
  assert record["config"]["data"] == os.path.join(
      second_dir, "collect", "random", "seed0", "dataset")
  assert record["attempts"] == 1
  # The report from the rebuilt directory equals the first one.
  report = io_utils.read_json(second["report"]["json"])
  first = {a["name"]: a for a in archived["first_report"]["agents"]}
  again = {a["name"]: a for a in report["agents"]}
  assert again["a2c"]["evaluation_return"] == first["a2c"][
      "evaluation_return"]
  assert again["a2c"]["final_training_return"] == first["a2c"][
      "final_training_return"]
  assert again["a2c"]["evaluation_return"]["n"] == 1
  # The history came along: the rebuilt directory's sweep.json and its
  # report count the first directory's invocation too, in order.
  history = io_utils.read_json(os.path.join(second_dir, sweeping.SWEEP))
  assert len(history["invocations"]) == 2
  first_invocation, second_invocation = history["invocations"]
  assert first_invocation["ran"] == [
      "collect/random/seed0", "pretrain/dssm_det/seed0", "train/a2c/seed0",
      "evaluate/a2c/seed0"]
  assert first_invocation["seconds"] > 0 and second_invocation["seconds"] > 0
  assert first_invocation["started"] <= second_invocation["started"]
  assert archived["first_report"]["invocations"] == 1
  assert report["invocations"] == 2
  assert report["invocation_seconds"] == pytest.approx(
      first_invocation["seconds"] + second_invocation["seconds"])
  assert io_utils.read_json(os.path.join(
      archived["archive"], archiving.HISTORY))["invocations"][:2] == \
      history["invocations"]
  models = {m["name"]: m for m in report["models"]}
  assert models["dssm_det"]["held_out_nats_per_frame"] == {
      m["name"]: m for m in archived["first_report"]["models"]}[
          "dssm_det"]["held_out_nats_per_frame"]


def test_a_restored_run_that_must_run_again_starts_over(archived):
  grid = sweeping.load_grid(archived["grid_file"])
  grid.a2c_steps = 72  # raised: the restored run has no checkpoint to resume
  result, output = _run(grid, archived["second_dir"], archived["archive"])
  assert result["ran"] == ["train/a2c/seed0", "evaluate/a2c/seed0"]
  assert "train/a2c/seed0 was restored from an archive and must run again " \
      "without its checkpoints: it starts over" in output
  workdir = os.path.join(archived["second_dir"], "train", "a2c", "seed0")
  assert archiving.restored(workdir) is None
  steps = read_column(os.path.join(workdir, "metrics.csv"), "env_steps")
  assert steps[0] < 48 and steps[-1] == 72  # from the start, to the end
  assert io_utils.read_json(os.path.join(workdir, sweeping.RECORD))[
      "attempts"] == 1
  # The archive follows.
  archived_record = io_utils.read_json(os.path.join(
      archived["archive"], "train", "a2c", "seed0", sweeping.RECORD))
  assert archived_record["config"]["env_steps"] == 72


def test_an_archive_of_another_grid_is_refused(archived, tmp_path):
  grid = sweeping.load_grid(archived["grid_file"])
  grid.name = "another"
  with pytest.raises(ValueError, match="holds the runs of grid "
                     "'test_archive', not of 'another': give each grid its "
                     "own archive directory"):
    _run(grid, str(tmp_path / "sweep"), archived["archive"])


def test_what_is_kept():
  assert archiving.kept("metrics.csv")
  assert archiving.kept(os.path.join("export", "variables", "v.index"))
  assert archiving.kept(os.path.join("checkpoints", "checkpoint"))
  assert not archiving.kept(os.path.join("checkpoints", "ckpt-4.index"))
  assert not archiving.kept(os.path.join("tb", "events.out.tfevents.1"))
  assert not archiving.kept(os.path.join("dataset", "train", "shard.npz"))
  assert not archiving.kept("sweep_job.json")
  assert not archiving.kept(sweeping.RECORD)  # written last, separately
  assert not archiving.kept(os.path.join("images", "closed_loop_5.png"))
  # A policy's newest checkpoint, and no other.
  assert archiving.kept(os.path.join("checkpoints", "ckpt-4.index"), "ckpt-4")
  assert archiving.kept(os.path.join("checkpoints",
                                     "ckpt-4.data-00000-of-00001"), "ckpt-4")
  assert archiving.kept(os.path.join("checkpoints", "actor-4.pkl"), "ckpt-4")
  assert not archiving.kept(os.path.join("checkpoints", "ckpt-40.index"),
                            "ckpt-4")
  assert not archiving.kept(os.path.join("checkpoints", "actor-40.pkl"),
                            "ckpt-4")
  assert not archiving.kept(os.path.join("checkpoints", "ckpt-3.index"),
                            "ckpt-4")


def test_a_collections_policy_keeps_its_checkpoint(tmp_path):
  plan = sweeping.make_plan(
      sweeping.load_grid("configs/sweeps/table1_small.py:tiny"),
      str(tmp_path / "sweep"))
  assert archiving.policies(plan) == {"train/behaviour/seed0"}


LONG_GRID = """
import ml_collections


def get_config(preset=""):
  grid = ml_collections.ConfigDict()
  grid.name = "test_archive_stop"
  grid.train = (dict(name="a2c", config="configs/agents/a2c.py:tiny",
                     overrides=dict(env_steps=10 ** 9,
                                    checkpoint_every=5)),)
  grid.evaluate = dict(episodes=0)
  return grid
"""


def _stop_once(control, reached, timeout=120.0):
  """Sets control.stop once `reached()` is true (or after `timeout`)."""

  def watch():
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not control.stop.is_set():
      if reached():
        break
      time.sleep(0.05)
    control.stop.set()

  thread = threading.Thread(target=watch, daemon=True)
  thread.start()
  return thread


def _stop_when(control, metrics, beyond):
  """Sets control.stop once metrics.csv logs env steps beyond `beyond`."""

  def reached():
    try:
      steps = read_column(metrics, "env_steps")
    except (OSError, TypeError, ValueError):  # not there yet, half-written
      return False
    return steps is not None and len(steps) > 0 and steps[-1] > beyond

  return _stop_once(control, reached)


def _run_until(grid, sweep_dir, archive, beyond):
  control = sweeping.Control()
  metrics = os.path.join(sweep_dir, "train", "a2c", "seed0", "metrics.csv")
  watcher = _stop_when(control, metrics, beyond)
  stream = io.StringIO()
  result = sweeping.run_sweep(grid, sweep_dir, control=control,
                              stream=stream, progress_every_s=60.0,
                              archive=archive)
  watcher.join()
  return result, stream.getvalue()


def test_a_stopped_training_run_resumes_from_its_archived_checkpoint(
    tmp_path):
  grid_file = tmp_path / "grid.py"
  grid_file.write_text(LONG_GRID)
  archive = str(tmp_path / "archive")
  first_dir = str(tmp_path / "first")
  first, _ = _run_until(sweeping.load_grid(str(grid_file)), first_dir,
                        archive, beyond=0)
  assert first["stopped"] and first["pending"] == ["train/a2c/seed0"]
  kept = os.path.join(archive, "train", "a2c", "seed0")
  record = io_utils.read_json(os.path.join(kept, sweeping.RECORD))
  assert record["state"] == "stopped"
  checkpoint = archiving.newest_checkpoint(kept)
  assert checkpoint and os.path.exists(os.path.join(
      kept, "checkpoints", checkpoint + ".index"))
  step = checkpoint.rsplit("-", 1)[1]
  assert os.path.exists(os.path.join(kept, "checkpoints", f"actor-{step}.pkl"))
  steps_before = read_column(os.path.join(kept, "metrics.csv"), "env_steps")
  shutil.rmtree(first_dir)  # the machine is gone
  second_dir = str(tmp_path / "second")
  second, output = _run_until(sweeping.load_grid(str(grid_file)),
                              second_dir, archive, beyond=steps_before[-1])
  assert second["restored"] == ["train/a2c/seed0"]
  assert "train/a2c/seed0 was restored from an archive and resumes from " \
      "its archived checkpoint" in output
  workdir = os.path.join(second_dir, "train", "a2c", "seed0")
  steps = read_column(os.path.join(workdir, "metrics.csv"), "env_steps")
  # Resumed, not restarted: the rows before the stop are there, and more.
  assert steps[:len(steps_before)].tolist() == steps_before.tolist()
  assert steps[-1] > steps_before[-1]
  assert io_utils.read_json(os.path.join(workdir, sweeping.RECORD))[
      "attempts"] == 2


def _watch_for_snapshot(control, kept, seen):
  """Sets control.stop once the archive holds a snapshot of the run in
  progress (record state 'running') with its checkpoint; `seen` gets it."""

  def reached():
    try:
      state = io_utils.read_json(os.path.join(kept, sweeping.RECORD))[
          "state"]
    except (OSError, ValueError, KeyError):
      return False
    checkpoint = archiving.newest_checkpoint(kept)
    if state != "running" or not checkpoint:
      return False
    seen.update(checkpoint=checkpoint, files=sorted(
        os.listdir(os.path.join(kept, "checkpoints"))))
    return True

  return _stop_once(control, reached)


def test_a_running_training_run_is_archived_and_resumes_after_a_crash(
    tmp_path):
  grid_file = tmp_path / "grid.py"
  grid_file.write_text(LONG_GRID)
  archive = str(tmp_path / "archive")
  first_dir = str(tmp_path / "first")
  kept = os.path.join(archive, "train", "a2c", "seed0")
  control, seen, stream = sweeping.Control(), {}, io.StringIO()
  watcher = _watch_for_snapshot(control, kept, seen)
  first = sweeping.run_sweep(sweeping.load_grid(str(grid_file)), first_dir,
                             control=control, stream=stream,
                             progress_every_s=60.0, archive=archive,
                             archive_every_s=0.2)
  watcher.join()
  assert first["stopped"], stream.getvalue()
  assert "in progress: train/a2c/seed0" in stream.getvalue()
  # The snapshot came with its checkpoint: TF's files and the actor state.
  step = seen["checkpoint"].rsplit("-", 1)[1]
  assert {seen["checkpoint"] + ".index", f"actor-{step}.pkl",
          "checkpoint"} <= set(seen["files"])
  # The machine is lost without a stop: the archive holds the snapshot
  # (its record says running, by an invocation that is gone).
  record_path = os.path.join(kept, sweeping.RECORD)
  record = io_utils.read_json(record_path)
  record.update(state="running", pid=1, host="a-lost-machine")
  io_utils.atomic_write_json(record_path, record)
  steps_before = read_column(os.path.join(kept, "metrics.csv"), "env_steps")
  shutil.rmtree(first_dir)
  second_dir = str(tmp_path / "second")
  plan = sweeping.make_plan(sweeping.load_grid(str(grid_file)), second_dir)
  assert "archived in progress, with its newest checkpoint (restored by " \
      "the next invocation that runs)" in sweeping.list_runs(
          plan, archive=archive)
  second, output = _run_until(sweeping.load_grid(str(grid_file)),
                              second_dir, archive, beyond=steps_before[-1])
  assert second["restored"] == ["train/a2c/seed0"]
  assert "resumes from its archived checkpoint" in output
  steps = read_column(os.path.join(second_dir, "train", "a2c", "seed0",
                                   "metrics.csv"), "env_steps")
  assert steps[-1] > steps_before[-1]
  assert steps[0] == steps_before[0]  # resumed, not restarted


def test_a_snapshot_whose_checkpoint_is_rotated_out_is_tried_again(
    tmp_path, monkeypatch):
  grid_file = tmp_path / "grid.py"
  grid_file.write_text(LONG_GRID)
  plan = sweeping.make_plan(sweeping.load_grid(str(grid_file)),
                            str(tmp_path / "sweep"))
  (job,) = plan.jobs
  checkpoints = os.path.join(job.workdir, "checkpoints")
  os.makedirs(checkpoints)
  for name in ("ckpt-5.index", "ckpt-5.data-00000-of-00001", "actor-5.pkl"):
    with open(os.path.join(checkpoints, name), "wb") as f:
      f.write(b"x")
  with open(os.path.join(checkpoints, "checkpoint"), "w") as f:
    f.write('model_checkpoint_path: "ckpt-5"\n')
  io_utils.atomic_write_json(os.path.join(job.workdir, sweeping.RECORD),
                             dict(id=job.id, state="running"))
  archive = str(tmp_path / "archive")
  not_done = lambda job: False  # pylint: disable=unnecessary-lambda-assignment
  # Not running (another invocation's, or no snapshots asked): not archived.
  assert archiving.sync(plan, not_done, archive) == ([], 0)
  changed, copied = archiving.sync(plan, not_done, archive,
                                   running={job.id})
  assert changed == [job.id] and copied > 0
  kept = os.path.join(archive, "train", "a2c", "seed0")
  assert archiving.newest_checkpoint(kept) == "ckpt-5"
  # The next checkpoint rotates ckpt-5 out while ckpt-6 is being copied:
  # the snapshot stays the previous one, complete, until the next sync.
  for name in ("ckpt-6.index", "ckpt-6.data-00000-of-00001", "actor-6.pkl"):
    with open(os.path.join(checkpoints, name), "wb") as f:
      f.write(b"y")
  with open(os.path.join(checkpoints, "checkpoint"), "w") as f:
    f.write('model_checkpoint_path: "ckpt-6"\n')
  content = archiving._content  # pylint: disable=protected-access

  def vanishing(path, relative, old, new):
    if relative.startswith("checkpoints/actor-6"):
      raise FileNotFoundError(path)
    return content(path, relative, old, new)

  monkeypatch.setattr(archiving, "_content", vanishing)
  assert archiving.sync(plan, not_done, archive, running={job.id}) == ([], 0)
  assert archiving.newest_checkpoint(kept) == "ckpt-5"
  assert os.path.exists(os.path.join(kept, "checkpoints", "ckpt-5.index"))
  monkeypatch.setattr(archiving, "_content", content)
  assert archiving.sync(plan, not_done, archive, running={job.id})[0] == [
      job.id]
  assert archiving.newest_checkpoint(kept) == "ckpt-6"
  assert sorted(os.listdir(os.path.join(kept, "checkpoints"))) == [
      "actor-6.pkl", "checkpoint", "ckpt-6.data-00000-of-00001",
      "ckpt-6.index"]


def test_the_history_is_merged_once_and_in_order(tmp_path):
  archive = str(tmp_path / "archive")
  lost = dict(name="g", invocations=[
      dict(started="2026-01-01T10:00:00", host="a", ran=["x"], seconds=5.0),
      dict(started="2026-01-02T10:00:00", host="a", ran=[], seconds=1.0)])
  archiving.save_history(lost, archive)
  here = dict(name="g", invocations=[
      dict(started="2026-01-01T12:00:00", host="b", ran=["y"], seconds=2.0)])
  assert archiving.merge_history(here, archive) == 2
  assert [i["started"] for i in here["invocations"]] == [
      "2026-01-01T10:00:00", "2026-01-01T12:00:00", "2026-01-02T10:00:00"]
  assert archiving.merge_history(here, archive) == 0  # nothing twice
  assert len(here["invocations"]) == 3
  with pytest.raises(ValueError, match="holds the history of grid 'g', not "
                     "of 'other': give each grid its own archive"):
    archiving.merge_history(dict(name="other", invocations=[]), archive)
  # A folder that holds no history adds none.
  assert archiving.merge_history(dict(name="g", invocations=[]),
                                 str(tmp_path / "none")) == 0
