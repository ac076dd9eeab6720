"""benchmarks/learning_onset.py: per-bin means, the running-mean onset, the
table and JSON written from a fake sweep's episodes, and its errors."""

import json
import os
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import learning_onset  # pylint: disable=wrong-import-position


def _episodes(path, env_steps, returns):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write("step,env_steps,episode_return,episode_length,terminated\n")
    for s, r in zip(env_steps, returns):
      f.write(f"{s // 80},{s},{r},30,1\n")


def test_bin_means_put_an_episode_logged_at_a_boundary_in_the_bin_it_closes():
  steps = np.array([500, 1000, 1001, 2500])
  returns = np.array([1.0, 3.0, 10.0, -4.0])
  assert learning_onset.bin_means(steps, returns, 1000) == [2.0, 10.0, -4.0]
  # A bin with no episode is None, not 0.
  assert learning_onset.bin_means(np.array([10, 3500]), np.array([1.0, 2.0]),
                                  1000) == [1.0, None, None, 2.0]
  assert learning_onset.bin_means(np.array([], np.int64), np.array([]),
                                  1000) == []


def test_onset_is_the_first_episode_whose_running_mean_exceeds_the_threshold():
  returns = np.array([-20.0, -20.0, -20.0, 30.0, 30.0, 30.0])
  steps = np.arange(1, 7) * 100
  # Means of 2: -20, -20, 5 (at the 4th episode, 400 env steps), 30, 30.
  assert learning_onset.onset(steps, returns, 2, 0.0) == 400
  # Means of 3: -20, -3.33, 13.3 (5th episode): above 0 at 500.
  assert learning_onset.onset(steps, returns, 3, 0.0) == 500
  # Strictly above: a mean equal to the threshold is not an onset.
  assert learning_onset.onset(steps, returns, 2, 30.0) is None
  # Fewer episodes than the window: no onset.
  assert learning_onset.onset(steps, returns, 7, -100.0) is None


def test_a_fake_sweep_is_described_seed_by_seed(tmp_path, capsys):
  sweep = tmp_path / "sweep"
  learner = np.concatenate([np.full(5, -20.0), np.full(5, 40.0)])
  steps = np.arange(1, 11) * 250_000  # 10 episodes over 2.5M env steps
  _episodes(str(sweep / "train/a2c/seed0/episodes.csv"), steps, learner)
  _episodes(str(sweep / "train/a2c/seed10/episodes.csv"), steps,
            np.full(10, -20.0))
  _episodes(str(sweep / "train/copy/seed1/episodes.csv"), steps[:3],
            np.array([1.0, 2.0, 3.0]))
  os.makedirs(sweep / "train/copy/seed2")  # started, no episodes yet
  out = tmp_path / "out"
  result = learning_onset.main([str(sweep), "--window", "2",
                                "--output", str(out)])
  rows = [(r["config"], r["seed"]) for r in result["rows"]]
  # Seeds in numeric order (seed10 after seed0), the empty seed left out.
  assert rows == [("a2c", "seed0"), ("a2c", "seed10"), ("copy", "seed1")]
  first, never, short = result["rows"]
  assert first["bin_means"] == [-20.0, 25.0, 40.0]  # 1.25M-2M: -20, 40 x3
  assert first["onset"] == 1_500_000  # episodes 5 and 6: mean 10
  assert first["episodes"] == 10 and first["last_env_steps"] == 2_500_000
  assert never["onset"] is None and never["bin_means"] == [-20.0] * 3
  assert short["bin_means"] == [2.0] and short["onset"] == 250_000 * 2
  table = (out / "learning_onset.md").read_text()
  assert "| a2c | seed0 | 10 | 2.50M | -20.0 | 25.0 | 40.0 | 1.50M |" in table
  assert "| a2c | seed10 | 10 | 2.50M | -20.0 | -20.0 | -20.0 | never |" in (
      table)
  assert "| copy | seed1 | 3 | 0.75M | 2.0 |  |  | 0.50M |" in table
  assert json.loads((out / "learning_onset.json").read_text())["rows"] == (
      result["rows"])
  assert table in capsys.readouterr().out
  only = learning_onset.main([str(sweep), "--configs", "copy"])
  assert [r["config"] for r in only["rows"]] == ["copy"]


def test_mistakes_are_explained(tmp_path):
  with pytest.raises(FileNotFoundError, match="has no train/ directory"):
    learning_onset.main([str(tmp_path)])
  _episodes(str(tmp_path / "train/a2c/seed0/episodes.csv"), [100], [1.0])
  with pytest.raises(ValueError, match="'copy' has no runs .* it has a2c"):
    learning_onset.main([str(tmp_path), "--configs", "copy"])
  bad = tmp_path / "bad/train/a2c/seed0/episodes.csv"
  os.makedirs(bad.parent)
  bad.write_text("step,return\n1,2\n")
  with pytest.raises(ValueError, match=r"missing \['env_steps', "
                     r"'episode_return'\]"):
    learning_onset.main([str(tmp_path / "bad")])
  with pytest.raises(SystemExit):
    learning_onset.main([str(tmp_path), "--window", "0"])
