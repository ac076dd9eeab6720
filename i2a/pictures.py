"""Pictures people would rather look at than read: strips, GIFs, plots.

Everything is written atomically (io_utils.atomic_path) as PNG or GIF under a
run's `images/` directory; the same arrays go to TensorBoard as image
summaries, and GIFs (`gif_bytes`) as animated image summaries
(i2a/metrics.py `MetricsLog.animation`). Pictures that show actions name
them (`action_label`, with the names of i2a.environments.action_names).
"""

from __future__ import annotations

import io
from typing import Dict, List, Optional, Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from i2a import io_utils


def to_uint8(frames: np.ndarray) -> np.ndarray:
  """float in [0, 1] or uint8 -> uint8 RGB (grayscale is repeated)."""
  frames = np.asarray(frames)
  if frames.dtype != np.uint8:
    frames = np.clip(np.round(frames * 255.0), 0, 255).astype(np.uint8)
  if frames.shape[-1] == 1:
    frames = np.repeat(frames, 3, axis=-1)
  return frames


def upscale(image: np.ndarray, min_height: int = 96) -> np.ndarray:
  """Nearest-neighbour upscaling so tiny frames (MiniPacman) stay visible."""
  factor = max(1, int(np.ceil(min_height / image.shape[-3])))
  if factor == 1:
    return image
  return image.repeat(factor, axis=-3).repeat(factor, axis=-2)


def grid(rows: Sequence[np.ndarray], gap: int = 2) -> np.ndarray:
  """rows of frames [T, H, W, 3] uint8 -> one image, white gaps between."""
  _, height, width, _ = rows[0].shape
  num_cols = max(len(r) for r in rows)
  out = np.full(((height + gap) * len(rows) - gap,
                 (width + gap) * num_cols - gap, 3), 255, np.uint8)
  for i, row in enumerate(rows):
    for j, frame in enumerate(row):
      out[i * (height + gap):i * (height + gap) + height,
          j * (width + gap):j * (width + gap) + width] = frame
  return out


def prediction_strip(truth: np.ndarray, prediction: np.ndarray,
                     context: Optional[np.ndarray] = None) -> np.ndarray:
  """Rows: truth, prediction, |error| over time ([T, H, W, C] each).

  With `context` [k, H, W, C], the context frames lead each row (the error
  row shows them black), so open-loop predictions read left to right.
  """
  truth, prediction = to_uint8(truth), to_uint8(prediction)
  error = np.abs(truth.astype(np.int16) - prediction.astype(np.int16))
  error = error.astype(np.uint8)
  rows = [truth, prediction, error]
  if context is not None:
    context = to_uint8(context)
    rows = [np.concatenate([context, truth]),
            np.concatenate([context, prediction]),
            np.concatenate([np.zeros_like(context), error])]
  return grid([upscale(r) for r in rows])


def action_label(action: int,
                 action_names: Optional[Sequence[str]] = None) -> str:
  """An action id as pictures show it: its name (action_names[action]),
  or the bare id when no names are given."""
  action = int(action)
  if action_names is None:
    return str(action)
  if not 0 <= action < len(action_names):
    raise ValueError(f"action {action} has no name: the {len(action_names)} "
                     f"action names are {tuple(action_names)}; pass the "
                     "names of the environment the actions were taken in "
                     "(i2a.environments.action_names(protocol)).")
  return str(action_names[action])


CAPTION_HEIGHT = 12  # pixels of the band `caption` adds under an image


def caption(image: np.ndarray, text: str) -> np.ndarray:
  """uint8 [H, W, 3] -> [H + CAPTION_HEIGHT, W, 3]: `text` in black on a
  white band under the image (PIL's built-in bitmap font)."""
  image = to_uint8(image)
  band = Image.new("RGB", (image.shape[1], CAPTION_HEIGHT), (255, 255, 255))
  ImageDraw.Draw(band).text((2, 0), text, fill=(0, 0, 0),
                            font=ImageFont.load_default())
  return np.concatenate([image, np.asarray(band)], axis=0)


def save_png(path: str, image: np.ndarray) -> None:
  with io_utils.atomic_path(path) as tmp:
    Image.fromarray(to_uint8(image)).save(tmp, format="PNG")


