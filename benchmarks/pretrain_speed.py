"""Pretraining speed per precision, and what reduced precision costs in nats.

Speed: the `small` preset's model (MsPacman 104x80, paper sizes, 13x10x64
states, T = 10 after 3 context frames, jump 3) trained on fixed random
batches of `--batch_size` windows: Adam steps/s of the real train step
(`model.loss`, global-norm clipping, Adam; one tf.function), each precision
timed round-robin in one run (median of `--rounds`), optionally also with
XLA (`--xla`) and with each way of applying Adam's update (`--updates`:
`fused`, `envmodels.optimization.apply_updates` as pretraining runs it;
`sonnet`, Sonnet's `optimizer.apply`) and each way of computing the
frames' likelihood (`--likelihood`: `blocks`, as the losses compute it, in
the decoder's blocks with one XLA kernel each way,
`losses.bernoulli_frame_log_prob`; `frames`, the way before: the decoder's
full-resolution output and TensorFlow's per-pixel ops, the loss's calls
swapped for those while it is traced).

Accuracy (`--accuracy_steps` > 0): the same MiniPacman pretraining twice,
from the same initialisation and batches, in fp32 and in the reduced
precision, through `i2a.run.pretrain.Pretrainer` on a dataset collected
here (uniform random policy), and the held-out nats per frame of both at
equal steps (the aim: within 2%).

  python benchmarks/pretrain_speed.py [--kinds dssm_det,sssm]
      [--batch_size 8] [--rounds 5] [--accuracy_steps 1000] [--xla]
      [--updates fused,sonnet] [--likelihood blocks,frames]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import tempfile
import time
from typing import Any, Dict, List, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

# pylint: disable=wrong-import-position
import numpy as np
import sonnet as snt
import tensorflow as tf

import envmodels
from envmodels import losses, networks, optimization
from envmodels import precision
from i2a import io_utils
from i2a.run import pretrain as pretraining

RESULTS = os.path.join(HERE, "results")
FRAME = (104, 80, 3)


UPDATES = ("fused", "sonnet")
LIKELIHOODS = ("blocks", "frames")


@contextlib.contextmanager
def frames_likelihood():
  """While a loss is traced: the decoder's blocks are whole frames, the
  targets are not rearranged, and the Bernoulli sum is TensorFlow's
  per-pixel ops (the loss as it was before the blocks and the XLA sum)."""
  saved = (networks.Decoder.blocks, networks.frame_blocks,
           losses.bernoulli_frame_log_prob)
  networks.Decoder.blocks = lambda self, x: networks.depth_to_space(
      saved[0](self, x), networks.Decoder.BLOCK)
  networks.frame_blocks = lambda frames: frames
  losses.bernoulli_frame_log_prob = lambda logits, targets: tf.reduce_sum(
      losses.bernoulli_log_prob(logits, targets), axis=[-3, -2, -1])
  try:
    yield
  finally:
    (networks.Decoder.blocks, networks.frame_blocks,
     losses.bernoulli_frame_log_prob) = saved


def train_step_fn(kind: str, batch_size: int, xla: bool,
                  updates: str = "fused", likelihood: str = "blocks"):
  config = importlib.import_module(f"configs.envmodels.{kind}").get_config(
      "small")
  spec = envmodels.EnvModelSpec(
      kind=config.kind, observation_shape=FRAME, num_actions=5,
      jump=config.jump, context_length=config.context_length)
  model = envmodels.build(spec, seed=0, **pretraining.model_hyperparameters(
      config, reward_scale=0.1))
  optimizer = snt.optimizers.Adam(config.learning_rate)
  length = config.context_length + config.T
  rng = np.random.RandomState(0)
  batch = {
      "observation": tf.constant(rng.randint(
          0, 256, (batch_size, length, *FRAME)), tf.uint8),
      "action": tf.constant(rng.randint(0, 5, (batch_size, length,
                                               config.jump)), tf.int32),
      "reward": tf.constant(10.0 * rng.randint(0, 3, (batch_size, length)),
                            tf.float32),
      "discount": tf.ones([batch_size, length], tf.float32),
  }
  knobs = config.loss.to_dict()

  def step(batch):
    with tf.GradientTape() as tape:
      out = model.loss(batch, **knobs)
    variables = model.trainable_variables
    gradients = tape.gradient(out.loss, variables)
    clipped, _ = tf.clip_by_global_norm(gradients, config.clip_norm)
    if updates == "fused":
      optimization.apply_updates(optimizer, clipped, variables)
    else:
      optimizer.apply(clipped, variables)
    return out.loss

  compiled = tf.function(step, jit_compile=xla)

  def call():
    with (frames_likelihood() if likelihood == "frames" else
          contextlib.nullcontext()):
      return compiled(batch).numpy()
  return call


def speed(kinds: List[str], precisions: List[str], batch_size: int,
          rounds: int, xla: bool,
          updates: Sequence[str] = UPDATES[:1],
          likelihoods: Sequence[str] = LIKELIHOODS[:1]
          ) -> List[Dict[str, Any]]:
  # A cell: kind, precision, XLA, updates, likelihood.
  cells = [(kind, p, jit, u, lik) for kind in kinds for p in precisions
           for jit in ((False, True) if xla else (False,)) for u in updates
           for lik in likelihoods]
  steps = {cell: train_step_fn(cell[0], batch_size, cell[2],
                               updates=cell[3], likelihood=cell[4])
           for cell in cells}
  for cell in cells:  # trace, optimise, first Adam slots
    with precision.scope(cell[1]):
      steps[cell]()
      steps[cell]()
  samples: Dict[Any, List[float]] = {cell: [] for cell in cells}
  for round_ in range(rounds):
    for cell in cells:
      with precision.scope(cell[1]):
        start = time.perf_counter()
        for _ in range(2):
          steps[cell]()
        samples[cell].append((time.perf_counter() - start) / 2)
    print(f"speed: round {round_ + 1}/{rounds}", flush=True)
  rows = []
  median = lambda cell: float(np.median(samples[cell]))
  for kind, p, jit, u, lik in cells:
    seconds = median((kind, p, jit, u, lik))
    rows.append(dict(
        kind=kind, precision=p, xla=jit, updates=u, likelihood=lik,
        steps_per_s=1.0 / seconds, seconds_per_step=seconds,
        speedup=median((kind, precisions[0], False, u, lik)) / seconds,
        speedup_over_first_variant=median(
            (kind, p, jit, updates[0], likelihoods[0])) / seconds))
  return rows


def accuracy(steps: int, reduced: str) -> Dict[str, Any]:
  """Held-out nats/frame of a MiniPacman dSSM-DET pretrained for `steps` in
  fp32 and in `reduced`, same seed and data."""
  from i2a.run import collect as collection  # pylint: disable=import-outside-toplevel
  from configs import collect as collect_config  # pylint: disable=import-outside-toplevel
  from configs.envmodels import dssm_det  # pylint: disable=import-outside-toplevel
  results: Dict[str, Any] = {}
  with tempfile.TemporaryDirectory() as tmpdir:
    collect = collect_config.get_config("minipacman")
    collect.train_steps, collect.test_steps = 20_000, 4_000
    collection.run(collect, os.path.join(tmpdir, "collect"))
    for p in ("fp32", reduced):
      config = dssm_det.get_config("minipacman")
      config.data = os.path.join(tmpdir, "collect", "dataset")
      config.precision = p
      config.train_steps = steps
      config.eval_every = steps
      config.image_every = 10 * steps
      config.checkpoint_every = steps
      start = time.perf_counter()
      held_out = pretraining.run(config, os.path.join(tmpdir, f"model_{p}"))
      results[p] = dict(
          held_out_nats_per_frame=float(held_out["log_likelihood_per_frame"]),
          minutes=(time.perf_counter() - start) / 60,
          held_out={k: float(v) for k, v in held_out.items()})
  exact = results["fp32"]["held_out_nats_per_frame"]
  results["relative_difference"] = abs(
      results[reduced]["held_out_nats_per_frame"] - exact) / abs(exact)
  return results


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--kinds", default="dssm_det,sssm")
  parser.add_argument("--precisions", default="")
  parser.add_argument("--batch_size", type=int, default=8)
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--xla", action="store_true")
  parser.add_argument("--updates", default="fused",
                      help=f"comma-separated, of {', '.join(UPDATES)}")
  parser.add_argument("--likelihood", default="blocks",
                      help=f"comma-separated, of {', '.join(LIKELIHOODS)}")
  parser.add_argument("--accuracy_steps", type=int, default=0)
  parser.add_argument("--output",
                      default=os.path.join(RESULTS, "pretrain_speed.json"))
  args = parser.parse_args()
  precisions = ([p for p in args.precisions.split(",") if p] or
                list(dict.fromkeys(["fp32", precision.resolve("auto")])))
  variants = {}
  for flag, known in (("updates", UPDATES), ("likelihood", LIKELIHOODS)):
    given = getattr(args, flag)
    variants[flag] = [v for v in given.split(",") if v]
    if not variants[flag] or set(variants[flag]) - set(known):
      parser.error(f"--{flag} takes a comma-separated list of "
                   f"{', '.join(known)}; given {given!r}")
  rows = speed([k for k in args.kinds.split(",") if k], precisions,
               args.batch_size, args.rounds, args.xla, variants["updates"],
               variants["likelihood"])
  first = f"{variants['updates'][0]}, {variants['likelihood'][0]}"
  lines = [f"| kind | precision | XLA | updates | likelihood | steps/s | "
           f"s/step | x fp32 | x ({first}) |",
           "|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['kind']} | {r['precision']} | {r['xla']} | "
                 f"{r['updates']} | {r['likelihood']} | "
                 f"{r['steps_per_s']:.2f} | {r['seconds_per_step']:.3f} | "
                 f"{r['speedup']:.2f} | "
                 f"{r['speedup_over_first_variant']:.2f} |")
  lines.append(f"\nMsPacman 104x80 `small` preset models, batch "
               f"{args.batch_size} windows of 3 + 10 frames, Adam; median of "
               f"{args.rounds} rounds timed round-robin.")
  report: Dict[str, Any] = dict(rows=rows, batch_size=args.batch_size,
                                load_average=os.getloadavg(),
                                command=" ".join(sys.argv))
  if args.accuracy_steps > 0 and len(precisions) > 1:
    report["accuracy"] = accuracy(args.accuracy_steps, precisions[-1])
    acc = report["accuracy"]
    lines.append(
        f"\nMiniPacman dSSM-DET, {args.accuracy_steps} steps: held-out "
        f"{acc['fp32']['held_out_nats_per_frame']:.3f} nats/frame in fp32, "
        f"{acc[precisions[-1]]['held_out_nats_per_frame']:.3f} in "
        f"{precisions[-1]} ({100 * acc['relative_difference']:.2f}% apart).")
  text = "\n".join(lines)
  print(text)
  io_utils.atomic_write_json(args.output, report)
  io_utils.atomic_write_text(os.path.splitext(args.output)[0] + ".md",
                             text + "\n")


if __name__ == "__main__":
  main()
