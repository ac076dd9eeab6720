r"""Plug an exported environment model into an agent of your own.

  python examples/custom_agent.py [--export=exports/minipacman_avoid/dssm_det]
      [--episodes=5] [--horizon=3] [--max_steps=1000] [--seed=0]

"Other agents import the same models": this agent knows nothing of the
I2A. It is a few lines of model-predictive control on the `envmodels`
contract alone. Every real step it
  1. encodes its last k frames once (`initial_state`),
  2. copies that state for each of the A actions (`tile_state`),
  3. imagines `horizon` model steps per copy in one batched call (`rollout`:
     the first action fixed, then repeated), and
  4. takes the action whose imagined rewards sum highest (ties broken at
     random).
It then compares its returns with the uniform random policy's on the same
episode seeds. It only plans over the model's predicted rewards, so it is
as good as the model's reward predictions. The I2A learns what to read from
the rollouts instead.
"""

from __future__ import annotations

import argparse
import collections
from typing import Callable, List

import numpy as np
import tensorflow as tf

import envmodels
from i2a import environments


class ModelPredictiveAgent:
  """Greedy lookahead over an exported envmodel's predicted rewards."""

  def __init__(self, model: envmodels.EnvModel, horizon: int, seed: int):
    self.model = model
    self.horizon = horizon
    self.rng = np.random.default_rng(seed)
    spec = model.spec
    num_actions = spec.num_actions
    # [A, horizon, c]: action a at every primitive step of the lookahead.
    plans = np.broadcast_to(np.arange(num_actions)[:, None, None],
                            (num_actions, horizon, spec.jump))
    self._plans = tf.constant(plans, tf.int32)

    @tf.function
    def imagined_returns(context: tf.Tensor) -> tf.Tensor:
      """context uint8 [1, k, H, W, C] -> the sum of the imagined rewards of
      each plan, float32 [A]."""
      state = model.tile_state(model.initial_state(context), num_actions)
      rollout = model.rollout(state, self._plans)
      return tf.reduce_sum(rollout.rewards, axis=1)

    self._imagined_returns = imagined_returns

  def act(self, frames: List[np.ndarray]) -> int:
    values = self._imagined_returns(tf.constant(np.stack(frames)[None]))
    values = values.numpy()
    best = np.flatnonzero(values >= values.max() - 1e-6)
    return int(self.rng.choice(best))


def play(protocol: environments.Protocol, choose: Callable, k: int,
         seed: int, max_steps: int) -> float:
  """One episode's return; `choose(last k frames) -> action`."""
  env = environments.make_env(protocol)
  try:
    observation, _ = env.reset(seed=seed)
    frames = collections.deque([observation] * k, maxlen=k)
    total = 0.0
    for _ in range(max_steps):
      observation, reward, terminated, truncated, _ = env.step(
          choose(list(frames)))
      frames.append(observation)
      total += float(reward)
      if terminated or truncated:
        break
  finally:
    env.close()
  return total


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--export", default="exports/minipacman_avoid/dssm_det")
  parser.add_argument("--episodes", type=int, default=5)
  parser.add_argument("--horizon", type=int, default=3)
  parser.add_argument("--max_steps", type=int, default=1000)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()

  model = envmodels.load(args.export)
  spec = model.spec
  if spec.jump != 1:
    raise SystemExit(f"{args.export} is a jumpy model (c={spec.jump}); this "
                     "example steps the game one action at a time.")
  recorded = envmodels.provenance(args.export).get("protocol")
  if recorded is None:
    raise SystemExit(f"{args.export} records no protocol; use an export "
                     "written by python -m i2a.pretrain.")
  protocol = environments.Protocol.from_json(recorded)
  agent = ModelPredictiveAgent(model, args.horizon, args.seed)
  rng = np.random.default_rng(args.seed)
  seeds = [args.seed + 1000 + i for i in range(args.episodes)]
  k = spec.context_length
  planned = [play(protocol, agent.act, k, s, args.max_steps) for s in seeds]
  random = [play(protocol, lambda _: int(rng.integers(spec.num_actions)), k,
                 s, args.max_steps) for s in seeds]
  print(f"{spec.kind} lookahead (horizon {args.horizon}) on "
        f"{protocol.env_id}, {args.episodes} episodes (seeds {seeds[0]}..):")
  print(f"  model-predictive agent: mean return {np.mean(planned):.2f} "
        f"(per episode {', '.join(f'{r:.1f}' for r in planned)})")
  print(f"  uniform random policy:  mean return {np.mean(random):.2f} "
        f"(per episode {', '.join(f'{r:.1f}' for r in random)})")


if __name__ == "__main__":
  main()