def gif_bytes(frames: Sequence[np.ndarray], duration_ms: int = 200) -> bytes:
  """Frames [H, W, C] (all one size) -> an animated GIF that loops."""
  if not len(frames):
    raise ValueError("a GIF needs at least one frame, given none.")
  images = [Image.fromarray(to_uint8(f)) for f in frames]
  buffer = io.BytesIO()
  images[0].save(buffer, format="GIF", save_all=True,
                 append_images=images[1:], duration=duration_ms, loop=0)
  return buffer.getvalue()


def save_gif(path: str, frames: Sequence[np.ndarray],
             duration_ms: int = 200) -> None:
  data = gif_bytes(frames, duration_ms)
  with io_utils.atomic_path(path) as tmp:
    with open(tmp, "wb") as f:
      f.write(data)


def prediction_frames(truth: np.ndarray, prediction: np.ndarray,
                      actions: Optional[Sequence[Sequence[int]]] = None,
                      action_names: Optional[Sequence[str]] = None
                      ) -> List[np.ndarray]:
  """[truth | prediction | error] side by side, one frame per step
  (truth, prediction [T, H, W, C]). With `actions` [T, c], frame t is
  captioned with the c primitive actions that led to it, by name."""
  truth, prediction = to_uint8(truth), to_uint8(prediction)
  error = np.abs(truth.astype(np.int16) - prediction.astype(np.int16)).astype(
      np.uint8)
  frames = [upscale(grid([np.stack([t, p, e])]))
            for t, p, e in zip(truth, prediction, error)]
  if actions is not None:
    if len(actions) != len(frames):
      raise ValueError(f"one action group per predicted frame: given "
                       f"{len(actions)} for {len(frames)} frames.")
    frames = [caption(f, f"+{t + 1} a=" + "+".join(
        action_label(a, action_names) for a in np.ravel(step_actions)))
              for t, (f, step_actions) in enumerate(zip(frames, actions))]
  return frames


def prediction_gif(path: str, truth: np.ndarray, prediction: np.ndarray,
                   actions: Optional[Sequence[Sequence[int]]] = None,
                   action_names: Optional[Sequence[str]] = None
                   ) -> List[np.ndarray]:
  """A GIF of `prediction_frames`; returns the frames (for TensorBoard)."""
  frames = prediction_frames(truth, prediction, actions, action_names)
  save_gif(path, frames)
  return frames


def episode_frames(frames: Sequence[np.ndarray],
                   actions: Optional[Sequence[int]] = None,
                   rewards: Optional[Sequence[float]] = None,
                   action_names: Optional[Sequence[str]] = None
                   ) -> List[np.ndarray]:
  """An episode's frames (observation 0..T) upscaled, each captioned with
  its step and, from step 1 on, the action that led to it (by name) and
  the reward it brought: the frames of an episode GIF."""
  out = []
  for t, frame in enumerate(frames):
    text = f"t={t}"
    if t > 0 and actions is not None and t - 1 < len(actions):
      text += " a=" + action_label(actions[t - 1], action_names)
    if t > 0 and rewards is not None and t - 1 < len(rewards):
      text += f" r={float(rewards[t - 1]):g}"
    out.append(caption(upscale(to_uint8(frame)), text))
  return out


def _pyplot():
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  return plt


def reward_scatter(path: str, predicted: np.ndarray, true: np.ndarray,
                   title: str = "predicted vs true reward") -> None:
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(4, 4), dpi=100)
  ax.scatter(np.ravel(true), np.ravel(predicted), s=6, alpha=0.5)
  low = float(min(np.min(true), np.min(predicted), 0.0))
  high = float(max(np.max(true), np.max(predicted), 1e-3))
  ax.plot([low, high], [low, high], "k--", lw=1)
  ax.set_xlabel("true reward")
  ax.set_ylabel("predicted reward")
  ax.set_title(title)
  fig.tight_layout()
  with io_utils.atomic_path(path) as tmp:
    fig.savefig(tmp, format="png")
  plt.close(fig)


def line_plot(path: str, curves: Dict[str, tuple], xlabel: str, ylabel: str,
              title: str = "") -> None:
  """curves: {label: (x, y)} -> one PNG with a line per label."""
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
  for label, (x, y) in curves.items():
    ax.plot(x, y, label=label)
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  if title:
    ax.set_title(title)
  if len(curves) > 1:
    ax.legend()
  ax.grid(alpha=0.3)
  fig.tight_layout()
  with io_utils.atomic_path(path) as tmp:
    fig.savefig(tmp, format="png")
  plt.close(fig)


