"""Pretraining an environment model: dataset -> loss -> optimizer -> export.

Data flow (README.md): the train split of a collected dataset is read by a
`WindowSampler` (jumpy windows of context_length + T steps) through its
memory-mapped window cache (i2a/replay/cache.py, built on first use: RAM
holds no frames, whatever the dataset's size), and batches gathered ahead by
background threads feed a tf.function train step on `model.loss`; the
held-out test split is evaluated periodically on a fixed set of windows.
The run writes TensorBoard summaries, metrics.csv / eval.csv, pictures
(PNG/GIF under images/), keeps the last N checkpoints (model, optimizer,
step) and resumes from the latest; at the end the model is exported frozen
to WORKDIR/export.

Before anything is written into the workdir, the reward coding is settled
(docs/envmodels.md, "Reward coding"): `config.model.reward_scale` 'auto' is
derived from the distinct reward targets of the training windows, a numeric
scale is checked against them, and a scale (or `reward_bits`) that cannot
code them all is refused with a ValueError. The scale used goes into the
model's hyperparameters (and so into the export) and into config.json as
`reward_coding.scale`.

The dataset's identity (files.dataset_fingerprint) is recorded in
WORKDIR/identity.json and, with its protocol, in the export's provenance
(spec.json): a resume with other data is refused before anything is
written (i2a/runs.py), and agents check the export's protocol against
theirs (i2a/run/exports.py, `check_export`).
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, Optional

import ml_collections
import numpy as np
import sonnet as snt
import tensorflow as tf
from absl import logging

import envmodels
from envmodels import optimization
from i2a import environments, io_utils, pictures, runs
from i2a.metrics import MetricsLog
from i2a.progress import Progress
from envmodels import reward_coding
from i2a.replay import datasets, files
from i2a.replay.episodes import WindowSampler

# Fields added to the pretraining configs since runs were first made, with
# the value that reproduces those runs (i2a/runs.py).
LEGACY_VALUES = {"precision": "fp32", "loss.free_nats_per": "step"}
# Skipped (non-finite) updates in a row that stop a pretraining run.
MAX_NONFINITE_UPDATES = 10
EXPORT = "export"
DONE = "pretrain_done.json"  # written after the export is complete
DATA_IDENTITY = "data"  # the dataset's name in identity.json and provenance


def dataset_protocol(data_dir: str) -> environments.Protocol:
  """The protocol a dataset was collected under (train and test must agree)."""
  if not data_dir:
    raise ValueError("config.data is empty: pass --config.data=DIR/dataset, "
                     "the dataset written by `python -m i2a.collect "
                     "--workdir=DIR`.")
  train = files.read_manifest(files.split_path(data_dir, "train"))
  test = files.read_manifest(files.split_path(data_dir, "test"))
  protocol = environments.Protocol.from_json(train["protocol"])
  if environments.Protocol.from_json(test["protocol"]) != protocol:
    raise files.DatasetError(f"{data_dir}: the train and test splits were "
                             "collected under different protocols.")
  return protocol


def model_spec(config: ml_collections.ConfigDict,
               protocol: environments.Protocol) -> envmodels.EnvModelSpec:
  return envmodels.EnvModelSpec(
      kind=config.kind, observation_shape=protocol.observation_shape,
      num_actions=environments.num_actions(protocol), jump=config.jump,
      context_length=config.context_length, action_free=config.action_free)


def model_hyperparameters(config: ml_collections.ConfigDict,
                          reward_scale: Optional[float] = None
                          ) -> Dict[str, Any]:
  """`config.model` as `envmodels.build` hyperparameters.

  Args:
    config: an envmodel config (configs/envmodels/common.py).
    reward_scale: the scale to build with, replacing
      config.model.reward_scale; required when that is 'auto', which only
      the data resolves (`resolve_reward_scale`). Models that are never
      trained (benchmarks timing random weights) may pass any positive scale.
  """
  hyperparameters = config.model.to_dict()
  if reward_scale is None:
    reward_scale = reward_coding.parse_scale(hyperparameters["reward_scale"])
    if reward_scale == reward_coding.AUTO:
      raise ValueError("config.model.reward_scale is 'auto': pass the scale "
                       "resolve_reward_scale derives from the training data.")
  hyperparameters["reward_scale"] = float(reward_scale)
  return hyperparameters


def resolve_reward_scale(config: ml_collections.ConfigDict,
                         train_windows: WindowSampler,
                         test_windows: Optional[WindowSampler] = None) -> float:
  """The reward scale to train with, derived ('auto') or checked.

  The rewards are the distinct reward targets of the training windows,
  reward[context_length:], i.e. sums over `config.jump` primitive steps:
  exactly what the reward head is trained on. Raises
  reward_coding.RewardCodingError (a ValueError) naming the rewards that do
  not round-trip, the scale and bits, and a scale/bits that code them all.
  Held-out rewards the chosen coding cannot represent only get a warning
  (their held-out reward_log_prob is against a neighbouring code).
  """
  k = config.context_length
  bits = config.model.reward_bits
  rewards = train_windows.distinct_rewards(k)
  what = (f"training rewards (the window targets reward[{k}:], sums over "
          f"jump={config.jump} primitive steps)")
  requested = reward_coding.parse_scale(config.model.reward_scale)
  scale = reward_coding.resolve_scale(rewards, requested, bits, what)
  how = ("derived from" if requested == reward_coding.AUTO
         else "checked against")
  line = (f"reward coding: reward_scale={scale:g} with reward_bits={bits}, "
          f"{how} the {len(rewards)} distinct training rewards "
          f"({rewards.min():g} to {rewards.max():g})")
  logging.info("%s: %s", line, rewards[:64].tolist())
  print(line, flush=True)
  if test_windows is not None:
    held_out = reward_coding.miscoded(test_windows.distinct_rewards(k), scale,
                                      bits)
    if held_out:
      shown = ", ".join(f"{m.reward:g} -> {m.decoded + 0.0:g}"
                        for m in held_out[:reward_coding.SHOWN])
      logging.warning("reward coding: %d held-out rewards the training "
                      "coding cannot represent (reward -> decoded): %s",
                      len(held_out), shown)
  return scale


def export_provenance(data: runs.Identity,
                      protocol: environments.Protocol) -> Dict[str, Any]:
  """What an export records it was trained on (spec.json "provenance")."""
  return {DATA_IDENTITY: data.to_json(), "protocol": protocol.to_json()}


class Pretrainer:
  """One pretraining run in `workdir` (resumes what is there)."""

  def __init__(self, config: ml_collections.ConfigDict, workdir: str):
    self.config = config
    self.protocol = dataset_protocol(config.data)
    self.data_identity = runs.Identity(
        what="dataset", fingerprint=files.dataset_fingerprint(config.data),
        path=os.path.abspath(config.data), flag="--config.data",
        aliases=(files.legacy_dataset_fingerprint(config.data),))
    runs.use_precision(config)
    length = config.context_length + config.T
    logging.info("loading dataset %s", config.data)
    self.train_windows = datasets.window_sampler(
        files.split_path(config.data, "train"), length, config.jump)
    self.test_windows = datasets.window_sampler(
        files.split_path(config.data, "test"), length, config.jump)
    # Settled before the workdir is touched: a coding that cannot represent
    # the training rewards is refused here.
    self.reward_scale = resolve_reward_scale(config, self.train_windows,
                                             self.test_windows)
    record = ml_collections.ConfigDict(dict(
        config.to_dict(), reward_coding=dict(scale=self.reward_scale)))
    # Budgets and logging cadence may change on resume; the model may not
    # (nor the reward scale that 'auto' derived).
    self.workdir = runs.prepare_workdir(
        workdir, record, self.protocol,
        ignore=("train_steps", "log_every", "eval_every", "image_every",
                "checkpoint_every", "keep_checkpoints", "eval_windows",
                "data"), legacy=LEGACY_VALUES,
        identity={DATA_IDENTITY: self.data_identity})
    self.spec = model_spec(config, self.protocol)
    self.model = envmodels.build(
        self.spec, seed=config.seed,
        **model_hyperparameters(config, self.reward_scale))
    self.optimizer = snt.optimizers.Adam(config.learning_rate)
    # Variables and Adam's slots exist before the first (guarded) update.
    self.model.create_variables()
    optimization.create_slots(self.optimizer,
                              self.model.trainable_variables)
    self._nonfinite_in_a_row = 0
    self._saved_step = 0  # the step of the newest checkpoint (restore)
    self.step = tf.Variable(0, dtype=tf.int64, name="step")
    self._checkpoint = tf.train.Checkpoint(model=self.model,
                                           optimizer=self.optimizer,
                                           step=self.step)
    self._manager = tf.train.CheckpointManager(
        self._checkpoint, os.path.join(self.workdir, "checkpoints"),
        max_to_keep=config.keep_checkpoints)
    self.log = MetricsLog(self.workdir)
    self.action_names = environments.action_names(self.protocol)
    self.images_dir = os.path.join(self.workdir, "images")
    self._train_step = tf.function(self._train_step_impl)
    self._eval_step = tf.function(self._eval_step_impl)
    self._diagnostics = tf.function(self.model.diagnostics)

  @property
  def export_dir(self) -> str:
    return os.path.join(self.workdir, EXPORT)

  def finished_step(self) -> Optional[int]:
    """The step whose export is complete, or None."""
    path = os.path.join(self.workdir, DONE)
    if not os.path.exists(path) or not os.path.exists(self.export_dir):
      return None
    return int(io_utils.read_json(path)["step"])

  # -- Steps -----------------------------------------------------------------

  def _train_step_impl(self, batch: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    with tf.GradientTape() as tape:
      out = self.model.loss(batch, **self.config.loss.to_dict())
    variables = self.model.trainable_variables
    gradients = tape.gradient(out.loss, variables)
    clipped, norm = tf.clip_by_global_norm(gradients, self.config.clip_norm)
    finite = optimization.apply_if_finite(self.optimizer, clipped, variables,
                                          out.loss, norm)
    self.step.assign_add(1)
    return dict(out.metrics, gradient_norm=norm,
                nonfinite_update=1.0 - tf.cast(finite, tf.float32))

  def _check_update(self, step: int, metrics: Dict[str, tf.Tensor]) -> None:
    """Counts a skipped (non-finite) update; MAX_NONFINITE_UPDATES in a row
    stop the run before anything non-finite is saved."""
    if not float(metrics["nonfinite_update"]):
      self._nonfinite_in_a_row = 0
      return
    self._nonfinite_in_a_row += 1
    logging.warning("pretraining step %d skipped: loss %s, gradient norm %s "
                    "(%d in a row)", step, float(metrics["loss"]),
                    float(metrics["gradient_norm"]), self._nonfinite_in_a_row)
    if self._nonfinite_in_a_row >= MAX_NONFINITE_UPDATES:
      raise FloatingPointError(
          f"{self._nonfinite_in_a_row} pretraining updates in a row had a "
          f"non-finite loss or gradient (the last at step {step}); none was "
          "applied, and the checkpoints and the export hold finite weights "
          "only. Lower --config.learning_rate and rerun: it resumes from the "
          "last checkpoint.")

  def _save(self, step: int) -> None:
    """Checkpoints `step` (once; never a non-finite model)."""
    if step and step != self._saved_step:
      optimization.check_finite(self.model.variables, "checkpoint")
      self._manager.save(checkpoint_number=step)
      self._saved_step = step

  def _eval_step_impl(self, batch: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    out = self.model.loss(batch, **self.config.loss.to_dict())
    return dict(out.metrics, batch_size=tf.shape(batch["reward"])[0])

  def evaluate(self) -> Dict[str, float]:
    """Held-out metrics, averaged over a fixed set of test windows."""
    totals: Dict[str, float] = {}
    count = 0
    for batch in datasets.evaluation_batches(
        self.test_windows, self.config.batch_size, self.config.eval_windows):
      metrics = self._eval_step(batch)
      size = int(metrics.pop("batch_size"))
      for key, value in metrics.items():
        totals[key] = totals.get(key, 0.0) + float(value) * size
      count += size
    return {k: v / count for k, v in totals.items()}

  def write_pictures(self, step: int) -> Dict[str, str]:
    """Open-loop / closed-loop / 1-step strips, a GIF (also TensorBoard's
    animated `animations/open_loop`, frames captioned with the actions by
    name) and a reward plot."""
    batch = next(iter(datasets.evaluation_batches(
        self.test_windows, self.config.batch_size, self.config.batch_size,
        seed=1)))
    out = {k: v.numpy() for k, v in self._diagnostics(batch).items()}
    k = self.config.context_length
    observation = batch["observation"].numpy()
    truth, context = observation[0, k:], observation[0, :k]
    written = {}
    for name in ("open_loop", "closed_loop", "one_step_prior"):
      strip = pictures.prediction_strip(truth, out[name][0],
                                        context if name == "open_loop" else None)
      path = os.path.join(self.images_dir, f"{name}_{step:07d}.png")
      pictures.save_png(path, strip)
      self.log.image(step, f"images/{name}", strip)
      written[name] = path
    # Predicted frame t (window index k + t) follows the actions of window
    # index k + t - 1 (i2a/replay/episodes.py `window`): [T, c].
    actions = batch["action"].numpy()[0, k - 1:-1]
    gif = os.path.join(self.images_dir, f"open_loop_{step:07d}.gif")
    frames = pictures.prediction_gif(gif, truth, out["open_loop"][0],
                                     actions, self.action_names)
    self.log.animation(
        step, "animations/open_loop", frames,
        description="truth | open-loop prediction | error, one frame per "
        "model step, captioned with the actions that led to it")
    scatter = os.path.join(self.images_dir, f"rewards_{step:07d}.png")
    pictures.reward_scatter(scatter, out["open_loop_reward"],
                            out["true_reward"],
                            title=f"open-loop rewards, step {step}")
    written.update(gif=gif, rewards=scatter)
    return written

  # -- The loop --------------------------------------------------------------

  def restore(self) -> int:
    """Restores the newest intact checkpoint (damaged newer ones, e.g. from
    a run killed while saving, are skipped with a warning); returns its
    step, 0 for a fresh run. Logs after that step are dropped."""
    candidates = list(reversed(self._manager.checkpoints))
    for path in candidates:
      damage = runs.checkpoint_damage(path)
      if damage is not None:
        logging.warning("checkpoint %s is damaged or incomplete (%s); trying "
                        "the one before it", path, damage)
        continue
      self._checkpoint.restore(path).assert_existing_objects_matched()
      logging.info("resumed from %s (step %d)", path, int(self.step))
      if path != candidates[0]:
        print(f"resumed from {path}: newer checkpoints were damaged",
              flush=True)
      break
    else:
      if candidates:
        raise ValueError(
            f"no intact checkpoint in {self._manager.directory} (tried "
            f"{candidates}); delete the workdir to start over.")
    self._saved_step = int(self.step)
    self.log.truncate_after(self._saved_step)
    return self._saved_step

  def train(self, should_stop: Callable[[], bool] = lambda: False
            ) -> Optional[Dict[str, float]]:
    """Trains to config.train_steps (resuming), evaluates, exports; returns
    the held-out metrics. `should_stop()` is read before each step: when it
    says stop, the steps so far are checkpointed and None is returned (a
    rerun resumes there)."""
    config = self.config
    finished = self.finished_step()
    if finished is not None and finished >= config.train_steps:
      print(f"pretraining already finished at step {finished}: "
            f"{self.export_dir}", flush=True)
      return io_utils.read_json(os.path.join(self.workdir, DONE))["held_out"]
    start = self.restore()
    # The data stream depends on the step it starts from: a resumed run sees
    # the same batches after its restore point on every rerun.
    batches = datasets.sampled_batches(self.train_windows, config.batch_size,
                                       seed=config.seed * 1_000_003 + start)
    progress = Progress(f"pretrain {config.kind}", config.train_steps,
                        "steps", initial=start)
    metrics: Dict[str, float] = {}
    step = start
    while step < config.train_steps:
      if should_stop():
        self._save(step)
        batches.close()
        self.log.flush()
        progress.close()
        return None
      metrics = self._train_step(next(batches))
      step = int(self.step)
      self._check_update(step, metrics)
      if step % config.log_every == 0 or step == config.train_steps:
        values = self.log.write(step, metrics)
        progress.update(step - progress.done, force=True,
                        loss=values["loss"],
                        nats=values["log_likelihood_per_frame"])
      if step % config.eval_every == 0 or step == config.train_steps:
        held_out = self.log.write(step, self.evaluate(), split="eval")
        logging.info("step %d held-out: %s", step, held_out)
      if step % config.image_every == 0 or step == config.train_steps:
        self.write_pictures(step)
      if step % config.checkpoint_every == 0 or step == config.train_steps:
        self._save(step)
    batches.close()
    self.log.flush()
    progress.close()
    held_out = self.evaluate()
    envmodels.export(self.model, self.export_dir,
                     provenance=export_provenance(self.data_identity,
                                                  self.protocol))
    io_utils.atomic_write_json(os.path.join(self.workdir, DONE),
                               dict(step=step, export=self.export_dir,
                                    held_out=held_out))
    print(f"exported {self.spec.kind} to {self.export_dir} "
          f"(held-out {held_out['log_likelihood_per_frame']:.1f} nats/frame)",
          flush=True)
    return held_out


def run(config: ml_collections.ConfigDict, workdir: str) -> Dict[str, float]:
  started = time.monotonic()
  result = Pretrainer(config, workdir).train()
  logging.info("pretraining took %.0fs", time.monotonic() - started)
  return result
