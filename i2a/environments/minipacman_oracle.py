"""MiniPacman for the emulator oracle: many snapshots stepped as arrays.

Where it sits: the emulator oracle (envmodels/oracle.py) answers every
imagined step of an I2A (B windows x K rollouts x tau steps) by running the
real environment. Its generic path restores one worker environment from
each snapshot, steps it and snapshots it again, in Python, row by row
(about 70 us per rollout step on MiniPacman: two thirds of the oracle
agent's acting). `MiniPacmanBatchEmulator` is the oracle's batch emulator
for MiniPacman protocols (agents.builder.make_oracle passes
`batch_emulator(protocol)`): it turns the snapshots into the arrays of
`vector_minipacman._Games` once, and steps all rows of a query in one
vectorised call, with the rules, wrappers and random draws of
`make_env(protocol)`, bit for bit (tests/envmodels/test_oracle_batched.py
compares it with the generic path step by step).

Decisions:
  * Rows. `MiniPacmanRows` holds n game states as arrays: the games
    (`_Games`), each game's generator state (the bit generator's state
    dict, never mutated in place), the FrameCap's step counter (the
    snapshot's wrapper state, which truncates the episode), whether the
    episode has ended, and the observation in that state. Rows are
    immutable once made: a step copies the rows it is given (`take`), so a
    state can be stepped again, as the oracle's contract requires.
  * Random numbers. A game draws only at a junction (the ghosts' random
    exits) or at a level start, about 2.4 draws per step for 16 games, so
    generators are made lazily: only a row that draws gets a
    `np.random.Generator` (from its state dict), and only its state is
    read back after the step.
  * Episode ends. As the oracle's generic path: a chunk of c primitive
    actions stops at the episode's end (killed: terminated; the FrameCap's
    limit: truncated), and an ended row is absorbing (reward 0, the same
    frame).
  * Rewards are summed over the chunk in float64 (clipped to their sign
    per primitive step where the protocol clips), then float32.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from i2a.environments import minipacman
from i2a.environments import vector_minipacman as vector
from i2a.environments import wrappers
from i2a.environments.protocol import Protocol


@dataclasses.dataclass
class MiniPacmanRows:
  """n MiniPacman states as arrays (see the module docstring)."""
  games: vector._Games  # pylint: disable=protected-access
  rng_states: List[Dict[str, Any]]  # [n] bit generator states
  cap_steps: np.ndarray  # int64 [n]: the FrameCap's counter
  done: np.ndarray  # bool [n]: the episode ended at or before this state
  frames: np.ndarray  # uint8 [n, H, W, C]: the observation in this state

  def __len__(self) -> int:
    return len(self.done)

  def take(self, rows: np.ndarray) -> "MiniPacmanRows":
    """A copy of the states at `rows` (int [k])."""
    indices = rows.tolist()
    return MiniPacmanRows(
        games=self.games.take(rows),
        rng_states=[self.rng_states[i] for i in indices],
        cap_steps=self.cap_steps[rows], done=self.done[rows],
        frames=self.frames[rows])

  @staticmethod
  def concat(parts: Sequence["MiniPacmanRows"]) -> "MiniPacmanRows":
    """The states of `parts`, in order, as one batch."""
    return MiniPacmanRows(
        games=vector._Games.concat([p.games for p in parts]),  # pylint: disable=protected-access
        rng_states=[s for p in parts for s in p.rng_states],
        cap_steps=np.concatenate([p.cap_steps for p in parts]),
        done=np.concatenate([p.done for p in parts]),
        frames=np.concatenate([p.frames for p in parts]))


class _LazyGenerators:
  """rngs[i] as `_Games.step` reads them, made from row i's state on first
  use; `states()` gives every row's state afterwards."""

  def __init__(self, states: Sequence[Dict[str, Any]]):
    self._states = list(states)
    self._made: Dict[int, np.random.Generator] = {}

  def __getitem__(self, i: int) -> np.random.Generator:
    generator = self._made.get(i)
    if generator is None:
      state = self._states[i]
      bit_generator = getattr(np.random, state["bit_generator"])()
      bit_generator.state = state
      generator = self._made[i] = np.random.Generator(bit_generator)
    return generator

  def states(self) -> List[Dict[str, Any]]:
    for i, generator in self._made.items():
      self._states[i] = generator.bit_generator.state
    return self._states


class _Subset:
  """rngs of the rows at `rows` of a batch, indexed by their place there."""

  def __init__(self, rngs: _LazyGenerators, rows: np.ndarray):
    self._rngs, self._rows = rngs, rows.tolist()

  def __getitem__(self, i: int) -> np.random.Generator:
    return self._rngs[self._rows[i]]


