"""The Table 1 form (i2a/run/evaluate_models.py): held-out likelihood, the
open-loop prediction error against copy-last-frame, and the table."""

import json
import os

import numpy as np
import pytest

import envmodels
from configs import collect as collect_config
from configs.envmodels import dssm_det, sssm_action_free
from envmodels import precision
from i2a.replay import datasets, files
from i2a.run import collect as collection
from i2a.run import evaluate_models as model_evaluation
from i2a.run import pretrain as pretraining


def _pretrained(config_module, data, tmp_path_factory):
  config = config_module.get_config("tiny")
  config.data = data
  config.train_steps = 4
  workdir = str(tmp_path_factory.mktemp("pretrain") / "run")
  pretraining.run(config, workdir)
  return os.path.join(workdir, pretraining.EXPORT)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
  collect_dir = str(tmp_path_factory.mktemp("collect"))
  collection.run(collect_config.get_config("tiny"), collect_dir)
  return os.path.join(collect_dir, "dataset")


@pytest.fixture(scope="module")
def trained(dataset, tmp_path_factory):
  """(dataset dir, export dir) of a tiny dSSM-DET."""
  return dataset, _pretrained(dssm_det, dataset, tmp_path_factory)


def test_open_loop_error_matches_a_direct_computation(trained):
  data, export = trained
  model = envmodels.load(export)
  test_dir = files.split_path(data, "test")
  T = 3
  error = model_evaluation.open_loop_error(model, test_dir, T=T,
                                           num_windows=6, batch_size=4)
  assert len(error.model) == len(error.copy_last_frame) == T
  assert all(np.isfinite(error.model)) and min(error.model) >= 0
  # The copy-last-frame baseline, computed from the same held-out windows.
  k = model.spec.context_length
  sampler = datasets.window_sampler(test_dir, k + T, model.spec.jump)
  frames = np.concatenate([
      b["observation"].numpy() for b in datasets.evaluation_batches(
          sampler, 4, 6)]).astype(np.float64) / 255.0
  assert frames.shape[0] == 6
  expected = np.mean((frames[:, k - 1:k] - frames[:, k:]) ** 2,
                     axis=(0, 2, 3, 4))
  np.testing.assert_allclose(error.copy_last_frame, expected, rtol=1e-5)
  assert error.beats_copy == (error.model[-1] < error.copy_last_frame[-1])
  # On the moving pixels: the copy's squared error summed over them, over
  # their count, per step (None where no window has any).
  moving = model_evaluation.moving_pixels(frames)[:, k:]
  copy_err = np.mean((frames[:, k - 1:k] - frames[:, k:]) ** 2, axis=-1)
  counts = moving.sum(axis=(0, 2, 3))
  expected_moving = [
      (copy_err[:, t][moving[:, t]].sum() / counts[t]) if counts[t] else None
      for t in range(T)]
  assert len(error.model_moving) == T
  for got, want in zip(error.copy_last_frame_moving, expected_moving):
    assert (got is None) == (want is None)
    if want is not None:
      np.testing.assert_allclose(got, want, rtol=1e-5)
  assert all(v is None or (np.isfinite(v) and v >= 0)
             for v in error.model_moving)
  # The static background's error there: the window's median frame.
  median = np.median(frames, axis=1, keepdims=True)
  background_err = np.mean((median - frames[:, k:]) ** 2, axis=-1)
  for t, got in enumerate(error.background_moving):
    if counts[t]:
      np.testing.assert_allclose(
          got, background_err[:, t][moving[:, t]].sum() / counts[t],
          rtol=1e-5)


def test_the_action_effect_is_what_random_actions_change(trained,
                                                          tmp_path_factory):
  data, export = trained
  test_dir = files.split_path(data, "test")
  model = envmodels.load(export)
  T, k = 3, model.spec.context_length
  effect = model_evaluation.action_effect(model, test_dir, T=T,
                                          num_windows=6, batch_size=4)
  # The same windows and random actions, computed directly.
  sampler = datasets.window_sampler(test_dir, k + T, model.spec.jump)
  rng = np.random.default_rng(0)
  sq, changed = np.zeros(T), np.zeros(T)
  for batch in datasets.evaluation_batches(sampler, 4, 6):
    recorded = batch["action"][:, k - 1:k - 1 + T]
    random = rng.integers(0, model.spec.num_actions, tuple(recorded.shape))
    state = model.initial_state(batch["observation"][:, :k])
    difference = (
        model.rollout(state, recorded, render=True).frames.numpy() -
        model.rollout(state, random.astype(np.int32),
                      render=True).frames.numpy())
    sq += np.mean(difference ** 2, axis=(2, 3, 4)).sum(0)
    changed += np.sum(np.max(np.abs(difference), axis=-1) >
                      model_evaluation.MOVING_THRESHOLD, axis=(2, 3)).sum(0)
  np.testing.assert_allclose(effect.mse, sq / 6, rtol=1e-4, atol=1e-12)
  np.testing.assert_allclose(effect.changed_pixels, changed / 6)
  # The dSSM-DET reads its actions: other actions, other frames.
  assert len(effect.mse) == T and min(effect.mse) > 0
  # An action-free sSSM ignores them, and both rollouts draw the same
  # latent noise: exactly no effect.
  model = envmodels.load(_pretrained(sssm_action_free, data,
                                     tmp_path_factory))
  effect = model_evaluation.action_effect(model, test_dir, T=T,
                                          num_windows=6, batch_size=4)
  assert effect.mse == [0.0] * T and effect.changed_pixels == [0.0] * T


