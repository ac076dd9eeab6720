"""The paper's Table 1: held-out likelihood and rollout speed of envmodels.

For each exported model (Buesing et al. 2018, Table 1):
  * the held-out log-likelihood per predicted frame in nats (the ELBO bound
    for latent models), averaged over a fixed set of test windows, and its
    improvement over the VAE baseline (when one is among the models);
  * the open-loop prediction error: the mean squared error per pixel of
    frames rendered T model steps ahead from the context frames and the
    true actions, against the copy-last-frame baseline (the last context
    frame as the prediction of every future frame) on the same windows,
    over all pixels and over the moving pixels alone (`moving_pixels`: where
    a frame differs from its window's per-pixel median, i.e. the sprites,
    the score and eaten pellets, which a per-frame MSE dominated by the
    static maze hides), where a second reference is the static background
    (that median frame, which has no moving objects: a model that leaves
    them out errs as much);
  * the action effect (`action_effect`): how much the frames rendered open
    loop change when the same windows are rolled out with uniformly random
    actions instead of the recorded ones, with the same random draws. A
    model whose frames do not change has learned to ignore the actions
    (an action-free model ignores them by construction): its imagined
    futures are the same whatever an agent would do, which an I2A reading
    them, or a planner, cannot use;
  * a picture per model (`open_loop_<n>.png` beside the table): for the
    first two of the held-out windows the errors above average over, the
    context and true frames, the open-loop prediction and its error;
  * the rollout computation time relative to AR (when AR is among the
    models), measured in the same run: each model rolls out the same number
    of primitive steps (a jumpy model takes horizon / c model steps) for the
    same batch, inside tf.function, without rendering unless the model must
    render to step (AR, RAR), timed round-robin across the models so a
    changing load on the machine affects them alike; plus imagined
    transitions per second.
The comparison is only meaningful for models of one protocol and dataset;
models whose observation shape differs from the dataset's are refused.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

import envmodels
from envmodels import precision
from i2a import io_utils, pictures
from i2a.replay import datasets, files

KIND_LABELS = {"vae": "VAE baseline", "ar": "AR", "rar": "RAR",
               "dssm_det": "dSSM-DET", "dssm_vae": "dSSM-VAE",
               "sssm": "sSSM"}


@dataclasses.dataclass
class ModelRow:
  label: str
  export: str
  kind: str
  jump: int
  log_likelihood_per_frame: float
  improvement_over_vae: Optional[float]
  rollout_seconds: float
  relative_rollout_time: Optional[float]
  imagined_transitions_per_s: float
  parameters: int
  # Open-loop MSE per pixel (frames in [0, 1]) at each of the T model steps
  # ahead, and the copy-last-frame baseline's on the same windows.
  open_loop_mse: Optional[List[float]] = None
  copy_last_frame_mse: Optional[List[float]] = None
  # The same on the moving pixels only (`moving_pixels`), and the static
  # background's there; None at a step where no held-out window has any.
  open_loop_moving_mse: Optional[List[Optional[float]]] = None
  copy_last_frame_moving_mse: Optional[List[Optional[float]]] = None
  background_moving_mse: Optional[List[Optional[float]]] = None
  # `action_effect` at each of the T model steps: the mean squared
  # difference per pixel between the frames under the recorded and under
  # random actions, and how many pixels per frame differ by more than
  # MOVING_THRESHOLD in some channel.
  action_effect_mse: Optional[List[float]] = None
  action_changed_pixels: Optional[List[float]] = None
  # The open-loop picture's file name in the report's directory, and the
  # picture itself until write_report writes it (not in the JSON).
  open_loop_picture: Optional[str] = None
  open_loop_example: Optional[np.ndarray] = dataclasses.field(
      default=None, repr=False, compare=False)


def model_label(spec: envmodels.EnvModelSpec) -> str:
  label = KIND_LABELS.get(spec.kind, spec.kind)
  if spec.action_free:
    label += " (action-free)"
  if spec.jump > 1:
    label = f"jumpy {label} (c={spec.jump})"
  return label


def held_out_log_likelihood(model: envmodels.EnvModel, test_dir: str, T: int,
                            num_windows: int, batch_size: int) -> float:
  """Mean log_likelihood_per_frame over a fixed set of test windows."""
  spec = model.spec
  sampler = datasets.window_sampler(test_dir, spec.context_length + T,
                                    spec.jump)
  loss = tf.function(lambda batch: model.loss(batch).metrics)
  model.reseed(0)
  total, count = 0.0, 0
  for batch in datasets.evaluation_batches(sampler, batch_size, num_windows):
    size = int(batch["reward"].shape[0])
    total += float(loss(batch)["log_likelihood_per_frame"]) * size
    count += size
  return total / count


# A pixel moves where some channel of its frame is this far (frames in
# [0, 1]) from the window's per-pixel median.
MOVING_THRESHOLD = 0.1


def moving_pixels(frames: np.ndarray, threshold: float = MOVING_THRESHOLD,
                  background: Optional[np.ndarray] = None) -> np.ndarray:
  """frames [B, n, H, W, C] in [0, 1], n frames of a window -> bool
  [B, n, H, W]: where a frame differs from the window's per-pixel median
  (its static background; `background` if the caller has computed it) by
  more than `threshold` in some channel.

  On Atari these are the moving sprites, the score digits and eaten
  pellets: the pixels a model must get right to show the dynamics, a
  small fraction of the frame.
  """
  if background is None:
    background = static_background(frames)
  return np.max(np.abs(frames - background), axis=-1) > threshold


def static_background(frames: np.ndarray) -> np.ndarray:
  """frames [B, n, H, W, C] -> [B, 1, H, W, C]: each window's per-pixel
  median over its n frames (what does not move)."""
  return np.median(frames, axis=1, keepdims=True)


@dataclasses.dataclass
class OpenLoopError:
  """Held-out open-loop MSE per model step ahead (t = 1..T), frames in
  [0, 1], and the copy-last-frame baseline's on the same windows; and both
  over the moving pixels alone (`moving_pixels`; None at a step with none),
  with the static background's there (the window's per-pixel median frame:
  what a prediction without the moving objects errs)."""
  model: List[float]
  copy_last_frame: List[float]
  model_moving: List[Optional[float]]
  copy_last_frame_moving: List[Optional[float]]
  background_moving: List[Optional[float]]
  # The first windows' frames [n, k + T, H, W, C] and open-loop
  # predictions [n, T, H, W, C], in [0, 1] (`example_image`).
  example_frames: Optional[np.ndarray] = None
  example_prediction: Optional[np.ndarray] = None

  @property
  def beats_copy(self) -> bool:
    """Whether the prediction T steps ahead has the lower error."""
    return self.model[-1] < self.copy_last_frame[-1]


def open_loop_error(model: envmodels.EnvModel, test_dir: str, T: int,
                    num_windows: int, batch_size: int,
                    examples: int = 2) -> OpenLoopError:
  """Open-loop prediction error T model steps ahead against copying the
  last context frame, over a fixed set of test windows.

  The model starts from the window's context frames and rolls out the
  true actions open loop (`EnvModel.diagnostics`' 'open_loop': the rendered
  mean frames, no teacher forcing); a jumpy model's step t is c * t
  primitive steps ahead. The copy-last-frame baseline predicts every future
  frame to be the last context frame: on Atari, where most pixels are a
  static background, it is the bar a model must clear before its
  predictions say anything about the dynamics. The moving pixels' errors
  are summed over all windows before dividing by their count (a window
  without moving pixels at a step adds nothing to it). The first
  `examples` windows' frames and predictions are kept for a picture.
  """
  spec = model.spec
  k = spec.context_length
  sampler = datasets.window_sampler(test_dir, k + T, spec.jump)
  diagnostics = tf.function(model.diagnostics)
  model.reseed(0)
  model_sq = np.zeros(T)
  copy_sq = np.zeros(T)
  model_moving_sq = np.zeros(T)
  copy_moving_sq = np.zeros(T)
  background_moving_sq = np.zeros(T)
  moving_count = np.zeros(T)
  count = 0
  kept_frames, kept_prediction = [], []
  for batch in datasets.evaluation_batches(sampler, batch_size, num_windows):
    frames = batch["observation"].numpy().astype(np.float32) / 255.0
    truth = frames[:, k:]  # [B, T, H, W, C]
    copy = frames[:, k - 1:k]  # [B, 1, H, W, C]
    predicted = diagnostics(batch)["open_loop"].numpy()  # [B, T, H, W, C]
    wanted = examples - sum(len(f) for f in kept_frames)
    if wanted > 0:
      kept_frames.append(frames[:wanted])
      kept_prediction.append(predicted[:wanted])
    model_err = np.mean((predicted - truth) ** 2, axis=-1)  # [B, T, H, W]
    copy_err = np.mean((copy - truth) ** 2, axis=-1)
    background = static_background(frames)  # [B, 1, H, W, C]
    background_err = np.mean((background - truth) ** 2, axis=-1)
    moving = moving_pixels(frames, background=background)[:, k:]  # [B,T,H,W]
    model_sq += model_err.mean(axis=(2, 3)).sum(0)
    copy_sq += copy_err.mean(axis=(2, 3)).sum(0)
    model_moving_sq += np.where(moving, model_err, 0.0).sum(axis=(0, 2, 3))
    copy_moving_sq += np.where(moving, copy_err, 0.0).sum(axis=(0, 2, 3))
    background_moving_sq += np.where(moving, background_err, 0.0).sum(
        axis=(0, 2, 3))
    moving_count += moving.sum(axis=(0, 2, 3))
    count += truth.shape[0]

  def per_moving_pixel(sq: np.ndarray) -> List[Optional[float]]:
    return [float(s / n) if n else None for s, n in zip(sq, moving_count)]

  return OpenLoopError(model=list(model_sq / count),
                       copy_last_frame=list(copy_sq / count),
                       model_moving=per_moving_pixel(model_moving_sq),
                       copy_last_frame_moving=per_moving_pixel(copy_moving_sq),
                       background_moving=per_moving_pixel(background_moving_sq),
                       example_frames=(np.concatenate(kept_frames)
                                       if kept_frames else None),
                       example_prediction=(np.concatenate(kept_prediction)
                                           if kept_prediction else None))


def example_image(error: OpenLoopError, context_length: int
                  ) -> Optional[np.ndarray]:
  """uint8 [H', W', 3]: per kept window, its context and true frames, the
  open-loop prediction (the context frames again before it) and the
  error, one strip under another (pictures.prediction_strip)."""
  if error.example_frames is None or not len(error.example_frames):
    return None
  strips = [pictures.prediction_strip(frames[context_length:], predicted,
                                      context=frames[:context_length])
            for frames, predicted in zip(error.example_frames,
                                         error.example_prediction)]
  gap = np.full((4,) + strips[0].shape[1:], 255, np.uint8)
  return np.concatenate(
      [part for strip in strips for part in (strip, gap)][:-1])


@dataclasses.dataclass
class ActionEffect:
  """Per model step ahead (t = 1..T): how the open-loop frames of held-out
  windows change when the recorded actions are replaced by uniformly
  random ones. mse: the squared difference per pixel (frames in [0, 1]),
  averaged over windows and pixels; changed_pixels: the pixels per frame
  that differ by more than MOVING_THRESHOLD in some channel."""
  mse: List[float]
  changed_pixels: List[float]


def action_effect(model: envmodels.EnvModel, test_dir: str, T: int,
                  num_windows: int, batch_size: int,
                  seed: int = 0) -> ActionEffect:
  """How much the model's open-loop frames depend on its actions.

  Each held-out window is rolled out T model steps from its context frames
  twice, with its recorded actions and with uniformly random ones (drawn
  from `seed`), the model's generator reseeded before each of the two so
  that a stochastic model draws the same latent noise both times: what
  differs is what the actions did. Zero for an action-free model and for
  the VAE baseline, which ignore actions; near zero for a model that has
  learned to ignore them (on Atari, one that predicts the agent's sprite
  from the context frames' motion alone, or blurs it).
  """
  spec = model.spec
  k = spec.context_length
  sampler = datasets.window_sampler(test_dir, k + T, spec.jump)
  rng = np.random.default_rng(seed)

  @tf.function
  def frames(context, actions):
    return model.rollout(model.initial_state(context), actions,
                         render=True).frames  # [B, T, H, W, C]

  sq, changed = np.zeros(T), np.zeros(T)
  count = 0
  for i, batch in enumerate(datasets.evaluation_batches(
      sampler, batch_size, num_windows)):
    context = batch["observation"][:, :k]
    recorded = batch["action"][:, k - 1:k - 1 + T]  # [B, T, c]
    random = tf.constant(rng.integers(0, spec.num_actions,
                                      tuple(recorded.shape)),
                         tf.int32)
    model.reseed(seed + i)
    with_recorded = frames(context, recorded).numpy()
    model.reseed(seed + i)
    with_random = frames(context, random).numpy()
    difference = with_recorded - with_random  # [B, T, H, W, C]
    sq += np.mean(difference ** 2, axis=(2, 3, 4)).sum(0)
    changed += np.sum(np.max(np.abs(difference), axis=-1) > MOVING_THRESHOLD,
                      axis=(2, 3)).sum(0)
    count += difference.shape[0]
  return ActionEffect(mse=list(sq / count),
                      changed_pixels=list(changed / count))


def rollout_function(model: envmodels.EnvModel, horizon: int,
                     batch_size: int) -> Callable[[], None]:
  """A warmed-up callable that rolls out `horizon` primitive steps once."""
  spec = model.spec
  steps = max(1, horizon // spec.jump)
  rng = np.random.default_rng(0)
  context = tf.constant(rng.integers(
      0, 256, (batch_size, spec.context_length, *spec.observation_shape)),
                        tf.uint8)
  actions = tf.constant(rng.integers(0, spec.num_actions,
                                     (batch_size, steps, spec.jump)), tf.int32)

  @tf.function
  def rollout(context, actions):
    state = model.initial_state(context)
    out = model.rollout(state, actions)
    return out.features, out.rewards

  def run() -> None:
    tf.nest.map_structure(lambda t: t.numpy(), rollout(context, actions))

  run()  # trace and warm up
  return run


def rollout_seconds(models: Sequence[envmodels.EnvModel], horizon: int,
                    batch_size: int, repeats: int = 10) -> List[float]:
  """Median wall time of one rollout per model, timed round-robin.

  Interleaving the models makes the ratios robust to load that changes
  during the measurement (other processes on a shared machine).
  """
  functions = [rollout_function(m, horizon, batch_size) for m in models]
  times: List[List[float]] = [[] for _ in models]
  for _ in range(repeats):
    for run, samples in zip(functions, times):
      start = time.perf_counter()
      run()
      samples.append(time.perf_counter() - start)
  return [float(np.median(t)) for t in times]


def evaluate(exports: Sequence[str], data_dir: str, T: int = 10,
             num_windows: int = 256, batch_size: int = 16, horizon: int = 12,
             rollout_batch: int = 32) -> List[ModelRow]:
  test_dir = files.split_path(data_dir, "test")
  manifest = files.read_manifest(test_dir)
  shape = tuple(manifest["observation_shape"])
  models = []
  for export in exports:
    model = envmodels.load(export)
    if tuple(model.spec.observation_shape) != shape:
      raise ValueError(
          f"{export} models frames of shape {model.spec.observation_shape}, "
          f"the dataset {data_dir} holds {shape}: evaluate models on the "
          "data (protocol) they were trained for.")
    models.append(model)
  print(f"timing rollouts of {horizon} primitive steps, batch "
        f"{rollout_batch}", flush=True)
  seconds = rollout_seconds(models, horizon, rollout_batch)
  rows = []
  for export, model, elapsed in zip(exports, models, seconds):
    spec = model.spec
    print(f"evaluating {model_label(spec)} ({export})", flush=True)
    ll = held_out_log_likelihood(model, test_dir, T, num_windows, batch_size)
    error = open_loop_error(model, test_dir, T, num_windows, batch_size)
    effect = action_effect(model, test_dir, T, num_windows, batch_size)
    steps = max(1, horizon // spec.jump)
    rows.append(ModelRow(
        label=model_label(spec), export=os.path.abspath(export),
        kind=spec.kind, jump=spec.jump, log_likelihood_per_frame=ll,
        improvement_over_vae=None, rollout_seconds=elapsed,
        relative_rollout_time=None,
        imagined_transitions_per_s=rollout_batch * steps / elapsed,
        parameters=int(sum(np.prod(v.shape) for v in model.variables
                           if v.dtype.is_floating)),
        open_loop_mse=error.model,
        copy_last_frame_mse=error.copy_last_frame,
        open_loop_moving_mse=error.model_moving,
        copy_last_frame_moving_mse=error.copy_last_frame_moving,
        background_moving_mse=error.background_moving,
        action_effect_mse=effect.mse,
        action_changed_pixels=effect.changed_pixels,
        open_loop_example=example_image(error, spec.context_length)))
  vae = next((r for r in rows if r.kind == "vae"), None)
  ar = next((r for r in rows if r.kind == "ar" and r.jump == 1), None)
  for row in rows:
    if vae is not None and vae.jump == row.jump:
      row.improvement_over_vae = row.log_likelihood_per_frame - (
          vae.log_likelihood_per_frame)
    if ar is not None:
      row.relative_rollout_time = row.rollout_seconds / ar.rollout_seconds
  labels = [r.label for r in rows]
  for row in rows:  # Disambiguate repeated labels by their directory.
    if labels.count(row.label) > 1:
      row.label += f" [{os.path.basename(os.path.dirname(row.export))}]"
  return rows


def _fmt(value: Optional[float], spec: str) -> str:
  return "n/a" if value is None else format(value, spec)


def markdown(rows: Sequence[ModelRow], horizon: int, rollout_batch: int) -> str:
  lines = [
      "| model | held-out log-likelihood (nats/frame) | improvement over "
      "VAE baseline | open-loop MSE, last step | copy-last-frame MSE | "
      "moving pixels, last step: model / copy / static background | "
      "action effect, last step: MSE / changed pixels | "
      "rollout time relative to AR | imagined transitions/s | parameters |",
      "|---|---|---|---|---|---|---|---|---|---|"]

  def last(values: Optional[List[Optional[float]]]) -> Optional[float]:
    return values[-1] if values else None

  for r in rows:
    lines.append(
        f"| {r.label} | {r.log_likelihood_per_frame:.1f} | "
        f"{_fmt(r.improvement_over_vae, '+.1f')} | "
        f"{_fmt(last(r.open_loop_mse), '.5f')} | "
        f"{_fmt(last(r.copy_last_frame_mse), '.5f')} | "
        f"{_fmt(last(r.open_loop_moving_mse), '.4f')} / "
        f"{_fmt(last(r.copy_last_frame_moving_mse), '.4f')} / "
        f"{_fmt(last(r.background_moving_mse), '.4f')} | "
        f"{_fmt(last(r.action_effect_mse), '.2e')} / "
        f"{_fmt(last(r.action_changed_pixels), '.1f')} | "
        f"{_fmt(r.relative_rollout_time, '.3f')} | "
        f"{r.imagined_transitions_per_s:,.0f} | {r.parameters:,} |")
  steps = len(rows[0].open_loop_mse) if rows and rows[0].open_loop_mse else 0
  lines.append("")
  lines.append(f"Open-loop MSE: per pixel, frames in [0, 1], {steps} model "
               "steps ahead of the context frames (a jumpy model's step is "
               "c primitive steps), the true actions, the same held-out "
               "windows for the model and the copy-last-frame baseline "
               "(the last context frame predicts every future frame); "
               "moving pixels: the same error over the pixels where a "
               "frame differs from its window's per-pixel median by more "
               f"than {MOVING_THRESHOLD} in some channel (sprites, score, "
               "eaten pellets), against copying and against that median "
               "frame, the static background without them. Action effect: "
               "the same windows rolled out with uniformly random actions "
               "instead of the recorded ones (the same latent draws): the "
               "squared difference per pixel between the two predictions, "
               "and the pixels per frame that differ by more than "
               f"{MOVING_THRESHOLD} (0 / 0: the frames do not depend on the "
               "actions). "
               f"Rollout time: {horizon} primitive steps for a batch of "
               f"{rollout_batch} (jumpy models take {horizon}/c model "
               "steps), median of 10 timed round-robin across the models, in "
               "one run. Improvement over the VAE "
               "baseline is compared only between models of the same jump.")
  drawn = [f"`{r.open_loop_picture}` ({r.label})" for r in rows
           if r.open_loop_picture]
  if drawn:
    lines.append("")
    lines.append("Open-loop pictures (the first held-out windows: context "
                 "and true frames, the prediction, its error): " +
                 ", ".join(drawn) + ".")
  return "\n".join(lines) + "\n"


def write_report(rows: Sequence[ModelRow], output_dir: str, horizon: int,
                 rollout_batch: int, data_dir: str) -> Dict[str, str]:
  output_dir = io_utils.ensure_writable_dir(output_dir, "output directory")
  for index, row in enumerate(rows):
    if row.open_loop_example is not None:
      row.open_loop_picture = f"open_loop_{index}.png"
      pictures.save_png(os.path.join(output_dir, row.open_loop_picture),
                        pictures.caption(row.open_loop_example,
                                         f"{row.label}: truth, open-loop "
                                         "prediction, error"))
  table = markdown(rows, horizon, rollout_batch)
  md_path = os.path.join(output_dir, "model_table.md")
  json_path = os.path.join(output_dir, "model_table.json")
  io_utils.atomic_write_text(md_path, table)
  io_utils.atomic_write_json(json_path, dict(
      data=os.path.abspath(data_dir), horizon=horizon,
      rollout_batch=rollout_batch, precision=precision.current(),
      threads=precision.threads_record(),
      models=[{key: value for key, value in dataclasses.asdict(r).items()
               if key != "open_loop_example"} for r in rows]))
  return {"markdown": md_path, "json": json_path, "table": table}