class MiniPacmanBatchEmulator:
  """The oracle's batch emulator for environments of a MiniPacman protocol
  (built as `make_env(protocol)`: no JumpyWrapper; the oracle runs the c
  primitive actions of a step itself).

  Args:
    protocol: a MiniPacman protocol (action_repeat 1, no sticky actions).
  """

  def __init__(self, protocol: Protocol):
    # Other environments: the oracle steps them one by one (no emulator).
    self.task = vector.protocol_task(protocol, "MiniPacmanBatchEmulator")
    self._rules = vector._Rules(self.task)  # pylint: disable=protected-access
    self._layout = vector._make_layout(protocol)  # pylint: disable=protected-access
    self._max_steps = max(1, protocol.max_episode_frames)
    self._clip = protocol.clip_rewards

  def from_snapshots(self, snapshots: Sequence[Any]) -> MiniPacmanRows:
    """Rows from the oracle's snapshots (envmodels.oracle.Snapshot) of
    environments built by `make_env(protocol)` (JumpyWrapper allowed)."""
    n = len(snapshots)
    games = vector._Games(n, self._rules, self._layout)  # pylint: disable=protected-access
    cap_steps = np.zeros(n, np.int64)
    for i, snapshot in enumerate(snapshots):
      state = snapshot.emulator
      if not isinstance(state, minipacman.MiniPacmanState):
        raise ValueError(
            f"snapshot {i} holds a {type(state).__name__}, not a "
            "MiniPacmanState: the MiniPacman batch emulator steps only "
            "MiniPacman environments of its protocol.")
      if state.task != self.task or len(state.ghosts) > vector.MAX_GHOSTS:
        raise ValueError(
            f"snapshot {i} is a {state.task!r} game with "
            f"{len(state.ghosts)} ghosts; this batch emulator steps "
            f"{self.task!r} games with at most {vector.MAX_GHOSTS}.")
      vector.put_state(games, i, state)
      caps = [attributes for cls, attributes in snapshot.wrappers
              if issubclass(cls, wrappers.FrameCap)]
      if len(caps) != 1:
        raise ValueError(
            f"snapshot {i} has {len(caps)} FrameCap wrappers, expected one: "
            "build the environments with i2a.environments.make_env.")
      cap_steps[i] = caps[0]["_steps"]
    return MiniPacmanRows(
        games=games,
        rng_states=[s.emulator.rng_state for s in snapshots],
        cap_steps=cap_steps,
        done=np.array([bool(s.done) for s in snapshots], bool),
        frames=np.stack([s.frame for s in snapshots]) if n else
        np.zeros((0,) + self._layout.shape, np.uint8))

  def step(self, rows: MiniPacmanRows, actions: np.ndarray
           ) -> Tuple[MiniPacmanRows, np.ndarray, np.ndarray, np.ndarray]:
    """Steps every row through its chunk of primitive actions int [n, c].

    Returns the new rows (`rows` is left as it was), rewards float32 [n],
    frames uint8 [n, H, W, C] and done bool [n].
    """
    n = len(rows)
    new = rows.take(np.arange(n))
    rngs = _LazyGenerators(new.rng_states)
    total = np.zeros(n)
    stepped = ~new.done
    for k in range(actions.shape[1]):
      active = np.flatnonzero(~new.done)
      if not active.size:
        break
      every = active.size == n
      games = new.games if every else new.games.take(active)
      reward, _, _, killed, _ = games.step(
          actions[active, k].astype(np.int64),
          rngs if every else _Subset(rngs, active))
      if not every:
        new.games.put(active, games)
      if self._clip:
        reward = np.sign(reward)
      total[active] += reward
      cap = new.cap_steps[active] + 1
      new.cap_steps[active] = cap
      ended = cap >= self._max_steps
      if killed is not None:
        ended |= killed
      new.done[active] = ended
    new.rng_states = rngs.states()
    moved = np.flatnonzero(stepped)
    if moved.size == n:
      new.frames = vector.observe(new.games)
    elif moved.size:
      new.frames[moved] = vector.observe(new.games.take(moved))
    return new, total.astype(np.float32), new.frames.copy(), new.done.copy()


def batch_emulator(protocol: Protocol) -> Optional[MiniPacmanBatchEmulator]:
  """The emulator oracle's batch emulator for `protocol`: MiniPacman's, or
  None where there is none (the ALE: the oracle steps its emulators one by
  one)."""
  return MiniPacmanBatchEmulator(protocol) if protocol.is_minipacman else None
