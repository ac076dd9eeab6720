"""benchmarks/online_adaptation.py: a finished run resumed learning and
with its weights held; the per-episode returns it reads back and the
interval of their difference."""

import os
import sys

import numpy as np
import pytest
import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import online_adaptation  # pylint: disable=wrong-import-position


def test_the_episodes_after_the_resume_are_read_one_by_one(tmp_path):
  path = str(tmp_path / "episodes.csv")
  with open(path, "w") as f:
    f.write("step,env_steps,episode_return,episode_length,terminated\n"
            "1,100,99.0,10,1\n2,200,10.0,100,1\n2,200,20.0,40,0\n"
            "4,400,30.0,20,1\n")
  result = online_adaptation._returns_after(path, after=150)
  assert result["episodes"] == 3
  assert result["returns"] == [10.0, 20.0, 30.0]
  assert result["mean_return"] == pytest.approx(20.0)
  assert result["mean_length"] == pytest.approx(160 / 3)
  with pytest.raises(ValueError, match="no episode ended after 400 env "
                     "steps; raise --extra_env_steps"):
    online_adaptation._returns_after(path, after=400)
  with pytest.raises(ValueError, match="missing: the resumed run logged no "
                     "episode"):
    online_adaptation._returns_after(str(tmp_path / "none.csv"), after=0)


def test_the_workdir_and_the_window_are_checked(tmp_path):
  with pytest.raises(ValueError, match="holds no training run"):
    online_adaptation.measure(str(tmp_path), 1000, 100)
  (tmp_path / "config.json").write_text("{}")
  with pytest.raises(ValueError, match=r"--skip_env_steps \(1000\) must be "
                     r"below --extra_env_steps \(1000\)"):
    online_adaptation.measure(str(tmp_path), 1000, 1000)


def test_the_modes_and_their_learning_rates():
  assert online_adaptation.modes() == [("learning", None), ("frozen", 0.0)]
  assert online_adaptation.modes([1e-3, 5e-4])[2:] == [
      ("learning_lr_0.001", 1e-3), ("learning_lr_0.0005", 5e-4)]
  for rates in ([1e-3, 1e-3], [0.0], [-1e-3]):
    with pytest.raises(ValueError, match="expected distinct rates above 0"):
      online_adaptation.modes(rates)


def test_a_tiny_run_resumed_learning_and_frozen(tmp_path):
  """The tiny A2C preset trained briefly, then the resumes (learning at
  its own rate and at another, frozen): each ends episodes, each copy
  resumes at its learning rate, and the run's own workdir is left as it
  was."""
  from i2a import io_utils  # pylint: disable=import-outside-toplevel
  from i2a.metrics import read_column  # pylint: disable=import-outside-toplevel
  from i2a.run import train as training  # pylint: disable=import-outside-toplevel
  from configs.agents import a2c  # pylint: disable=import-outside-toplevel
  config = a2c.get_config("tiny")
  config.env_steps = 64
  workdir = str(tmp_path / "run")
  training.run(config, workdir)
  before = sorted(os.listdir(workdir))
  metrics_before = open(os.path.join(workdir, "metrics.csv")).read()
  trained = read_column(os.path.join(workdir, "metrics.csv"), "env_steps")[-1]
  scratch = str(tmp_path / "copies")
  result = online_adaptation.measure(workdir, extra_env_steps=800,
                                     skip_env_steps=0, scratch=scratch,
                                     learning_rates=[1e-4])
  modes = [mode for mode, _ in online_adaptation.modes([1e-4])]
  assert result["resumed_at"] == trained
  for mode in modes:
    assert result[mode]["episodes"] >= 1
    assert np.isfinite(result[mode]["mean_return"])
  assert result["return_gap"] == pytest.approx(
      result["learning"]["mean_return"] - result["frozen"]["mean_return"])
  assert sorted(result["gaps"]) == ["learning", "learning_lr_0.0001"]
  other = result["gaps"]["learning_lr_0.0001"]
  assert other["learning_rate"] == 1e-4
  assert other["return_gap"] == pytest.approx(
      result["learning_lr_0.0001"]["mean_return"]
      - result["frozen"]["mean_return"])
  assert result["gaps"]["learning"]["learning_rate"] == (
      config.optimizer.learning_rate)
  assert result["gaps"]["learning"]["interval"] == (
      result["return_gap_interval"])
  for mode in modes:
    assert len(result[mode]["returns"]) == result[mode]["episodes"]
    assert np.mean(result[mode]["returns"]) == pytest.approx(
        result[mode]["mean_return"])
    # The episodes are the copy's, logged after the resume only.
    copied = read_column(os.path.join(scratch, mode, "episodes.csv"),
                         "env_steps")
    assert result[mode]["episodes"] == int((copied > trained).sum())
  gap = result["return_gap_interval"]
  fewest = min(result[m]["episodes"] for m in ("learning", "frozen"))
  assert (gap["half_width"] is None) == (fewest < 2)
  if fewest >= 2:
    assert gap["low"] == pytest.approx(result["return_gap"]
                                       - gap["half_width"])
    assert gap["high"] == pytest.approx(result["return_gap"]
                                        + gap["half_width"])
  assert sorted(os.listdir(workdir)) == before
  assert open(os.path.join(workdir, "metrics.csv")).read() == metrics_before
  assert io_utils.read_json(os.path.join(workdir, "config.json"))[
      "optimizer"]["learning_rate"] == config.optimizer.learning_rate
  # The frozen copy resumed with the learning rate 0: its newest
  # checkpoint holds the run's weights; the learning copy's moved on.
  def weights(directory):
    reader = tf.train.load_checkpoint(os.path.join(directory, "checkpoints"))
    names = sorted(n for n in reader.get_variable_to_shape_map()
                   if n.startswith("network/") and "OPTIMIZER" not in n
                   and n.endswith(".ATTRIBUTES/VARIABLE_VALUE"))
    assert names
    return {n: reader.get_tensor(n) for n in names}
  trained_weights = weights(workdir)
  frozen = os.path.join(scratch, "frozen")
  assert io_utils.read_json(os.path.join(frozen, "config.json"))[
      "optimizer"]["learning_rate"] == 0.0
  for name, value in weights(frozen).items():
    np.testing.assert_array_equal(value, trained_weights[name], err_msg=name)
  for mode, rate in (("learning", config.optimizer.learning_rate),
                     ("learning_lr_0.0001", 1e-4)):
    copy = os.path.join(scratch, mode)
    assert io_utils.read_json(os.path.join(copy, "config.json"))[
        "optimizer"]["learning_rate"] == rate
    learned = weights(copy)
    assert any(not np.array_equal(learned[n], trained_weights[n])
               for n in trained_weights)


def test_the_command_line_refuses_bad_rates_and_an_existing_keep(tmp_path):
  import subprocess  # pylint: disable=import-outside-toplevel
  script = os.path.join(REPO, "benchmarks", "online_adaptation.py")
  for args, message in (
      (["--learning_rates", "1e-3,fast"], "--learning_rates '1e-3,fast': "
       "expected comma-separated numbers"),
      (["--keep", str(tmp_path)], f"--keep {tmp_path} exists; name a new "
       "folder")):
    done = subprocess.run([sys.executable, script, "--workdir", str(tmp_path)]
                          + args, capture_output=True, text=True, check=False,
                          env=dict(os.environ, PYTHONPATH=REPO))
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