def imagination_figure(path: str, real: Sequence[np.ndarray],
                       imagined: np.ndarray, rewards: np.ndarray,
                       first_actions: Sequence[int], jump: int,
                       title: str = "",
                       action_names: Optional[Sequence[str]] = None
                       ) -> np.ndarray:
  """An I2A's imagination at one step, beside what really happened.

  Args:
    path: the PNG to write.
    real: the frame now [H, W, C], then the real frames 1, 2, .. model
      steps later (under the agent's own actions) as far as they exist (the
      episode may end first; during training the future is unknown): 1 to
      tau + 1 frames. Missing ones are shown blank.
    imagined: [K, tau, H, W, C], the model's rendering of each rollout.
    rewards: [K, tau], the rewards the model predicted.
    first_actions: [K], each rollout's fixed first action (-1: pi_r's).
    jump: c, environment steps per model step (the column labels).
    title: the figure's title.
    action_names: the names of the action ids (environments.action_names);
      None labels the first actions by id.

  Returns:
    the picture, uint8 [height, width, 3] (for TensorBoard).
  """
  imagined = to_uint8(imagined)
  num_rollouts, depth = imagined.shape[:2]
  real = to_uint8(np.stack(list(real)[:depth + 1]))
  plt = _pyplot()
  height, width = real.shape[1:3]
  scale = 1.6 / max(height, width)
  fig, axes = plt.subplots(
      num_rollouts + 1, depth + 1, squeeze=False, dpi=100,
      figsize=((depth + 1) * width * scale + 1.2,
               (num_rollouts + 1) * (height * scale + 0.35) + 0.5))
  for j in range(depth + 1):
    steps = j * jump
    axes[0, j].set_title("now" if j == 0 else
                         f"+{steps} step{'s' if steps > 1 else ''}",
                         fontsize=8)
  rows = [(real, "real (agent's actions)")]
  for k in range(num_rollouts):
    label = (f"rollout {k}: a={action_label(first_actions[k], action_names)}"
             if first_actions[k] >= 0 else f"rollout {k}")
    rows.append((np.concatenate([real[:1], imagined[k]]),
                 f"{label}\nsum r={float(np.sum(rewards[k])):.2f}"))
  for i, (frames, label) in enumerate(rows):
    for j in range(depth + 1):
      ax = axes[i, j]
      ax.imshow(frames[j] if j < len(frames) else
                np.full_like(frames[0], 255), interpolation="nearest")
      if i > 0 and j > 0:
        ax.set_xlabel(f"r={float(rewards[i - 1, j - 1]):.2f}", fontsize=7,
                      labelpad=1)
      ax.set_xticks([])
      ax.set_yticks([])
    axes[i, 0].set_ylabel(label, fontsize=7, rotation=0, ha="right",
                          va="center")
  if title:
    fig.suptitle(title, fontsize=9)
  fig.tight_layout()
  fig.canvas.draw()
  image = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
  with io_utils.atomic_path(path) as tmp:
    fig.savefig(tmp, format="png")
  plt.close(fig)
  return image


def imagination_frames(real: Sequence[np.ndarray], imagined: np.ndarray,
                       first_actions: Sequence[int], jump: int,
                       action_names: Optional[Sequence[str]] = None
                       ) -> List[np.ndarray]:
  """`imagination_figure` as an animation: frame j shows, side by side,
  the real frame j model steps on (blank where unknown) and each rollout's
  j-th imagined frame (frame 0: the frame now in every cell), each cell
  captioned ('real', 'a=NAME' for a rollout with a fixed first action,
  'pi_r' otherwise) and the animation frame by its offset in env steps."""
  imagined = to_uint8(imagined)  # [K, tau, H, W, 3]
  num_rollouts, depth = imagined.shape[:2]
  real = [to_uint8(f) for f in list(real)[:depth + 1]]
  now = real[0]
  labels = ["real"] + [
      "a=" + action_label(first_actions[k], action_names)
      if first_actions[k] >= 0 else "pi_r" for k in range(num_rollouts)]
  out = []
  for j in range(depth + 1):
    cells = [real[j] if j < len(real) else np.full_like(now, 255)]
    cells += [now if j == 0 else imagined[k, j - 1]
              for k in range(num_rollouts)]
    cells = [caption(upscale(c), label) for c, label in zip(cells, labels)]
    out.append(caption(grid([np.stack(cells)]),
                       "now" if j == 0 else f"+{j * jump} env steps"))
  return out
