"""The `paper` preset's dataset for claim 1, collected by the `small`
preset's behaviour policy (benchmarks/xla_pretrain.py trains on it).

Where it sits: claim 1 at the `small` preset (configs/sweeps/table1_small.py)
trains its models on data of an A2C agent trained at that preset. At the
`paper` preset (200x160 frames) the same policy collects: an A2C at 200x160
trains at about 190 env steps/s on 2 cores, so a behaviour policy of its own
would cost hours, and the `small` agent's observation is an exact function
of the `paper` frame. The `small` protocol keeps native rows 0-208 and
halves them with a 2x2 box filter; the `paper` protocol keeps rows 0-200 at
full size; MsPacman's rows 200-209 are black in every frame (`check`), so
padding the `paper` frame with 8 black rows and halving it gives the very
observation the agent was trained on. Everything else of the two protocols
is equal (action set, repeat, sticky actions); `collect` refuses otherwise.

  python benchmarks/paper_data.py check [--steps 3000]
      steps a `paper` and a `small` MsPacman in lockstep (same seed and
      actions) and compares the adapted frames with the `small` ones
  python benchmarks/paper_data.py collect --policy RUN --output DIR
      [--train_steps 50000 --test_steps 5000 --epsilon 0.2]
      writes DIR/dataset (train and test splits, the project's format:
      `python -m i2a.pretrain --config.data=DIR/dataset` reads it too)
  python benchmarks/paper_data.py pack --data DIR/dataset --output FILE
      the dataset in one compact file for a machine without the project
      (packed_data.py): frames as indices into the dataset's palette (13
      colours), LZMA-compressed: 6 MiB for 55,000 frames
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)  # packed_data beside this file

# pylint: disable=wrong-import-position
import packed_data
from i2a import environments
from i2a.environments import Protocol
from i2a.replay import files
from i2a.run import collect

PAPER, SMALL = environments.preset("paper"), environments.preset("small")
# The protocol fields the adapter changes; every other one must agree.
GEOMETRY = ("crop", "observation_size", "resize")


def check_protocols(source: Protocol, target: Protocol) -> None:
  """ValueError unless `adapt` maps `source` frames to `target` ones."""
  others = {k: v for k, v in target.differences(source).items()
            if k not in GEOMETRY}
  if others:
    raise ValueError(f"the agent's protocol differs from the collection's "
                     f"beyond the frame geometry: {others}")
  if (source.crop != (0, 200, 0, 160) or target.crop != (0, 208, 0, 160) or
      tuple(source.observation_size) != (200, 160) or
      tuple(target.observation_size) != (104, 80) or target.resize != "area"
      or source.grayscale or target.grayscale):
    raise ValueError("the adapter maps the 'paper' protocol's frames to the "
                     f"'small' one's only; given {source} -> {target}")


def adapt(frames: np.ndarray) -> np.ndarray:
  """`paper` frames uint8 [N, 200, 160, 3] -> `small` ones [N, 104, 80, 3]:
  8 black rows below, then the `small` protocol's 2x2 box filter (PIL's
  `reduce`, as i2a/environments/wrappers.py applies it)."""
  padded = np.zeros((len(frames), 208, 160, 3), np.uint8)
  padded[:, :200] = frames
  return np.stack([np.asarray(Image.fromarray(f).reduce((2, 2)))
                   for f in padded])


class Adapted(collect.Policy):
  """A `small` agent's policy acting on `paper` frames (`adapt`). It is
  not given the live environments, so an agent that reads them (an I2A
  over the emulator oracle) is refused by its own `start`."""

  def __init__(self, policy: collect.Policy):
    self.policy = policy
    self.record = dict(policy.record, observed_through="small protocol: "
                       "paper frame padded with 8 black rows, 2x2 box filter")

  def start(self, observations, envs) -> None:
    self.policy.start(adapt(observations), None)

  def __call__(self, observations, rng):
    return self.policy(adapt(observations), rng)

  def observe(self, observations, new_episode) -> None:
    self.policy.observe(adapt(observations), new_episode)


def check(steps: int) -> Dict[str, Any]:
  """Lockstep `paper` and `small` envs: adapted frames equal `small` ones."""
  paper = environments.make_vector_env(PAPER, 1)
  small = environments.make_vector_env(SMALL, 1)
  rng = np.random.default_rng(0)
  a, _ = paper.reset(seed=7)
  b, _ = small.reset(seed=7)
  mismatched = 0
  for _ in range(steps):
    mismatched += int(not np.array_equal(adapt(a), b))
    actions = rng.integers(0, environments.num_actions(PAPER), 1)
    a = paper.step(actions)[0]
    b = small.step(actions)[0]
  paper.close()
  small.close()
  result = dict(steps=steps, mismatched_frames=mismatched)
  print(json.dumps(result))
  if mismatched:
    raise SystemExit(f"{mismatched} of {steps} adapted frames differ")
  return result


def collect_dataset(policy_run: str, output: str, train_steps: int,
                    test_steps: int, epsilon: float, num_envs: int) -> str:
  """OUTPUT/dataset at the `paper` protocol, acted by the `small` agent of
  `policy_run` through `adapt`, mixed with uniform actions (`epsilon`), on
  the seeds `python -m i2a.collect` uses (train 0.., test 1,000,000..); a
  split already collected is kept. Returns the dataset's path."""
  from i2a.run import evaluate  # pylint: disable=import-outside-toplevel
  config, protocol, checkpoint = evaluate.load_run(policy_run)
  check_protocols(PAPER, protocol)
  network, counters = evaluate.load_agent(config, protocol, checkpoint)
  agent = collect.AgentPolicy(network, dict(
      kind="checkpoint", run=os.path.abspath(policy_run),
      checkpoint=os.path.abspath(checkpoint),
      agent=str(config.get("agent", "")), actions="sampled", **counters))
  policy = collect.EpsilonMixed(Adapted(agent), epsilon,
                                environments.num_actions(PAPER))
  dataset = os.path.join(output, "dataset")
  for split, steps, seed in (("train", train_steps, 0),
                             ("test", test_steps, 1_000_000)):
    path = files.split_path(dataset, split)
    if os.path.exists(os.path.join(path, files.MANIFEST)):
      print(f"{split} split already collected: {path}")
      continue
    stats = collect.collect_split(
        PAPER, path, steps, num_envs, seed, policy,
        metadata=dict(split=split, protocol=PAPER.to_json(),
                      policy=policy.record, steps_requested=steps),
        progress_name=f"collect {split}")
    print(f"{split}: {stats}", flush=True)
  return dataset


