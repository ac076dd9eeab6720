"""i2a/pictures.py and i2a/metrics.py: captions with action names, GIFs,
and animated TensorBoard image summaries read back from the event files."""

import io

import numpy as np
import pytest
from PIL import Image

from i2a import environments, pictures
from i2a.metrics import MetricsLog, read_summaries

NAMES = environments.action_names(environments.preset("minipacman"))


def _frames(n, height=16, width=24):
  rng = np.random.default_rng(0)
  return rng.integers(0, 256, (n, height, width, 3)).astype(np.uint8)


def test_action_labels_are_names_and_an_unknown_id_is_refused():
  assert pictures.action_label(1, NAMES) == "RIGHT"
  assert pictures.action_label(4, NAMES) == "DOWN"
  assert pictures.action_label(3) == "3"  # no names: the id
  with pytest.raises(ValueError, match=r"action 5 has no name: the 5 action "
                     r"names are \('NOOP', 'RIGHT', 'UP', 'LEFT', 'DOWN'\)"):
    pictures.action_label(5, NAMES)


def test_a_caption_adds_a_band_with_the_text():
  image = np.zeros((96, 144, 3), np.uint8)
  captioned = pictures.caption(image, "a=LEFT")
  assert captioned.shape == (96 + pictures.CAPTION_HEIGHT, 144, 3)
  np.testing.assert_array_equal(captioned[:96], image)
  band = captioned[96:]
  assert band.min() < 128 and band.max() == 255  # dark text on white
  # Different names draw different pixels.
  other = pictures.caption(image, "a=RIGHT")[96:]
  assert not np.array_equal(band, other)


def test_episode_and_prediction_frames_are_captioned_gif_frames(tmp_path):
  frames = pictures.episode_frames(_frames(4), actions=[1, 2, 3],
                                   rewards=[0.0, 1.0, 0.0],
                                   action_names=NAMES)
  assert len(frames) == 4
  assert {f.shape for f in frames} == {(96 + pictures.CAPTION_HEIGHT, 144,
                                        3)}
  truth, prediction = _frames(3), _frames(3)[::-1]
  actions = np.array([[0], [1], [4]])
  strip = pictures.prediction_gif(str(tmp_path / "p.gif"), truth, prediction,
                                  actions, NAMES)
  assert len(strip) == 3
  with Image.open(tmp_path / "p.gif") as gif:
    assert gif.n_frames == 3
    assert gif.size == (strip[0].shape[1], strip[0].shape[0])
  with pytest.raises(ValueError, match="one action group per predicted "
                     "frame: given 2 for 3 frames"):
    pictures.prediction_frames(truth, prediction, actions[:2], NAMES)


def test_imagination_pictures_take_action_names(tmp_path):
  real = list(_frames(2))
  imagined = _frames(3 * 2).reshape(3, 2, 16, 24, 3)
  rewards = np.zeros((3, 2))
  image = pictures.imagination_figure(
      str(tmp_path / "imagination.png"), real, imagined, rewards,
      first_actions=[0, 1, -1], jump=1, action_names=NAMES)
  assert image.ndim == 3 and image.shape[-1] == 3
  frames = pictures.imagination_frames(real, imagined, [0, 1, -1], jump=1,
                                       action_names=NAMES)
  # now, +1, +2; a row of real + 3 rollouts, captioned, and a caption.
  assert len(frames) == 3
  cell_height = 96 + pictures.CAPTION_HEIGHT
  assert frames[0].shape == (cell_height + pictures.CAPTION_HEIGHT,
                             4 * 144 + 3 * 2, 3)
  with pytest.raises(ValueError, match="action 7 has no name"):
    pictures.imagination_frames(real, imagined, [7, 1, -1], 1, NAMES)


def test_animations_are_gif_image_summaries(tmp_path):
  log = MetricsLog(str(tmp_path))
  frames = pictures.episode_frames(_frames(5), [0, 1, 2, 3], None, NAMES)
  log.animation(40, "eval/episode", frames, duration_ms=80)
  log.write(3, dict(loss=1.5), summary_step=40)
  log.flush()
  summaries = read_summaries(str(tmp_path / "tb"))
  [(step, (plugin, (width, height, data)))] = summaries["eval/episode"]
  assert step == 40 and plugin == "images"
  assert (int(width), int(height)) == (frames[0].shape[1],
                                       frames[0].shape[0])
  with Image.open(io.BytesIO(data)) as gif:
    assert gif.format == "GIF" and gif.n_frames == 5
  # Scalars at the summary step; the row's own step as split/step.
  assert summaries["train/loss"] == [(40, 1.5)]
  assert summaries["train/step"] == [(40, 3.0)]
  with pytest.raises(ValueError, match="a GIF needs at least one frame"):
    pictures.gif_bytes([])
