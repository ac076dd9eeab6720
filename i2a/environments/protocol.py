"""The environment protocol: every choice that changes what an agent sees.

A `Protocol` is saved as `protocol.json` with every run and dataset, so that
a model pretrained on one dataset is only ever plugged into agents that see
the same observations, actions and rewards. `make_env(protocol, seed)` is the
single place environments are built (ALE games and MiniPacman alike).

Presets (`PRESETS`): 'paper' is MsPacman near native resolution (200x160
RGB, crop keeps the score area, as in Buesing et al. 2018); 'small' is the
CPU preset (rows 0-208, which hold the maze, score and lives, halved to
104x80 by a 2x2 box filter); 'minipacman' is the I2A
paper's maze, padded from 15x19 to 16x24 so the size is a multiple of 8.

No preset max-pools the last two emulator frames of an action repeat
(`max_pool_frames`, the default of Dopamine's and gymnasium's
AtariPreprocessing, which hides sprites the Atari draws on alternate frames):
the models then predict the frame the emulator really shows, as in Buesing
et al. 2018, and protocols saved before the field existed keep their meaning
(a protocol.json without it loads as False).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, Optional, Tuple

ACTION_SETS = ("full", "minimal", "paper")
RESIZE_MODES = ("area", "nearest", "pad")
# The paper's 5-action MS_PACMAN set (Buesing et al. 2018, Sec. 4).
PAPER_ACTIONS = ("NOOP", "UP", "RIGHT", "LEFT", "DOWN")
MINIPACMAN_PREFIX = "MiniPacman-"
# The fields that change the transitions an environment model learns (what
# it sees, which actions, which rewards and ends): an export and an agent
# must agree on them. The others (noop_max, max_episode_frames) only change
# where episodes start and how long they may run.
MODEL_FIELDS = ("env_id", "action_repeat", "sticky_action_prob", "action_set",
                "life_loss_terminal", "clip_rewards", "crop",
                "observation_size", "resize", "grayscale", "max_pool_frames")


@dataclasses.dataclass(frozen=True)
class Protocol:
  """How an environment is stepped and observed.

  Attributes:
    env_id: a gymnasium id: any ALE game ('ALE/MsPacman-v5', 'ALE/Bowling-v5',
      ...) or a MiniPacman task ('MiniPacman-avoid-v0', ...).
    action_repeat: primitive frames per agent step (ALE frameskip).
    sticky_action_prob: probability of repeating the previous action per frame.
    action_set: 'full' (18 actions), 'minimal' (the game's own set) or 'paper'
      (NOOP, UP, RIGHT, LEFT, DOWN, for games whose minimal set has them).
    noop_max: up to this many random NOOP agent steps after each reset.
    life_loss_terminal: report a lost life as the end of an episode (the game
      itself continues at the next reset).
    max_episode_frames: episode cap in emulator frames (truncation).
    clip_rewards: clip rewards to {-1, 0, 1} (sign).
    crop: (top, bottom, left, right) in native pixels, or None.
    observation_size: (height, width) after crop; multiples of 8.
    resize: 'area', 'nearest', or 'pad' (zero-pad bottom/right, no scaling).
    grayscale: single-channel observations.
    max_pool_frames: an ALE observation is the elementwise max of the last
      two emulator frames of the action repeat (before crop and resize)
      rather than the last frame alone; with action_repeat 1 there is one
      frame and nothing to pool. MiniPacman draws exact frames and repeats
      no action: it refuses True.
  """
  env_id: str = "ALE/MsPacman-v5"
  action_repeat: int = 4
  sticky_action_prob: float = 0.25
  action_set: str = "paper"
  noop_max: int = 0
  life_loss_terminal: bool = False
  max_episode_frames: int = 108_000
  clip_rewards: bool = False
  crop: Optional[Tuple[int, int, int, int]] = (0, 208, 0, 160)
  observation_size: Tuple[int, int] = (104, 80)
  resize: str = "area"
  grayscale: bool = False
  max_pool_frames: bool = False

  def __post_init__(self):
    # JSON round trips give lists: normalise to tuples.
    if self.crop is not None:
      object.__setattr__(self, "crop", tuple(int(v) for v in self.crop))
    object.__setattr__(self, "observation_size",
                       tuple(int(v) for v in self.observation_size))
    self.validate()

  @property
  def is_minipacman(self) -> bool:
    return self.env_id.startswith(MINIPACMAN_PREFIX)

  def check_minipacman_dynamics(self) -> None:
    """ValueError unless the MiniPacman step is the game's own (no action
    repeat, no sticky actions)."""
    if self.action_repeat != 1 or self.sticky_action_prob:
      raise ValueError("MiniPacman takes action_repeat=1 and "
                       "sticky_action_prob=0, given "
                       f"{self.action_repeat} and "
                       f"{self.sticky_action_prob}; use the "
                       "'minipacman' protocol preset.")

  @property
  def observation_shape(self) -> Tuple[int, int, int]:
    height, width = self.observation_size
    return (height, width, 1 if self.grayscale else 3)

  def validate(self) -> None:
    """Raises ValueError for settings no environment can honour."""
    height, width = self.observation_size
    if height <= 0 or width <= 0 or height % 8 or width % 8:
      raise ValueError(
          f"observation_size must be positive multiples of 8 (the models "
          f"encode frames down to 1/8), given {self.observation_size}; "
          "e.g. (104, 80) for the 'small' preset or (200, 160) for 'paper'.")
    if self.action_set not in ACTION_SETS:
      raise ValueError(f"action_set must be one of {ACTION_SETS}, given "
                       f"{self.action_set!r}.")
    if self.resize not in RESIZE_MODES:
      raise ValueError(f"resize must be one of {RESIZE_MODES}, given "
                       f"{self.resize!r}.")
    if self.action_repeat < 1:
      raise ValueError(f"action_repeat must be >= 1, given "
                       f"{self.action_repeat}.")
    if not 0.0 <= self.sticky_action_prob <= 1.0:
      raise ValueError("sticky_action_prob must be in [0, 1], given "
                       f"{self.sticky_action_prob}.")
    if self.noop_max < 0 or self.max_episode_frames < 1:
      raise ValueError("noop_max must be >= 0 and max_episode_frames >= 1, "
                       f"given {self.noop_max} and {self.max_episode_frames}.")
    if self.crop is not None:
      top, bottom, left, right = self.crop
      if not (0 <= top < bottom and 0 <= left < right):
        raise ValueError("crop must be (top, bottom, left, right) with "
                         f"top < bottom and left < right, given {self.crop}.")
    if self.max_pool_frames and self.is_minipacman:
      raise ValueError(
          "max_pool_frames=True pools the last two emulator frames of an ALE "
          f"action repeat; {self.env_id} draws exact frames and repeats no "
          "action, so there is nothing to pool: set max_pool_frames=False.")

  def differences(self, other: "Protocol") -> Dict[str, Tuple[Any, Any]]:
    """{field: (self's value, other's value)} for the fields that differ."""
    mine, theirs = self.to_json(), other.to_json()
    return {name: (mine[name], theirs[name]) for name in mine
            if mine[name] != theirs[name]}

  def model_differences(self, other: "Protocol"
                        ) -> Dict[str, Tuple[Any, Any]]:
    """`differences` restricted to MODEL_FIELDS: where a model trained
    under one protocol would see other transitions under the other."""
    return {name: values for name, values in self.differences(other).items()
            if name in MODEL_FIELDS}

  def to_json(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, data: Dict[str, Any]) -> "Protocol":
    """The protocol of a JSON dict; fields it lacks (a protocol saved before
    they existed, e.g. max_pool_frames) take their defaults."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
      raise ValueError(f"unknown protocol fields {unknown}; known: "
                       f"{sorted(known)}.")
    return cls(**data)

  def save(self, path: str) -> None:
    from i2a import io_utils  # pylint: disable=import-outside-toplevel
    io_utils.atomic_write_text(path, json.dumps(self.to_json(), indent=2))

  @classmethod
  def load(cls, path: str) -> "Protocol":
    with open(path) as f:
      return cls.from_json(json.load(f))


PRESETS: Dict[str, Protocol] = {
    "paper": Protocol(observation_size=(200, 160), crop=(0, 200, 0, 160)),
    "small": Protocol(),
    "minipacman": Protocol(
        env_id="MiniPacman-regular-v0", action_repeat=1,
        sticky_action_prob=0.0, action_set="full", max_episode_frames=1000,
        crop=None, observation_size=(16, 24), resize="pad"),
}


def preset(name: str, **overrides: Any) -> Protocol:
  """A preset protocol with field overrides, e.g. preset('small', noop_max=30)."""
  if name not in PRESETS:
    raise ValueError(f"unknown protocol preset {name!r}; known: "
                     f"{sorted(PRESETS)}.")
  return dataclasses.replace(PRESETS[name], **overrides)