def _codes(frames: np.ndarray) -> np.ndarray:
  """uint8 [..., 3] RGB -> int32 [...] codes r << 16 | g << 8 | b."""
  f = frames.astype(np.int32)
  return (f[..., 0] << 16) | (f[..., 1] << 8) | f[..., 2]


def pack(data: str, output: str) -> Dict[str, Any]:
  """Every episode of both splits in one file (`packed_data.write`): the
  frames as indices into one palette of the dataset's colours, uint8
  [N, 200, 160]; actions, rewards, discounts and episode lengths as the
  dataset holds them; the splits' manifests in the header."""
  splits = {s: files.load_episodes(files.split_path(data, s))
            for s in ("train", "test")}
  seen = np.zeros(1 << 24, bool)
  for episodes in splits.values():
    for e in episodes:
      seen[np.unique(_codes(e.observation))] = True
  codes = np.flatnonzero(seen)
  if len(codes) > 256:
    raise ValueError(f"{len(codes)} colours: more than a byte indexes")
  lookup = np.zeros(1 << 24, np.uint8)
  lookup[codes] = np.arange(len(codes))
  palette = np.stack([codes >> 16, (codes >> 8) & 255, codes & 255],
                     -1).astype(np.uint8)
  arrays: Dict[str, np.ndarray] = {"palette": palette}
  header: Dict[str, Any] = dict(protocol=PAPER.to_json(), splits={})
  for split, episodes in splits.items():
    arrays[f"{split}/frames"] = np.concatenate(
        [lookup[_codes(e.observation)] for e in episodes])
    for name in ("action", "reward", "discount"):
      arrays[f"{split}/{name}"] = np.concatenate(
          [getattr(e, name) for e in episodes])
    arrays[f"{split}/episode_length"] = np.array(
        [len(e.observation) for e in episodes], np.int64)
    header["splits"][split] = dict(
        episodes=len(episodes), frames=int(sum(len(e) for e in episodes)),
        manifest=files.read_manifest(files.split_path(data, split)))
  packed_data.write(output, header, arrays)
  print(f"packed {data} into {output}: {os.path.getsize(output) / 2**20:.1f} "
        f"MiB, {len(palette)} colours")
  return header


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  sub = parser.add_subparsers(dest="command", required=True)
  c = sub.add_parser("check")
  c.add_argument("--steps", type=int, default=3000)
  c = sub.add_parser("collect")
  c.add_argument("--policy", required=True, help="a `small` A2C's workdir")
  c.add_argument("--output", required=True)
  c.add_argument("--train_steps", type=int, default=50_000)
  c.add_argument("--test_steps", type=int, default=5_000)
  c.add_argument("--epsilon", type=float, default=0.2)
  c.add_argument("--num_envs", type=int, default=8)
  c = sub.add_parser("pack")
  c.add_argument("--data", required=True)
  c.add_argument("--output", required=True)
  args = parser.parse_args()
  if args.command == "check":
    check(args.steps)
  elif args.command == "collect":
    collect_dataset(args.policy, args.output, args.train_steps,
                    args.test_steps, args.epsilon, args.num_envs)
  else:
    pack(args.data, args.output)


if __name__ == "__main__":
  main()