def test_moving_pixels_are_where_a_frame_leaves_its_windows_median():
  # A static background with a 2x2 square moving one pixel right per frame:
  # each frame's moving pixels are exactly its square.
  frames = np.full((1, 5, 6, 8, 3), 0.2)
  for t in range(5):
    frames[0, t, 2:4, t:t + 2] = 0.9
  moving = model_evaluation.moving_pixels(frames)
  assert moving.shape == (1, 5, 6, 8)
  for t in range(5):
    expected = np.zeros((6, 8), bool)
    expected[2:4, t:t + 2] = True
    np.testing.assert_array_equal(moving[0, t], expected)
  # Changes within the threshold do not count.
  frames[0, 0, 0, 0] += model_evaluation.MOVING_THRESHOLD / 2
  assert not model_evaluation.moving_pixels(frames)[0, 0, 0, 0]


def test_the_table_states_the_open_loop_error_next_to_copy(trained):
  data, export = trained
  rows = model_evaluation.evaluate([export], data, T=3, num_windows=4,
                                   batch_size=4, horizon=3, rollout_batch=2)
  (row,) = rows
  assert len(row.open_loop_mse) == len(row.copy_last_frame_mse) == 3
  table = model_evaluation.markdown(rows, 3, 2)
  assert "open-loop MSE, last step" in table
  assert "copy-last-frame MSE" in table
  assert f"{row.open_loop_mse[-1]:.5f}" in table
  assert f"{row.copy_last_frame_mse[-1]:.5f}" in table
  assert len(row.open_loop_moving_mse) == len(
      row.copy_last_frame_moving_mse) == 3
  assert len(row.background_moving_mse) == 3
  assert "moving pixels, last step: model / copy / static background" in (
      table)
  assert len(row.action_effect_mse) == len(row.action_changed_pixels) == 3
  assert (f"{row.action_effect_mse[-1]:.2e} / "
          f"{row.action_changed_pixels[-1]:.1f} |") in table


def test_the_report_records_its_precision_and_thread_pools(trained,
                                                           tmp_path):
  data, export = trained
  rows = model_evaluation.evaluate([export], data, T=2, num_windows=2,
                                   batch_size=2, horizon=2, rollout_batch=2)
  report = model_evaluation.write_report(rows, str(tmp_path), 2, 2, data)
  with open(report["json"], encoding="utf-8") as f:
    recorded = json.load(f)
  assert recorded["precision"] == precision.current()
  assert recorded["threads"] == precision.threads_record()
  assert [m["label"] for m in recorded["models"]] == [rows[0].label]


def test_the_report_draws_each_models_open_loop_prediction(trained,
                                                           tmp_path):
  data, export = trained
  T = 3
  rows = model_evaluation.evaluate([export], data, T=T, num_windows=4,
                                   batch_size=4, horizon=3, rollout_batch=2)
  report = model_evaluation.write_report(rows, str(tmp_path), 3, 2, data)
  (row,) = rows
  assert row.open_loop_picture == "open_loop_0.png"
  with open(report["json"], encoding="utf-8") as f:
    (recorded,) = json.load(f)["models"]
  assert recorded["open_loop_picture"] == "open_loop_0.png"
  assert "open_loop_example" not in recorded
  assert "`open_loop_0.png` (dSSM-DET)" in report["table"]
  # Two windows, each three rows (truth, prediction, error) of k + T frames.
  model = envmodels.load(export)
  k = model.spec.context_length
  test_dir = files.split_path(data, "test")
  error = model_evaluation.open_loop_error(model, test_dir, T=T,
                                           num_windows=4, batch_size=4)
  assert error.example_frames.shape[:2] == (2, k + T)
  assert error.example_prediction.shape[:2] == (2, T)
  image = model_evaluation.example_image(error, k)
  strip = model_evaluation.pictures.prediction_strip(
      error.example_frames[0, k:], error.example_prediction[0],
      context=error.example_frames[0, :k])
  np.testing.assert_array_equal(image[:strip.shape[0]], strip)
  assert image.shape == (2 * strip.shape[0] + 4,) + strip.shape[1:]
  from PIL import Image  # pylint: disable=import-outside-toplevel
  with Image.open(tmp_path / "open_loop_0.png") as png:
    assert png.size == (image.shape[1], image.shape[0] +
                        model_evaluation.pictures.CAPTION_HEIGHT)
