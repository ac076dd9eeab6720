"""`make demo`'s pipeline at the tiny preset: every stage, then a rerun."""

import os
import types

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


def test_the_report_states_the_open_loop_errors_overall_and_on_moving_pixels():
  row = types.SimpleNamespace(
      jump=3, open_loop_mse=[0.001, 0.0013], copy_last_frame_mse=[0.0015,
                                                                 0.0027],
      open_loop_moving_mse=[0.064, 0.080],
      copy_last_frame_moving_mse=[0.059, 0.110],
      background_moving_mse=[0.070, 0.078])
  text = demo._open_loop_sentence(row)
  assert ("Held-out open-loop MSE 2 model steps ahead (6 agent steps): "
          "0.00130, copy-last-frame 0.00270: the model beats the "
          "copy-last-frame baseline (0.48x its error)") in text
  assert ("last step: model 0.0800, copy-last-frame 0.1100, the static "
          "background (that median frame, without the moving objects) "
          "0.0780: the model errs no less there than the static background: "
          "it predicts the moving objects no better than leaving them out"
          ) in text
  row.open_loop_moving_mse = [0.064, 0.05]
  assert ("the model errs less there than the static background: it keeps "
          "something of the moving objects") in demo._open_loop_sentence(row)
  # Without moving pixels at the last step the sentence says nothing of them.
  row.open_loop_moving_mse = row.copy_last_frame_moving_mse = [0.06, None]
  row.background_moving_mse = [0.06, None]
  assert "moving pixels" not in demo._open_loop_sentence(row)
