"""`make demo`'s pipeline at the tiny preset: every stage, then a rerun."""

import os

from configs import demo as demo_config
from i2a.run import demo


def test_demo_runs_every_stage_writes_a_report_and_skips_them_on_rerun(
    tmp_path):
  config = demo_config.get_config("tiny")
  report = demo.run(config, str(tmp_path))
  text = open(report).read()
  for heading in ("## Data", "## Environment models", "## Agents",
                  "## Versions", "| dSSM-DET |", "| sSSM |", "| a2c |",
                  "| i2a |", "learning_curves.png"):
    assert heading in text, heading
  # Paths are relative to the workdir: a copied report reads the same.
  assert str(tmp_path) not in text
  assert "over the frozen pretrain/dssm_det/export model" in text
  assert "### What i2a imagines" in text
  for name in ("learning_curves.png", "open_loop_dssm_det.png",
               "open_loop_sssm.png", "imagination_i2a.png"):
    assert os.path.exists(tmp_path / "report_images" / name), name
  assert os.path.exists(tmp_path / "agents" / "i2a" / "eval" / "scores.json")
  done = tmp_path / "pretrain" / "dssm_det" / "pretrain_done.json"
  before = os.stat(done).st_mtime_ns
  report = demo.run(config, str(tmp_path))  # finished stages are skipped
  assert os.stat(done).st_mtime_ns == before
  assert "over 2 invocations, reruns skipping the finished stages" in open(
      report).read()
