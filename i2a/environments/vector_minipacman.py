"""MiniPacman vectorised: N games stepped as arrays in one call.

Where it sits: `make_vector_env(protocol, num_envs)` returns a
`VectorMiniPacman` for MiniPacman protocols. It is a drop-in for the
gymnasium `SyncVectorEnv` of `make_env(protocol)` sub-envs that
`make_vector_env` built before (still available with `vectorized=False`):
same spaces, same-step autoreset, the same observations, rewards,
terminated / truncated flags and infos (`final_obs`, `final_info` and the
`_key` masks included), bit for bit, given the same seeds and actions
(tests/test_vector_minipacman.py checks this against the SyncVectorEnv for
every task). What changes is the cost: a step is a few dozen numpy calls
on arrays over all N games, instead of Python calls per game and wrapper.

The rules are those of `i2a.environments.minipacman` (the single env stays
the reference, and is what the emulator oracle clones); the protocol's
wrappers (`make_env`: FrameCap, NoopReset, ClipReward, ObservationTransform,
CheckedActions and, with jump > 1, the JumpyWrapper) are applied in
vectorised form:
  * State. Row i of each array is game i: Pac-Man's cell, the ghosts as
    `cell * 5 + heading` in 4 slots (0: not in play; slot order is the
    single env's ghost order), cell contents, counters, power, level, the
    ghosts' move credit. A ghost's deterministic move (corridor, dead end,
    or the junction exit towards or away from Pac-Man) is one lookup in a
    table over (powered, ghost state, Pac-Man's cell); so are power, the
    move credit and the rewards.
  * Random numbers. Every game has its own `np.random.Generator`, exactly
    the one the single env's `np_random` would be (`reset(seed=s)` seeds
    game i with s + i), and draws from it exactly what the single env
    draws, in the same order: the ghosts' first headings at a level start,
    then per step, for each ghost at a junction while Pac-Man is not
    powered, `random()` and, with probability 0.05, `integers(len(exits))`;
    the NoopReset's count after a reset. Only these draws run per game in
    Python (about 2.4 per step for 16 games at level 1); everything else is
    batched. The single env needed no change for this.
  * Frames. Each game keeps its background (walls, food, pills) already
    cropped, padded and, if asked, greyscaled; a step copies the
    backgrounds and draws the ghosts and Pac-Man by fancy indexing. This
    covers resize='pad' whenever the padded frame is larger than the
    (cropped) maze, as in the 'minipacman' preset; other resize modes draw
    the 15x19 frames batched and pass each through the protocol's
    ObservationTransform.
  * Per-env objects. `envs` is a list of N read-only views, gymnasium envs
    wrapped exactly as `make_env(protocol, jump)` wraps them, whose
    unwrapped env (`MiniPacmanView`, a MiniPacmanEnv) reads and writes row
    i of this env: `clone_state()` / `_observation()` / `np_random` see the
    game as it is now, `restore_state()` puts a state into row i, and the
    FrameCap's step counter follows the game's. That is all the emulator
    oracle (envmodels/oracle.py) reads from an agent's environments, so
    `Actor.environments` and collection's policies keep working unchanged.
    Stepping or resetting a view raises RuntimeError: step the vector env.
    Differences from a SyncVectorEnv's sub-envs, none of which a game
    reaches by playing: the game's episode step counter (info['steps'])
    also drives the episode cap, so `restore_state` through a view moves
    both (a single env's FrameCap keeps its own count); and a view refuses
    states with more than 4 ghosts, power outside [0, 20] or a move credit
    outside [0, 20).
  * Pickling. The env pickles with its generators (an actor checkpoint
    pickles its vector env) and resumes exactly; the views are rebuilt on
    first use after unpickling.

Speed (benchmarks/minipacman_speed.py, one core, random actions): about
254,000 env steps/s at N = 16 (5.6x the SyncVectorEnv's 45,500) and
566,000 at N = 64 (11.8x).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Dict, List, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding

from i2a.environments import minipacman
from i2a.environments import wrappers
from i2a.environments.minipacman import (FOOD, GHOST_RANDOM_MOVE_PROBABILITY,
                                         HEIGHT, NOOP, NUM_ACTIONS, PILL,
                                         POWER_PILL_DURATION, WIDTH)
from i2a.environments.protocol import Protocol

# pylint: disable=protected-access  (the single env's maze tables)
_MOVES = minipacman._MOVES
_EXITS = minipacman._EXITS
_REVERSE = minipacman._REVERSE
_DELTAS = minipacman._DELTAS
_GHOST_STARTS = minipacman._GHOST_STARTS
_PACMAN_START = minipacman._PACMAN_START
_INITIAL_CELLS = np.frombuffer(minipacman._INITIAL_CELLS, np.uint8)
_IS_WALL = np.array(minipacman._IS_WALL, bool)
_ghost_speed = minipacman._ghost_speed
# pylint: enable=protected-access

MAX_GHOSTS = len(_GHOST_STARTS)
_INITIAL_FOOD = int((_INITIAL_CELLS == FOOD).sum())
_INITIAL_PILLS = int((_INITIAL_CELLS == PILL).sum())
NUM_CELLS = HEIGHT * WIDTH
# A ghost is one int, cell * _HEADINGS + heading (heading 1-4); 0 (a wall
# cell, no heading) is a ghost out of play.
_HEADINGS = NUM_ACTIONS
NUM_GHOST_STATES = NUM_CELLS * _HEADINGS
_GHOST_START_STATES = np.array(_GHOST_STARTS, np.int64) * _HEADINGS
_GHOST_START_LIST = _GHOST_START_STATES.tolist()
_MAZE_PALETTE = np.array([minipacman.COLORS[name] for name in
                          ("empty", "food", "pill", "wall")], np.uint8)
_INT64 = np.dtype(np.int64)
_U64_ACTIONS = np.uint64(NUM_ACTIONS)


@dataclasses.dataclass(frozen=True)
class _Tables:
  """Static lookup tables of the maze, shared by every VectorMiniPacman.

  A batched step is a few dozen numpy calls on arrays of N or 4N numbers,
  each costing about the same whatever it does, so the rules are folded into
  lookups wherever one lookup replaces several arithmetic calls.
  """
  moves: np.ndarray  # int64 [NUM_CELLS, 5]: the cell an action leads to
  # int64 [2 * NUM_CELLS * NUM_GHOST_STATES], flat over (powered, Pac-Man's
  # cell, ghost): the ghost after its deterministic move.
  ghost_next: np.ndarray
  # bool, same index: the ghost stands at a junction and Pac-Man is not
  # powered, so the single env draws random() for it.
  ghost_draws: np.ndarray
  # bool, same index: the moved ghost is on Pac-Man's cell.
  ghost_hits: np.ndarray
  # int64 [2, POWER_PILL_DURATION + 1, NUM_CELLS]: the offset in ghost_next
  # of (the ghosts move, power, Pac-Man's cell); ghosts that do not move
  # this step look up a last block where every ghost stays as it is.
  ghost_offset: np.ndarray
  # Per ghost state at a junction: the ghosts its random exits lead to.
  random_next: Tuple[Tuple[int, ...], ...]
  ghost_cell: np.ndarray  # int64 [NUM_GHOST_STATES]
  # int64 [3, POWER_PILL_DURATION + 1]: power after a step, by the content
  # of Pac-Man's cell and the power before it.
  power_next: np.ndarray
  # int64 [11, POWER_PILL_DURATION + 1]: the ghosts' move credit a step
  # adds, by the ghosts' speed (0 without ghosts) and Pac-Man's power.
  gain: np.ndarray
  # int64 [40]: the credit after the ghosts' move (20 is one cell).
  credit_next: np.ndarray


@functools.lru_cache(maxsize=None)
def _tables() -> _Tables:
  """Builds the tables once (a few milliseconds)."""
  moves = np.array(_MOVES, np.int64)
  states = np.arange(NUM_GHOST_STATES, dtype=np.int64)
  ghost_next = np.repeat(states[None, :, None], 2, 0).repeat(NUM_CELLS, 2)
  stay = 2 * NUM_CELLS * NUM_GHOST_STATES
  ghost_draws = np.zeros((2, NUM_GHOST_STATES, NUM_CELLS), bool)
  random_next: List[Tuple[int, ...]] = [()] * NUM_GHOST_STATES
  pac_rows, pac_cols = np.divmod(np.arange(NUM_CELLS), WIDTH)
  for cell in np.flatnonzero(~_IS_WALL).tolist():
    exits = _EXITS[cell]
    row, col = divmod(cell, WIDTH)
    for heading in range(1, NUM_ACTIONS):
      ghost = cell * _HEADINGS + heading
      if len(exits) == 1:  # Dead end: turn back.
        new = exits[0]
      elif len(exits) == 2:  # Corridor or corner: go on, never reverse.
        new = heading
        if heading not in exits:
          new = exits[1] if exits[0] == _REVERSE[heading] else exits[0]
      else:  # Junction: the exit that points most towards / away from him.
        choices = [e for e in exits if e != _REVERSE[heading]]
        targets = np.array([_MOVES[cell][e] * _HEADINGS + e for e in choices])
        scores = np.stack([(pac_rows - row) * _DELTAS[e][0] +
                           (pac_cols - col) * _DELTAS[e][1] for e in choices])
        ghost_next[0, ghost] = targets[np.argmax(scores, 0)]  # first max
        ghost_next[1, ghost] = targets[np.argmin(scores, 0)]  # first min
        ghost_draws[0, ghost] = True
        random_next[ghost] = tuple(targets.tolist())
        continue
      ghost_next[:, ghost] = _MOVES[cell][new] * _HEADINGS + new
  powers = np.arange(POWER_PILL_DURATION + 1)
  powered = (powers > 0).astype(np.int64)
  ghost_offset = np.stack([
      np.full((len(powers), NUM_CELLS), stay),
      (powered[:, None] * NUM_CELLS + np.arange(NUM_CELLS)) *
      NUM_GHOST_STATES])
  power_next = np.stack([np.maximum(powers - 1, 0)] * 2 +
                        [np.full_like(powers, POWER_PILL_DURATION)])
  speeds = np.arange(11)[:, None]
  gain = np.where(powered[None] == 1, speeds, 2 * speeds)
  hits = ((ghost_next // _HEADINGS == np.arange(NUM_CELLS)) &
          (ghost_next != 0))
  return _Tables(
      moves=moves,
      ghost_hits=np.concatenate(
          [hits.transpose(0, 2, 1).reshape(-1),
           np.zeros(NUM_GHOST_STATES, bool)]),
      ghost_next=np.concatenate(
          [ghost_next.transpose(0, 2, 1).reshape(-1), states]),
      ghost_draws=np.concatenate(
          [ghost_draws.transpose(0, 2, 1).reshape(-1),
           np.zeros(NUM_GHOST_STATES, bool)]),
      ghost_offset=ghost_offset, random_next=tuple(random_next),
      ghost_cell=states // _HEADINGS, power_next=power_next, gain=gain,
      credit_next=np.arange(40) % 20)


@dataclasses.dataclass(frozen=True)
class _Layout:
  """Where the maze's cells land in the frames the env returns.

  Frames are kept flat, [num_pixels] pixels of numpy dtype V<channels>
  (one item per pixel, so drawing is one fancy assignment; `.view(uint8)`
  gives the channels back). Sprites of cells that are not shown (walls:
  the ghosts out of play; cells cropped away) are drawn on `spare`, a pixel
  no visible sprite can be on and whose background never changes (padding,
  or a wall): drawing Pac-Man puts it back.
  """
  shape: Tuple[int, int, int]  # of one returned frame
  cell_pixel: np.ndarray  # int64 [NUM_CELLS]: pixel of a free shown cell
  ghost_pixel: np.ndarray  # int64 [NUM_GHOST_STATES]
  spare: int
  background: np.ndarray  # pixels [num_pixels]: a level's start
  palette: np.ndarray  # pixels [3]: EMPTY, FOOD, PILL
  empty: np.ndarray  # pixels [1]
  ghost_color: np.ndarray  # pixels [21]: by power (0: not edible)
  # int64 [NUM_CELLS, 2]: Pac-Man's pixel, then the spare one
  pacman_pixels: np.ndarray
  # pixels [2]: Pac-Man's colour, then the spare's background
  pacman_colors: np.ndarray
  # For resize modes other than 'pad': frames are the 15x19 maze and each
  # goes through this transform.
  transform: Optional[wrappers.ObservationTransform]

  def backgrounds(self, codes: np.ndarray) -> np.ndarray:
    """Backgrounds of cell codes uint8 [k, NUM_CELLS] -> pixels [k,
    num_pixels]."""
    out = np.repeat(self.background[None], len(codes), 0)
    shown = self.cell_pixel != self.spare
    out[:, self.cell_pixel[shown]] = self.palette[codes[:, shown]]
    return out


def _make_layout(protocol: Protocol) -> _Layout:
  """The frame layout of a MiniPacman protocol (see `_Layout`)."""
  height, width = protocol.observation_size
  colors = minipacman.COLORS
  names = ("empty", "food", "pill", "wall", "ghost", "edible_ghost",
           "pacman")
  swatch = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
  for i, name in enumerate(names):
    swatch[0, i] = colors[name]
  rows, cols = np.divmod(np.arange(NUM_CELLS), WIDTH)
  top, bottom, left, right = protocol.crop or (0, HEIGHT, 0, WIDTH)
  shown = (rows >= top) & (rows < bottom) & (cols >= left) & (cols < right)
  padded = (protocol.resize == "pad" and
            height * width > (bottom - top) * (right - left) and
            not any(colors["empty"]))
  transform = None
  if padded:  # Crop, pad and greyscale go into the backgrounds.
    probe = wrappers.ObservationTransform(
        minipacman.MiniPacmanEnv(), protocol.observation_size, crop=None,
        mode="pad", grayscale=protocol.grayscale)
    values = probe.observation(swatch)[0, :len(names)]  # [7, C]
    channels = values.shape[1]
    pixel = (rows - top) * width + (cols - left)
    spare = height * width - 1  # bottom right: padding, always empty
    num_pixels = height * width
  else:  # The raw maze; the protocol's transform runs frame by frame.
    transform = wrappers.ObservationTransform(
        minipacman.MiniPacmanEnv(), protocol.observation_size,
        crop=protocol.crop, mode=protocol.resize,
        grayscale=protocol.grayscale)
    values = swatch[0, :len(names)]
    channels = 3
    pixel = np.arange(NUM_CELLS)
    shown = np.ones(NUM_CELLS, bool)
    spare = 0  # the top left wall
    num_pixels = NUM_CELLS
  value = dict(zip(names, values))
  background = np.zeros((num_pixels, channels), np.uint8)
  background[pixel[shown]] = np.where(
      _IS_WALL[shown, None], value["wall"],
      np.stack([value["empty"], value["food"], value["pill"]])[
          _INITIAL_CELLS[shown]])
  cell_pixel = np.where(shown & ~_IS_WALL, pixel, spare).astype(np.int64)
  ghost_pixel = cell_pixel[np.arange(NUM_GHOST_STATES) // _HEADINGS]
  shape = (tuple(transform.observation_space.shape) if transform is not None
           else (height, width, channels))
  pixels = np.dtype((np.void, channels))

  def as_pixels(*colors: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.stack(colors)).view(pixels)[:, 0]

  return _Layout(
      shape=shape, cell_pixel=cell_pixel, ghost_pixel=ghost_pixel,
      spare=spare, background=as_pixels(*background),
      palette=as_pixels(value["empty"], value["food"], value["pill"]),
      empty=as_pixels(value["empty"]),
      ghost_color=as_pixels(value["ghost"],
                            *[value["edible_ghost"]] * POWER_PILL_DURATION),
      pacman_pixels=np.stack(
          [cell_pixel, np.full(NUM_CELLS, spare, np.int64)], 1),
      pacman_colors=as_pixels(value["pacman"], background[spare]),
      transform=transform)


class _Rules:
  """A task's rules as constants and small tables for the batched step."""

  def __init__(self, task: str):
    rules = minipacman.TASKS[task]
    self.task = task
    # The step's reward before ghosts, by the content of Pac-Man's cell:
    # the single env's `rules.step + rules.food` (or pill), same rounding.
    self.content_reward = np.array(
        [rules.step, rules.step + rules.food, rules.step + rules.pill])
    self.ghost_reward = rules.ghost
    self.killed_reward = rules.killed
    self.is_food = np.array([0, 1, 0], np.int64)
    self.is_pill = np.array([0, 0, 1], np.int64)
    self.ends_when_food_gone = rules.ends_when_food_gone
    self.ends_when_pills_gone = rules.ends_when_pills_gone
    self.ends_when_ghosts_gone = rules.ends_when_ghosts_gone
    self.level_step_limit = rules.level_step_limit


