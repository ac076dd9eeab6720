r"""Load an exported environment model and roll it out next to the real game.

  python examples/rollout_export.py [--export=exports/minipacman_avoid/dssm_det]
      [--steps=10] [--seed=0] [--output=rollout_example]

Uses only the public pieces a user of the models needs: `envmodels.load`
(the frozen model), the export's provenance (the protocol of the data it
was trained on) and `i2a.environments.make_env` (the same game under that
protocol). It plays the game with uniform random actions, gives the model
the first context frames, rolls it out open loop on the actions the game
was played with, and writes
  OUTPUT/rollout.png   rows: the real frames, the model's, |error| (the
                       context frames lead each row)
  OUTPUT/rollout.gif   the same, one step per frame, captioned with the
                       actions by name
and prints the error per step next to the copy-last-frame baseline's.
"""

from __future__ import annotations

import argparse
import os
from typing import List, Tuple

import numpy as np
import tensorflow as tf

import envmodels
from i2a import environments, pictures


def play(protocol: environments.Protocol, steps: int, seed: int
         ) -> Tuple[np.ndarray, np.ndarray]:
  """Frames [steps + 1, H, W, C] uint8 and actions [steps] of uniform
  random play from a reset with `seed` (restarting if the episode ends)."""
  env = environments.make_env(protocol)
  rng = np.random.default_rng(seed)
  frames: List[np.ndarray] = []
  actions: List[int] = []
  try:
    observation, _ = env.reset(seed=seed)
    frames.append(observation)
    while len(actions) < steps:
      action = int(rng.integers(env.action_space.n))
      observation, _, terminated, truncated, _ = env.step(action)
      if terminated or truncated:  # start over: one unbroken sequence
        frames, actions = [], []
        observation, _ = env.reset(seed=int(rng.integers(2**31)))
        frames.append(observation)
        continue
      frames.append(observation)
      actions.append(action)
  finally:
    env.close()
  return np.stack(frames), np.asarray(actions, np.int32)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--export", default="exports/minipacman_avoid/dssm_det")
  parser.add_argument("--steps", type=int, default=10,
                      help="model steps to imagine after the context")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--output", default="rollout_example")
  args = parser.parse_args()

  model = envmodels.load(args.export)
  spec = model.spec
  recorded = envmodels.provenance(args.export).get("protocol")
  if recorded is None:
    raise SystemExit(
        f"{args.export} records no protocol (exported before provenance "
        "existed): this example needs it to build the game the model was "
        "trained on. Use an export written by python -m i2a.pretrain.")
  protocol = environments.Protocol.from_json(recorded)
  k, c = spec.context_length, spec.jump
  # The model sees every c-th frame; a model step is c primitive actions.
  frames, actions = play(protocol, (k - 1 + args.steps) * c, args.seed)
  seen = frames[::c]  # [k + steps, H, W, C]
  context, truth = seen[:k], seen[k:k + args.steps]
  model_actions = actions[(k - 1) * c:].reshape(1, args.steps, c)

  rollout = model.rollout(model.initial_state(tf.constant(context[None])),
                          tf.constant(model_actions), render=True)
  predicted = rollout.frames.numpy()[0]  # [steps, H, W, C] in [0, 1]
  truth01 = truth.astype(np.float32) / 255.0
  model_mse = np.mean((predicted - truth01) ** 2, axis=(1, 2, 3))
  copy_mse = np.mean((context[-1:].astype(np.float32) / 255.0 - truth01) ** 2,
                     axis=(1, 2, 3))

  os.makedirs(args.output, exist_ok=True)
  names = environments.action_names(protocol)
  pictures.save_png(os.path.join(args.output, "rollout.png"),
                    pictures.prediction_strip(truth, predicted, context))
  pictures.prediction_gif(os.path.join(args.output, "rollout.gif"), truth,
                          predicted, model_actions[0], names)
  print(f"{spec.kind} ({args.export}) on {protocol.env_id}, "
        f"{k} context frames, {args.steps} model steps of {c} action(s)")
  print("step  action(s)        model MSE  copy-last-frame MSE  "
        "predicted reward")
  for t in range(args.steps):
    label = "+".join(names[a] for a in model_actions[0, t])
    print(f"{t + 1:>4}  {label:<15}  {model_mse[t]:.5f}    {copy_mse[t]:.5f}"
          f"              {float(rollout.rewards[0, t]):+.3f}")
  print(f"wrote {os.path.join(args.output, 'rollout.png')} and rollout.gif")


if __name__ == "__main__":
  main()