class _Events:
  """What happened to each game on its last step (the info's event keys):
  food_eaten, pill_eaten, ghosts_eaten (int64 [n]), killed, level_cleared
  (bool [n])."""

  __slots__ = ("food_eaten", "pill_eaten", "ghosts_eaten", "killed",
               "level_cleared")

  def __init__(self, food_eaten: np.ndarray, pill_eaten: np.ndarray,
               ghosts_eaten: np.ndarray, killed: np.ndarray,
               level_cleared: np.ndarray):
    self.food_eaten = food_eaten
    self.pill_eaten = pill_eaten
    self.ghosts_eaten = ghosts_eaten
    self.killed = killed
    self.level_cleared = level_cleared

  @classmethod
  def none(cls, n: int) -> "_Events":
    return cls(np.zeros(n, np.int64), np.zeros(n, np.int64),
               np.zeros(n, np.int64), np.zeros(n, bool), np.zeros(n, bool))

  def put(self, rows: Any, other: "_Events") -> None:
    self.food_eaten[rows] = other.food_eaten
    self.pill_eaten[rows] = other.pill_eaten
    self.ghosts_eaten[rows] = other.ghosts_eaten
    self.killed[rows] = other.killed
    self.level_cleared[rows] = other.level_cleared


class _Games:
  """The state of n games as arrays, row i being game i, and their step.

  Attributes (int64 [n] unless said): pacman (cell), ghosts ([n, 4] ghost
  states, 0 out of play), num_ghosts (in play), cells (uint8 [n, 285]
  EMPTY / FOOD / PILL), background (pixels [n, num_pixels]), food_left,
  pills_left, power, level, level_steps, steps (this episode; also the
  protocol's episode cap counts them), credit (the ghosts' move credit in
  1/20 cell), speed (the ghosts' speed in 1/10 cell per step: 0 once no
  ghost is in play, so their credit stops), needs_reset (bool: not started,
  or Pac-Man was killed). Power stays in [0, 20] (tables are indexed by it).
  """

  _ARRAYS = ("pacman", "ghosts", "num_ghosts", "cells", "background",
             "food_left", "pills_left", "power", "level", "level_steps",
             "steps", "credit", "speed", "needs_reset")

  def __init__(self, n: int, rules: _Rules, layout: _Layout):
    self.rules = rules
    self.layout = layout
    self.tables = _tables()
    self.rows = np.arange(n)
    self.rows_col = self.rows[:, None]
    self.pacman = np.full(n, _PACMAN_START, np.int64)
    self.ghosts = np.zeros((n, MAX_GHOSTS), np.int64)
    self.num_ghosts = np.zeros(n, np.int64)
    self.cells = np.repeat(_INITIAL_CELLS[None], n, 0)
    self.background = np.repeat(layout.background[None], n, 0)
    for name in ("food_left", "pills_left", "power", "level", "level_steps",
                 "steps", "credit", "speed"):
      setattr(self, name, np.zeros(n, np.int64))
    self.needs_reset = np.ones(n, bool)

  def __getstate__(self) -> Dict[str, Any]:
    state = dict(self.__dict__)
    del state["tables"]  # static, megabytes: rebuilt (cached) on load
    return state

  def __setstate__(self, state: Dict[str, Any]) -> None:
    self.__dict__.update(state)
    self.tables = _tables()

  def take(self, rows: np.ndarray) -> "_Games":
    """A copy of the games at `rows`."""
    sub = _Games.__new__(_Games)
    sub.rules, sub.layout, sub.tables = self.rules, self.layout, self.tables
    sub.rows = np.arange(len(rows))
    sub.rows_col = sub.rows[:, None]
    for name in self._ARRAYS:
      setattr(sub, name, getattr(self, name)[rows])
    return sub

  @classmethod
  def concat(cls, parts: Sequence["_Games"]) -> "_Games":
    """The games of `parts` (of one protocol), in order, as one batch."""
    joined = cls.__new__(cls)
    first = parts[0]
    joined.rules, joined.layout, joined.tables = (first.rules, first.layout,
                                                  first.tables)
    for name in cls._ARRAYS:
      setattr(joined, name, np.concatenate([getattr(p, name) for p in parts]))
    joined.rows = np.arange(len(joined.pacman))
    joined.rows_col = joined.rows[:, None]
    return joined

  def put(self, rows: np.ndarray, sub: "_Games") -> None:
    """Writes the games of `sub` (from `take(rows)`) back at `rows`."""
    for name in self._ARRAYS:
      getattr(self, name)[rows] = getattr(sub, name)

  # -- Levels ----------------------------------------------------------------

  def start_level(self, rows: np.ndarray, levels: np.ndarray,
                  rngs: Sequence[np.random.Generator],
                  new_episode: bool = False) -> None:
    """MiniPacmanEnv._start_level for the games at `rows` (int [k], levels
    int [k]; rngs by game); `new_episode` also zeroes the episode's steps
    and marks the games alive (a reset)."""
    if len(rows) > 8:
      self._start_levels(rows, levels, rngs, new_episode)
      return
    # A few games (deaths, level ends): element by element is faster.
    background = self.layout.background
    for row, level in zip(rows.tolist(), levels.tolist()):
      self.level[row] = level
      self.level_steps[row] = 0
      self.cells[row] = _INITIAL_CELLS
      self.background[row] = background
      self.food_left[row] = _INITIAL_FOOD
      self.pills_left[row] = _INITIAL_PILLS
      self.pacman[row] = _PACMAN_START
      self.power[row] = 0
      self.credit[row] = 0
      self.speed[row] = _ghost_speed(level)
      count = min(1 + (level - 1) // 2, MAX_GHOSTS)
      self.num_ghosts[row] = count
      rng = rngs[row]
      # The single env draws integers(1, 5, size=count): numpy draws each
      # of those from its own 32-bit output, as these scalar calls do (the
      # same numbers and generator state, and faster; tests compare the
      # states).
      self.ghosts[row] = [
          start + int(rng.integers(1, NUM_ACTIONS)) if k < count else 0
          for k, start in enumerate(_GHOST_START_LIST)]
      if new_episode:
        self.steps[row] = 0
        self.needs_reset[row] = False

  def _start_levels(self, rows: np.ndarray, levels: np.ndarray,
                    rngs: Sequence[np.random.Generator],
                    new_episode: bool) -> None:
    """start_level for many games at once."""
    self.level[rows] = levels
    self.level_steps[rows] = 0
    self.cells[rows] = _INITIAL_CELLS
    self.background[rows] = self.layout.background
    self.food_left[rows] = _INITIAL_FOOD
    self.pills_left[rows] = _INITIAL_PILLS
    self.pacman[rows] = _PACMAN_START
    self.power[rows] = 0
    self.credit[rows] = 0
    self.speed[rows] = np.minimum(5 + (levels - 1), 10)
    counts = np.minimum(1 + (levels - 1) // 2, MAX_GHOSTS)
    self.num_ghosts[rows] = counts
    ghosts = np.zeros((len(rows), MAX_GHOSTS), np.int64)
    for k, (row, count) in enumerate(zip(rows.tolist(), counts.tolist())):
      ghosts[k, :count] = _GHOST_START_STATES[:count] + rngs[row].integers(
          1, NUM_ACTIONS, size=count)
    self.ghosts[rows] = ghosts
    if new_episode:
      self.steps[rows] = 0
      self.needs_reset[rows] = False

  # -- One step --------------------------------------------------------------

  def step(self, actions: np.ndarray, rngs: Sequence[np.random.Generator]
           ) -> Tuple[np.ndarray, np.ndarray, Optional[np.ndarray],
                      Optional[np.ndarray], Optional[np.ndarray]]:
    """MiniPacmanEnv.step for every game (valid actions int [n]).

    Returns:
      reward float64 [n], the content Pac-Man found (int [n]), and the
      ghosts eaten (int64 [n]), killed (bool [n]) and level_cleared (bool
      [n]), each None where it is all zeros.
    """
    rules, tables, layout = self.rules, self.tables, self.layout
    rows = self.rows
    n = len(rows)
    pacman = tables.moves[self.pacman, actions]
    self.pacman = pacman
    self.steps += 1
    self.level_steps += 1
    content = self.cells[rows, pacman]
    self.cells[rows, pacman] = 0
    self.background[rows, layout.cell_pixel[pacman]] = layout.empty
    power = self.power = tables.power_next[content, self.power]
    reward = rules.content_reward[content]
    if rules.ends_when_food_gone:
      self.food_left -= rules.is_food[content]
    if rules.ends_when_pills_gone:
      self.pills_left -= rules.is_pill[content]
    ghosts = self.ghosts
    pacman_col = pacman[:, None]
    killed = eaten = None
    on = tables.ghost_cell[ghosts] == pacman_col
    if np.count_nonzero(on):  # Pac-Man walked onto a ghost.
      killed, eaten = self._collide(on, power != 0)
    gain = tables.gain[self.speed, power]
    if killed is not None:
      gain[killed] = 0
    credit = self.credit = self.credit + gain
    move = credit >= 20
    moving = np.count_nonzero(move)
    if moving:
      self.credit = tables.credit_next[credit]
      index = ghosts + tables.ghost_offset[move.view(np.uint8), power,
                                          pacman][:, None]
      moved = tables.ghost_next[index]
      draws = tables.ghost_draws[index]
      # Ghosts that do not move (a killed Pac-Man's among them: no credit)
      # look up the staying block, where none hits him.
      on = tables.ghost_hits[index]
      if np.count_nonzero(draws):  # Junctions: a random exit now and then.
        old, new, hits = ghosts.reshape(-1), moved.reshape(-1), on.reshape(-1)
        for flat in draws.reshape(-1).nonzero()[0].tolist():
          game = flat // MAX_GHOSTS
          rng = rngs[game]
          if rng.random() < GHOST_RANDOM_MOVE_PROBABILITY:
            targets = tables.random_next[old[flat]]
            new[flat] = target = targets[int(rng.integers(len(targets)))]
            hits[flat] = target // _HEADINGS == pacman[game]
      ghosts = self.ghosts = moved
      if np.count_nonzero(on):  # A ghost walked onto Pac-Man.
        killed_now, eaten_now = self._collide(on, power != 0)
        killed = killed_now if killed is None else killed | killed_now
        eaten = eaten_now if eaten is None else eaten + eaten_now
    if eaten is not None:
      reward += eaten * rules.ghost_reward
    if killed is not None:
      reward[killed] += rules.killed_reward
      self.needs_reset |= killed

    ends = None
    if rules.ends_when_food_gone and np.count_nonzero(self.food_left) < n:
      ends = self.food_left == 0
    if rules.ends_when_pills_gone and np.count_nonzero(self.pills_left) < n:
      ends = _or(ends, self.pills_left == 0)
    if rules.ends_when_ghosts_gone and np.count_nonzero(self.num_ghosts) < n:
      ends = _or(ends, self.num_ghosts == 0)
    if rules.level_step_limit is not None:
      over = self.level_steps >= rules.level_step_limit
      if np.count_nonzero(over):
        ends = _or(ends, over)
    if ends is not None:
      if killed is not None:
        ends &= ~killed
      cleared = np.flatnonzero(ends)
      if cleared.size:
        self.start_level(cleared, self.level[cleared] + 1, rngs)
      else:
        ends = None
    return reward, content, eaten, killed, ends

  def _collide(self, on: np.ndarray, powered: np.ndarray
               ) -> Tuple[np.ndarray, np.ndarray]:
    """Pac-Man meets the ghosts `on` (bool [n, 4]) his cell: a powered one
    eats them (out of play until the next level), another one dies.
    Returns (killed bool [n], eaten int64 [n])."""
    killed = on.any(1) & ~powered
    eat = on & powered[:, None]
    self.ghosts[eat] = 0
    eaten = eat.sum(1)
    self.num_ghosts -= eaten
    self.speed[self.num_ghosts == 0] = 0  # No ghost left: no credit.
    return killed, eaten

  # -- Frames ----------------------------------------------------------------

  def frames(self) -> np.ndarray:
    """The frames of every game, pixels [n, num_pixels] (see _Layout)."""
    layout = self.layout
    rows = self.rows_col
    frames = self.background.copy()
    frames[rows, layout.ghost_pixel[self.ghosts]] = (
        layout.ghost_color[self.power][:, None])
    frames[rows, layout.pacman_pixels[self.pacman]] = layout.pacman_colors
    return frames

  def maze_frame(self, row: int) -> np.ndarray:
    """Game `row`'s 15x19 RGB frame, as MiniPacmanEnv._observation draws it."""
    frame = _MAZE_PALETTE[np.where(_IS_WALL, 3, self.cells[row])]
    color = minipacman.COLORS[
        "edible_ghost" if self.power[row] else "ghost"]
    for ghost in self.ghosts[row].tolist():
      if ghost:
        frame[ghost // _HEADINGS] = color
    frame[self.pacman[row]] = minipacman.COLORS["pacman"]
    return frame.reshape(HEIGHT, WIDTH, 3)


class VectorMiniPacman(gym.vector.VectorEnv):
  """N MiniPacman games under a protocol, stepped as arrays.

  Behaves as make_vector_env's SyncVectorEnv of `make_env(protocol, jump)`
  sub-envs with same-step autoreset (see the module docstring).

  Args:
    protocol: a MiniPacman protocol (action_repeat 1, no sticky actions).
    num_envs: N >= 1.
    jump: c >= 1 primitive steps per step (the JumpyWrapper's actions:
      int [N, c], or one index in [0, 5^c) per env).
  """

  metadata = {"render_modes": ["rgb_array"], "render_fps": 8,
              "autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

  def __init__(self, protocol: Protocol, num_envs: int, jump: int = 1):
    super().__init__()
    task = protocol_task(protocol, "VectorMiniPacman")
    if num_envs < 1:
      raise ValueError(f"num_envs must be >= 1, given {num_envs}.")
    if jump < 1:
      raise ValueError(f"jump must be >= 1, given {jump}.")
    self.protocol = protocol
    self.task = task
    self.num_envs = num_envs
    self.jump = jump
    self.autoreset_mode = gym.vector.AutoresetMode.SAME_STEP
    self.metadata = dict(self.metadata)
    self.render_mode = None
    self._max_steps = max(1, protocol.max_episode_frames)
    self._noop_max = protocol.noop_max
    self._clip = protocol.clip_rewards
    self._layout = _make_layout(protocol)
    self._games = _Games(num_envs, _Rules(task), self._layout)
    self._rngs: List[Optional[np.random.Generator]] = [None] * num_envs
    self._seeds: List[Optional[int]] = [None] * num_envs
    self._ready = False  # every game started and alive
    self._views: Optional[List[gym.Env]] = None
    self._caps: List[wrappers.FrameCap] = []
    self.single_observation_space = gym.spaces.Box(
        0, 255, self._layout.shape, np.uint8)
    self.observation_space = gym.vector.utils.batch_space(
        self.single_observation_space, num_envs)
    self.single_action_space = (
        gym.spaces.Discrete(NUM_ACTIONS) if jump == 1 else
        gym.spaces.MultiDiscrete([NUM_ACTIONS] * jump))
    self.action_space = gym.vector.utils.batch_space(
        self.single_action_space, num_envs)
    self._ones = np.ones(num_envs, bool)
    self._shape = (num_envs,)

  # -- gymnasium's vector API ------------------------------------------------

  def reset(self, *, seed: Optional[Any] = None,
            options: Optional[Dict[str, Any]] = None
            ) -> Tuple[np.ndarray, Dict[str, Any]]:
    """Starts an episode in every game (or those of options['reset_mask']).

    seed: None, an int (game i gets seed + i) or a list of N ints / None;
    options: {'level': n} as MiniPacmanEnv.reset, and gymnasium's
    'reset_mask' (bool [N]).
    """
    n = self.num_envs
    if seed is None:
      seeds = [None] * n
    elif isinstance(seed, (int, np.integer)):
      seeds = [int(seed) + i for i in range(n)]
    else:
      seeds = list(seed)
    if len(seeds) != n:
      raise ValueError(f"If seeds are passed as a list the length must match "
                       f"num_envs={n} but got length={len(seeds)}.")
    options = dict(options or {})
    mask = options.pop("reset_mask", None)
    if mask is not None:
      if (not isinstance(mask, np.ndarray) or mask.shape != (n,) or
          mask.dtype != np.bool_ or not mask.any()):
        raise ValueError("options['reset_mask'] must be a bool numpy array "
                         f"of shape ({n},) with at least one True value, "
                         f"given {mask!r}.")
      rows = np.flatnonzero(mask)
    else:
      rows = np.arange(n)
    level = minipacman.level_from_options(options)
    events = self._reset_rows(rows, [seeds[i] for i in rows.tolist()], level)
    frames = self._observations()
    all_events = _Events.none(n)
    all_events.put(rows, events)
    infos = self._infos(all_events, mask)
    self._sync_views()
    return frames, infos

  def step(self, actions: Any) -> Tuple[np.ndarray, np.ndarray, np.ndarray,
                                        np.ndarray, Dict[str, Any]]:
    if not self._ready:
      self._refuse_stepping()
    if self.jump == 1:
      primitive = self._check_actions(actions)
      reward, terminated, truncated, events = self._primitive_step(primitive)
      extra = None
    else:
      reward, terminated, truncated, events, extra = self._jumpy_step(
          self._jumpy_actions(actions))
    frames = self._observations()
    done = final = None
    if np.count_nonzero(terminated) or np.count_nonzero(truncated):
      done = terminated | truncated
      rows = np.flatnonzero(done)
      final = self._final(done, frames, events, extra)
      reset_events = self._reset_rows(rows, [None] * len(rows), 1)
      events.put(rows, reset_events)
      frames = self._observations()
    infos = self._infos(events)
    if extra is not None:
      keep = self._ones if done is None else ~done
      if np.count_nonzero(keep):
        steps_taken, rewards_taken = extra
        taken = np.full(self.num_envs, None, object)
        for i in np.flatnonzero(keep).tolist():
          taken[i] = rewards_taken[i]
        infos["primitive_steps"] = np.where(keep, steps_taken, 0)
        infos["_primitive_steps"] = keep.copy()
        infos["primitive_rewards"] = taken
        infos["_primitive_rewards"] = keep.copy()
    if final is not None:
      infos.update(final)
    self._sync_views()
    return frames, reward, terminated, truncated, infos

  def render(self) -> Tuple[None, ...]:
    """Nothing to render (render_mode None, as make_vector_env's sub-envs)."""
    return (None,) * self.num_envs

  def call(self, name: str, *args: Any, **kwargs: Any) -> Tuple[Any, ...]:
    """Calls `name` on every per-env view (attributes are returned)."""
    results = []
    for env in self.envs:
      attribute = env.get_wrapper_attr(name)
      results.append(attribute(*args, **kwargs) if callable(attribute)
                     else attribute)
    return tuple(results)

  def get_attr(self, name: str) -> Tuple[Any, ...]:
    """`name` of every per-env view."""
    return tuple(env.get_wrapper_attr(name) for env in self.envs)

  @property
  def np_random(self) -> Tuple[np.random.Generator, ...]:
    """The games' generators (a SyncVectorEnv returns its sub-envs')."""
    return tuple(self._rng(i) for i in range(self.num_envs))

  @property
  def np_random_seed(self) -> Tuple[Optional[int], ...]:
    return tuple(self._seeds)

  @property
  def envs(self) -> List[gym.Env]:
    """N per-env views, wrapped as make_env wraps a sub-env (read-only but
    for restore_state; see the module docstring)."""
    if self._views is None:
      from i2a.environments import factory  # pylint: disable=import-outside-toplevel
      minipacman.register()
      spec = gym.spec(self.protocol.env_id)
      views = []
      for i in range(self.num_envs):
        base = MiniPacmanView(self, i)
        base.spec = spec
        views.append(factory.wrap_env(base, self.protocol, self.jump))
      self._caps = [_find_wrapper(view, wrappers.FrameCap) for view in views]
      self._views = views
      self._sync_views()
    return self._views

  def __getstate__(self) -> Dict[str, Any]:
    state = dict(self.__dict__)
    state["_views"] = None  # rebuilt on first use
    state["_caps"] = []
    return state

  def __repr__(self) -> str:
    return (f"VectorMiniPacman({self.protocol.env_id}, "
            f"num_envs={self.num_envs}, jump={self.jump})")

  # -- Steps -----------------------------------------------------------------

  def _check_actions(self, actions: Any) -> np.ndarray:
    """Primitive actions int [N], refused as CheckedActions refuses them."""
    array = np.asarray(actions)
    if array.dtype is not _INT64 and array.dtype.kind in "iu":
      array = array.astype(np.int64)
    if (array.dtype is not _INT64 or array.shape != self._shape or
        np.count_nonzero(array.view(np.uint64) >= _U64_ACTIONS)):
      if array.shape != (self.num_envs,):
        raise ValueError(f"actions must be int [{self.num_envs}] (one per "
                         f"env), given shape {array.shape}.")
      for i, action in enumerate(array.tolist()):
        if not (isinstance(action, int) and not isinstance(action, bool) and
                0 <= action < NUM_ACTIONS):
          raise ValueError(
              f"action {array[i]!r} is out of range: expected an int in "
              f"[0, {NUM_ACTIONS}) for {self.protocol.env_id} (env {i}).")
    return array

  def _jumpy_actions(self, actions: Any) -> np.ndarray:
    """The JumpyWrapper's actions (indices [N] or arrays [N, c]) -> [N, c]."""
    array = np.asarray(actions)
    n, c = self.num_envs, self.jump
    if array.dtype.kind not in "iu":
      raise ValueError(f"jumpy actions must be ints, given {array.dtype}.")
    if array.shape == (n,):
      if array.min() < 0 or array.max() >= NUM_ACTIONS**c:
        bad = int(array[(array < 0) | (array >= NUM_ACTIONS**c)][0])
        raise ValueError(f"jumpy action index {bad} is out of range: "
                         f"expected [0, {NUM_ACTIONS**c}) "
                         f"(A={NUM_ACTIONS}, c={c}).")
      index = array.astype(np.int64)
      primitive = np.empty((n, c), np.int64)
      for k in reversed(range(c)):
        index, primitive[:, k] = np.divmod(index, NUM_ACTIONS)
      return primitive
    if array.shape != (n, c):
      raise ValueError(f"jumpy actions must be int [{n}, {c}] or one index "
                       f"per env [{n}], given shape {array.shape}.")
    if array.min() < 0 or array.max() >= NUM_ACTIONS:
      row = int(np.flatnonzero(((array < 0) | (array >= NUM_ACTIONS)).any(1))
                [0])
      raise ValueError(f"jumpy action {array[row].tolist()} has primitive "
                       f"actions out of range [0, {NUM_ACTIONS}).")
    return array

  def _primitive_step(self, actions: np.ndarray,
                      rows: Optional[np.ndarray] = None
                      ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, _Events]:
    """One MiniPacman step (+ FrameCap, ClipReward) of every game, or of the
    games at `rows`: (reward, terminated, truncated, events) of those."""
    games = self._games if rows is None else self._games.take(rows)
    rngs = self._rngs if rows is None else [self._rngs[i]
                                            for i in rows.tolist()]
    reward, content, eaten, killed, cleared = games.step(actions, rngs)
    n = len(games.rows)
    rules = games.rules
    events = _Events(
        rules.is_food[content], rules.is_pill[content],
        np.zeros(n, np.int64) if eaten is None else eaten,
        np.zeros(n, bool) if killed is None else killed,
        np.zeros(n, bool) if cleared is None else cleared)
    truncated = games.steps >= self._max_steps
    terminated = events.killed.copy()
    if rows is not None:
      self._games.put(rows, games)
    if self._clip:
      reward = np.sign(reward)
    return reward, terminated, truncated, events

  def _jumpy_step(self, primitive: np.ndarray):
    """c primitive steps per game, stopping a game's chunk at its episode's
    end (the JumpyWrapper). Returns reward, terminated, truncated, events
    and (primitive_steps int64 [N], primitive_rewards: lists of floats)."""
    n = self.num_envs
    total = np.zeros(n)
    taken = np.zeros(n, np.int64)
    rewards = np.zeros((n, self.jump))
    terminated = np.zeros(n, bool)
    truncated = np.zeros(n, bool)
    events = _Events.none(n)
    active = np.ones(n, bool)
    for k in range(self.jump):
      rows = None if active.all() else np.flatnonzero(active)
      actions = primitive[:, k] if rows is None else primitive[rows, k]
      reward, term, trunc, step_events = self._primitive_step(actions, rows)
      at = slice(None) if rows is None else rows
      total[at] += reward
      rewards[at, k] = reward
      taken[at] += 1
      terminated[at] = term
      truncated[at] = trunc
      events.put(at, step_events)
      active &= ~(terminated | truncated)
      if not active.any():
        break
    lists = [rewards[i, :taken[i]].tolist() for i in range(n)]
    return total, terminated, truncated, events, (taken, lists)

  # -- Resets ----------------------------------------------------------------

  def _rng(self, i: int) -> np.random.Generator:
    if self._rngs[i] is None:
      self._rngs[i], self._seeds[i] = seeding.np_random()
    return self._rngs[i]

  def _reset_rows(self, rows: np.ndarray, seeds: Sequence[Optional[int]],
                  level: int) -> _Events:
    """Resets the games at `rows` as the wrapped env's reset does (seeding,
    level start, then the NoopReset's noops); returns their reset events."""
    rngs = self._rngs
    for i, seed in zip(rows.tolist(), seeds):
      if seed is not None:
        rngs[i], self._seeds[i] = seeding.np_random(seed)
      elif rngs[i] is None:
        rngs[i], self._seeds[i] = seeding.np_random()
    games = self._games
    games.start_level(rows, np.full(len(rows), level, np.int64), self._rngs,
                      new_episode=True)
    events = _Events.none(len(rows))
    if self._noop_max:
      noops = np.array([int(self._rngs[i].integers(0, self._noop_max + 1))
                        for i in rows.tolist()])
      for t in range(int(noops.max(initial=0))):
        active = np.flatnonzero(noops > t)
        _, term, trunc, step_events = self._primitive_step(
            np.full(len(active), NOOP, np.int64), rows[active])
        events.put(active, step_events)
        ended = np.flatnonzero(term | trunc)
        if ended.size:  # The NoopReset resets the env, without noops.
          again = rows[active[ended]]
          games.start_level(again, np.ones(len(again), np.int64), self._rngs,
                            new_episode=True)
          events.put(active[ended], _Events.none(len(ended)))
    self._ready = not np.count_nonzero(games.needs_reset)
    return events

  def _refuse_stepping(self) -> None:
    games = self._games
    rows = np.flatnonzero(games.needs_reset).tolist()
    raise RuntimeError(
        f"VectorMiniPacman.step() called before reset() or with game(s) "
        f"{rows} in a terminated state (restored through envs[i]); call "
        "reset() first.")

  # -- Observations and infos ------------------------------------------------

  def _observations(self) -> np.ndarray:
    return observe(self._games)

  def _infos(self, events: _Events,
             mask: Optional[np.ndarray] = None) -> Dict[str, Any]:
    """The vector info of MiniPacman's info keys (gymnasium's layout: value
    arrays and `_key` masks); `mask` (bool [N]) limits them to those games
    (the others hold zeros, as gymnasium leaves them)."""
    games = self._games
    if mask is None:
      # Every game: copies of the state (it moves on); the event arrays are
      # the step's own (every step makes new ones) and go as they are.
      ones = self._ones
      return {
          "level": games.level.copy(), "_level": ones.copy(),
          "steps": games.steps.copy(), "_steps": ones.copy(),
          "level_steps": games.level_steps.copy(),
          "_level_steps": ones.copy(),
          "power": games.power.copy(), "_power": ones.copy(),
          "ghosts": games.num_ghosts.copy(), "_ghosts": ones.copy(),
          "food_eaten": events.food_eaten, "_food_eaten": ones.copy(),
          "pill_eaten": events.pill_eaten, "_pill_eaten": ones.copy(),
          "ghosts_eaten": events.ghosts_eaten, "_ghosts_eaten": ones.copy(),
          "killed": events.killed, "_killed": ones.copy(),
          "level_cleared": events.level_cleared,
          "_level_cleared": ones.copy()}
    return {
        "level": games.level * mask, "_level": mask.copy(),
        "steps": games.steps * mask, "_steps": mask.copy(),
        "level_steps": games.level_steps * mask, "_level_steps": mask.copy(),
        "power": games.power * mask, "_power": mask.copy(),
        "ghosts": games.num_ghosts * mask, "_ghosts": mask.copy(),
        "food_eaten": events.food_eaten * mask, "_food_eaten": mask.copy(),
        "pill_eaten": events.pill_eaten * mask, "_pill_eaten": mask.copy(),
        "ghosts_eaten": events.ghosts_eaten * mask,
        "_ghosts_eaten": mask.copy(),
        "killed": events.killed & mask, "_killed": mask.copy(),
        "level_cleared": events.level_cleared & mask,
        "_level_cleared": mask.copy()}

  def _final(self, done: np.ndarray, frames: np.ndarray, events: _Events,
             extra: Optional[Tuple[np.ndarray, List[List[float]]]]
             ) -> Dict[str, Any]:
    """final_obs / final_info of the games `done` (bool [N]), before their
    reset."""
    n = self.num_envs
    rows = done.nonzero()[0].tolist()
    final_obs = np.full(n, None, object)
    for i in rows:
      final_obs[i] = frames[i].copy()
    final_info = self._infos(events, done)
    if extra is not None:
      steps_taken, rewards_taken = extra
      taken = np.full(n, None, object)
      for i in rows:
        taken[i] = rewards_taken[i]
      final_info["primitive_steps"] = steps_taken * done
      final_info["_primitive_steps"] = done.copy()
      final_info["primitive_rewards"] = taken
      final_info["_primitive_rewards"] = done.copy()
    return {"final_obs": final_obs, "_final_obs": done.copy(),
            "final_info": final_info, "_final_info": done.copy()}

  # -- Views -----------------------------------------------------------------

  def _sync_views(self) -> None:
    """Keeps the views' FrameCap counters on the games' episode steps."""
    if self._views is not None:
      for cap, steps in zip(self._caps, self._games.steps.tolist()):
        cap._steps = steps  # pylint: disable=protected-access

  def _clone_state(self, i: int) -> minipacman.MiniPacmanState:
    games = self._games
    if not games.level[i]:
      raise RuntimeError("clone_state() needs a started game; call reset().")
    return minipacman.MiniPacmanState(
        task=self.task,
        pacman=divmod(int(games.pacman[i]), WIDTH),
        ghosts=tuple(divmod(g // _HEADINGS, WIDTH) + (g % _HEADINGS,)
                     for g in games.ghosts[i].tolist() if g),
        cells=games.cells[i].tobytes(),
        power=int(games.power[i]),
        level=int(games.level[i]),
        level_steps=int(games.level_steps[i]),
        steps=int(games.steps[i]),
        ghost_move_credit=int(games.credit[i]),
        terminated=bool(games.needs_reset[i]),
        rng_state=self._rng(i).bit_generator.state)

  def _restore_state(self, i: int, state: minipacman.MiniPacmanState) -> None:
    """Puts `state` into game i (validated by a MiniPacmanEnv)."""
    check = minipacman.MiniPacmanEnv(self.task)
    check.restore_state(state)  # the single env's checks and messages
    if len(state.ghosts) > MAX_GHOSTS:
      raise ValueError(f"VectorMiniPacman holds at most {MAX_GHOSTS} ghosts "
                       f"per game, the state has {len(state.ghosts)}.")
    if not (0 <= state.power <= POWER_PILL_DURATION and
            0 <= state.ghost_move_credit < 20):
      raise ValueError(
          f"VectorMiniPacman keeps power in [0, {POWER_PILL_DURATION}] and "
          "the ghosts' move credit in [0, 20) (what a game reaches), the "
          f"state has {state.power} and {state.ghost_move_credit}.")
    put_state(self._games, i, state)
    self._rng(i).bit_generator.state = state.rng_state
    self._ready = not np.count_nonzero(self._games.needs_reset)
    self._sync_views()


def protocol_task(protocol: Protocol, runner: str) -> str:
  """The MiniPacman task of `protocol`, for `runner` (named in the errors):
  ValueError unless it is a MiniPacman protocol with the game's own
  dynamics and a known task."""
  if not protocol.is_minipacman:
    raise ValueError(f"{runner} runs MiniPacman tasks "
                     f"({', '.join(minipacman.TASKS)}); {protocol.env_id} "
                     "is not one.")
  protocol.check_minipacman_dynamics()
  task = protocol.env_id[len("MiniPacman-"):].rsplit("-v", 1)[0]
  if task not in minipacman.TASKS or protocol.env_id != (
      f"MiniPacman-{task}-v0"):
    raise ValueError(f"unknown environment id {protocol.env_id!r}; "
                     "MiniPacman tasks are "
                     f"{[f'MiniPacman-{t}-v0' for t in minipacman.TASKS]}.")
  return task


def put_state(games: _Games, i: int, state: minipacman.MiniPacmanState
              ) -> None:
  """Writes a MiniPacmanEnv's `state` (a valid one: `_restore_state` checks
  it) into row i of `games`; the generator's state is the caller's."""
  ghosts = [(r * WIDTH + c) * _HEADINGS + int(h) for r, c, h in
            (tuple(int(x) for x in g) for g in state.ghosts)]
  games.ghosts[i] = ghosts + [0] * (MAX_GHOSTS - len(ghosts))
  games.num_ghosts[i] = len(ghosts)
  games.pacman[i] = state.pacman[0] * WIDTH + state.pacman[1]
  codes = np.frombuffer(state.cells, np.uint8)
  games.cells[i] = codes
  games.background[i] = games.layout.backgrounds(codes[None])[0]
  games.food_left[i] = int((codes == FOOD).sum())
  games.pills_left[i] = int((codes == PILL).sum())
  games.power[i] = state.power
  games.level[i] = state.level
  games.speed[i] = _ghost_speed(int(state.level)) if ghosts else 0
  games.level_steps[i] = state.level_steps
  games.steps[i] = state.steps
  games.credit[i] = state.ghost_move_credit
  games.needs_reset[i] = state.terminated


def observe(games: _Games) -> np.ndarray:
  """The observations of every game, uint8 [n, H, W, C] as the protocol's
  wrappers give them."""
  frames = games.frames().view(np.uint8)
  layout = games.layout
  if layout.transform is None:
    return frames.reshape((len(frames),) + layout.shape)
  transform = layout.transform.observation
  return np.stack([transform(frame.reshape(HEIGHT, WIDTH, 3))
                   for frame in frames])


def _or(a: Optional[np.ndarray], b: np.ndarray) -> np.ndarray:
  return b if a is None else a | b


def _find_wrapper(env: gym.Env, cls: type) -> gym.Wrapper:
  while isinstance(env, gym.Wrapper):
    if isinstance(env, cls):
      return env
    env = env.env
  raise ValueError(f"no {cls.__name__} in {env}")


class MiniPacmanView(minipacman.MiniPacmanEnv):
  """Game `index` of a VectorMiniPacman as a MiniPacmanEnv (read-only).

  `clone_state`, `_observation`, `render` and `np_random` read the game as
  it is now; `restore_state` writes into it. `step` and `reset` raise
  RuntimeError: the vector env steps its games.
  """
  # pylint: disable=protected-access  (a view of the vector env's game)

  def __init__(self, vector: VectorMiniPacman, index: int):
    super().__init__(vector.task)
    self._vector = vector
    self._index = index

  def reset(self, *, seed: Optional[int] = None,
            options: Optional[Dict[str, Any]] = None):
    raise RuntimeError(self._read_only("reset"))

  def step(self, action: int):
    raise RuntimeError(self._read_only("step"))

  def _read_only(self, what: str) -> str:
    return (f"{what}() on a view of game {self._index} of a "
            "VectorMiniPacman: the vector env steps and resets its games "
            "(make_vector_env(..., vectorized=False) gives sub-envs of "
            "their own).")

  @property
  def np_random(self) -> np.random.Generator:
    return self._vector._rng(self._index)

  @np_random.setter
  def np_random(self, value: np.random.Generator) -> None:
    self._vector._rngs[self._index] = value
    self._vector._seeds[self._index] = -1

  def clone_state(self) -> minipacman.MiniPacmanState:
    return self._vector._clone_state(self._index)

  def restore_state(self, state: minipacman.MiniPacmanState) -> None:
    self._vector._restore_state(self._index, state)

  def _observation(self) -> np.ndarray:
    return self._vector._games.maze_frame(self._index)
