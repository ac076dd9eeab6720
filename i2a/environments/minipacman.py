"""MiniPacman: the 15x19 maze game of the I2A paper, in pure numpy.

Where it sits: this is the framework's fast environment. Tests, CPU learning
checks, env-model training data and the perfect-simulator oracle
(`clone_state` / `restore_state`) all run on it; it imports no TensorFlow.
`register()` makes it available as `gymnasium.make("MiniPacman-<task>-v0")`.
This single env is the reference for the rules: `make_vector_env` steps N
games at once as arrays (`vector_minipacman.VectorMiniPacman`), with these
rules and the same random draws from the same per-game generators, so both
give bit-identical games (tests/test_vector_minipacman.py).

The game (Weber et al. 2017, appendix; the maze and the ghost logic follow
`PillEater`, S. Racaniere's DeepMind code copied in public reimplementations):
  * A 15x19 maze (`LAYOUT`). Every free cell holds food, except Pac-Man's start
    and the four corners, which hold power pills.
  * Actions (Discrete(5)): 0 NOOP, 1 RIGHT, 2 UP, 3 LEFT, 4 DOWN. Moving into a
    wall leaves Pac-Man where he is.
  * A power pill makes Pac-Man powered for 20 steps (the step he eats it and
    the next 19; `info["power"]` counts down). Touching a ghost while powered
    eats it; touching one otherwise kills Pac-Man and ends the episode
    (`terminated`). Collisions are checked after Pac-Man moves and again after
    the ghosts move, so the two can never pass through each other.
  * Ghosts move at 0.5 + 0.1 * (level - 1) cells per step (at most 1), half
    that while Pac-Man is powered, by accumulating the fractional speed and
    moving when it reaches one cell. A ghost keeps going along corridors and
    never reverses except at a dead end; at a junction it takes the exit that
    points most towards Pac-Man (most away while he is powered), or, with
    probability 0.05 when he is not powered, a random exit.
  * Level L has 1 + (L - 1) // 2 ghosts, at most one per ghost start (4).
  * Tasks (`TASKS`) set the rewards (step / food / pill / ghost / killed) and
    when a level ends; a level end starts the next level at once (food, pills,
    Pac-Man and ghosts back at their starts, level += 1) and the episode goes
    on. The episode terminates only when Pac-Man is killed; `max_steps`
    optionally truncates it.

Details we decided (the papers leave them open or differ):
  * Fixed starts (`LAYOUT`: P for Pac-Man, 1-4 for the ghosts in order of
    appearance) and four corner pills; PillEater draws random positions and
    uses two pills. Each ghost's first heading is drawn from `np_random`.
  * An eaten ghost goes back to its start and stays out of play until the
    next level (as PillEater removes it). So "all ghosts eaten" (hunt, ambush)
    is well defined and a ghost cannot be eaten again and again.
  * Pill cells hold no food: a step earns at most one of food / pill. Food
    or a pill is eaten when Pac-Man ends a step on it (NOOP included).
  * All ghosts share one speed accumulator, so they move on the same steps.
  * hunt and ambush levels end after 80 steps as the paper says (PillEater
    has no step limit there).
  * Several ghosts on Pac-Man's cell are all eaten (reward each) or kill him.
  * On the step that ends a level the observation is the first frame of the
    new level and `info["level_cleared"]` is True; the reward is that step's.
  * Stepping after Pac-Man was killed raises RuntimeError (call reset()).

Observation: uint8 RGB [15, 19, 3], one colour per cell kind (`COLORS`).
`render()` (render_mode="rgb_array") returns it upscaled 8x, [120, 152, 3].
`reset(options={"level": n})` starts an episode at level n (default 1).

Info (same keys at reset and every step): level, steps (this episode),
level_steps, power (steps left), ghosts (in play), and this step's events:
food_eaten, pill_eaten, ghosts_eaten (counts), killed, level_cleared (bools).

Exact copies: `clone_state()` returns a `MiniPacmanState` (everything,
including the RNG state); `restore_state(state)` brings it back, so replaying
the same actions gives bit-identical observations and rewards. Tests set up
situations with `dataclasses.replace(env.clone_state(), ...)`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

import gymnasium
import numpy as np
from gymnasium import spaces

HEIGHT, WIDTH = 15, 19
NUM_ACTIONS = 5
NOOP, RIGHT, UP, LEFT, DOWN = range(NUM_ACTIONS)
ACTION_NAMES = ("NOOP", "RIGHT", "UP", "LEFT", "DOWN")
POWER_PILL_DURATION = 20
GHOST_RANDOM_MOVE_PROBABILITY = 0.05
RENDER_SCALE = 8

# '#' wall, '.' food, 'o' power pill, 'P' Pac-Man start (no food),
# '1'-'4' ghost starts (with food), in the order ghosts join.
LAYOUT = (
    "###################",
    "#o..#.........#..o#",
    "#.#.#.#######.#.#.#",
    "#........1........#",
    "#.#.#.#######.#.#.#",
    "#.#......4......#.#",
    "#.####.#####.####.#",
    "#2.....#####.....3#",
    "#.####.#####.####.#",
    "#.#.............#.#",
    "#.#.#.#######.#.#.#",
    "#........P........#",
    "#.#.#.#######.#.#.#",
    "#o..#.........#..o#",
    "###################",
)

COLORS: Dict[str, Tuple[int, int, int]] = {
    "empty": (0, 0, 0),
    "wall": (255, 255, 255),
    "food": (0, 0, 255),
    "pill": (0, 255, 255),
    "pacman": (0, 255, 0),
    "ghost": (255, 0, 0),
    "edible_ghost": (255, 255, 0),
}


@dataclasses.dataclass(frozen=True)
class TaskRules:
  """Rewards of one task and when its levels end."""
  step: float
  food: float
  pill: float
  ghost: float
  killed: float
  ends_when_food_gone: bool = False
  ends_when_pills_gone: bool = False
  ends_when_ghosts_gone: bool = False
  level_step_limit: Optional[int] = None


TASKS: Dict[str, TaskRules] = {
    "regular": TaskRules(0.0, 1.0, 2.0, 5.0, 0.0, ends_when_food_gone=True),
    "avoid": TaskRules(0.1, -0.1, -5.0, -10.0, -20.0, ends_when_food_gone=True,
                       level_step_limit=128),
    "hunt": TaskRules(0.0, 0.0, 1.0, 10.0, -20.0, ends_when_ghosts_gone=True,
                      level_step_limit=80),
    "ambush": TaskRules(0.0, -0.1, 0.0, 10.0, -20.0,
                        ends_when_ghosts_gone=True, level_step_limit=80),
    "rush": TaskRules(0.0, -0.1, 10.0, 0.0, 0.0, ends_when_pills_gone=True),
}

# Cell codes in `MiniPacmanState.cells` (walls are always EMPTY there).
EMPTY, FOOD, PILL = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class MiniPacmanState:
  """An exact copy of a MiniPacmanEnv (positions are (row, col))."""
  task: str
  pacman: Tuple[int, int]
  ghosts: Tuple[Tuple[int, int, int], ...]  # (row, col, heading 1-4) in play
  cells: bytes  # [HEIGHT * WIDTH] row-major codes EMPTY / FOOD / PILL
  power: int  # steps of power left, 0 when not powered
  level: int
  level_steps: int  # steps taken in this level
  steps: int  # steps taken in this episode
  ghost_move_credit: int  # in 1/20 cell; the ghosts move when it reaches 20
  terminated: bool
  rng_state: Dict[str, Any]  # np_random.bit_generator.state


# Static maze tables, built once. Cells are indexed row * WIDTH + col.
_DELTAS = ((0, 0), (0, 1), (-1, 0), (0, -1), (1, 0))  # per action (dr, dc)
_REVERSE = (NOOP, LEFT, DOWN, RIGHT, UP)
_IS_WALL = tuple(ch == "#" for row in LAYOUT for ch in row)
_PACMAN_START = next(i for i, ch in enumerate("".join(LAYOUT)) if ch == "P")
_GHOST_STARTS = tuple("".join(LAYOUT).index(str(k)) for k in range(1, 5))
_INITIAL_CELLS = bytes(PILL if ch == "o" else FOOD if ch in ".1234" else EMPTY
                       for row in LAYOUT for ch in row)


def _build_moves() -> Tuple[Tuple[int, ...], ...]:
  """moves[cell][action] -> the cell reached (the same cell into a wall)."""
  moves = []
  for cell in range(HEIGHT * WIDTH):
    row, col = divmod(cell, WIDTH)
    moves.append(tuple(
        cell if _IS_WALL[cell] or _IS_WALL[(row + dr) * WIDTH + col + dc]
        else (row + dr) * WIDTH + col + dc for dr, dc in _DELTAS))
  return tuple(moves)


_MOVES = _build_moves()
_EXITS = tuple(tuple(a for a in range(1, NUM_ACTIONS) if _MOVES[c][a] != c)
               for c in range(HEIGHT * WIDTH))
_PALETTE = np.array([COLORS["empty"], COLORS["food"], COLORS["pill"],
                     COLORS["wall"]], dtype=np.uint8)
_WALL_MASK = np.array(_IS_WALL, dtype=bool)
_EMPTY_RGB = bytes(COLORS["empty"])
_PACMAN_RGB = bytes(COLORS["pacman"])
_GHOST_RGB = bytes(COLORS["ghost"])
_EDIBLE_GHOST_RGB = bytes(COLORS["edible_ghost"])


def _base_image(codes: np.ndarray) -> bytearray:
  """Walls, food and pills as flat RGB bytes [HEIGHT * WIDTH * 3]."""
  return bytearray(_PALETTE[np.where(_WALL_MASK, 3, codes)].tobytes())


_INITIAL_BASE = bytes(_base_image(np.frombuffer(_INITIAL_CELLS, np.uint8)))


class MiniPacmanEnv(gymnasium.Env):
  """MiniPacman as a gymnasium.Env; see the module docstring for the rules.

  Args:
    task: one of `TASKS` ("regular", "avoid", "hunt", "ambush", "rush").
    render_mode: None or "rgb_array".
    max_steps: if set, episodes are truncated after this many steps.
  """

  metadata = {"render_modes": ["rgb_array"], "render_fps": 8}

  def __init__(self, task: str = "regular", render_mode: Optional[str] = None,
               max_steps: Optional[int] = None):
    if task not in TASKS:
      raise ValueError(f"Unknown MiniPacman task {task!r}; expected one of "
                       f"{', '.join(TASKS)}.")
    if render_mode is not None and render_mode not in self.metadata[
        "render_modes"]:
      raise ValueError(f"Unsupported render_mode {render_mode!r}; expected "
                       "None or 'rgb_array'.")
    if max_steps is not None and (not isinstance(max_steps, int)
                                  or max_steps < 1):
      raise ValueError(f"max_steps must be None or a positive int, got "
                       f"{max_steps!r}.")
    self.task = task
    self.rules = TASKS[task]
    # Levels without a step limit never reach this one.
    self._level_step_limit = self.rules.level_step_limit or 2**62
    self.render_mode = render_mode
    self.max_steps = max_steps
    self.action_space = spaces.Discrete(NUM_ACTIONS)
    self.observation_space = spaces.Box(0, 255, (HEIGHT, WIDTH, 3), np.uint8)
    self._needs_reset = True
    self._cells = bytearray(_INITIAL_CELLS)
    self._base = bytearray(_INITIAL_BASE)
    self._pacman = _PACMAN_START
    self._ghost_cells: List[int] = []  # cells of the ghosts in play
    self._ghost_headings: List[int] = []  # their headings, RIGHT..DOWN
    self._food_left = self._pills_left = 0
    self._power = self._level = self._level_steps = self._steps = 0
    self._ghost_speed = self._ghost_move_credit = 0

  # ---------------------------------------------------------------- gym API

  def reset(self, *, seed: Optional[int] = None,
            options: Optional[Dict[str, Any]] = None
            ) -> Tuple[np.ndarray, Dict[str, Any]]:
    """Starts an episode at level 1, or at `options["level"]` if given."""
    super().reset(seed=seed)
    level = level_from_options(options)
    self._steps = 0
    self._start_level(level)
    self._needs_reset = False
    return self._observation(), self._info(0, 0, 0, False, False)

  def step(self, action: int
           ) -> Tuple[np.ndarray, float, bool, bool, Dict[str, Any]]:
    try:
      if not 0 <= action < NUM_ACTIONS:
        raise IndexError
      pacman = _MOVES[self._pacman][action]
    except (TypeError, IndexError, ValueError):
      raise ValueError(
          f"Invalid action {action!r}: MiniPacman actions are ints in "
          "[0, 5) (0 NOOP, 1 RIGHT, 2 UP, 3 LEFT, 4 DOWN).") from None
    if self._needs_reset:
      raise RuntimeError("MiniPacmanEnv.step() called before reset() or "
                         "after Pac-Man was killed; call reset() first.")
    rules = self.rules
    reward = rules.step
    self._steps += 1
    self._level_steps += 1
    power = self._power - 1 if self._power else 0
    self._pacman = pacman
    food_eaten = pill_eaten = ghosts_eaten = 0
    content = self._cells[pacman]
    if content:
      self._cells[pacman] = EMPTY
      self._base[3 * pacman:3 * pacman + 3] = _EMPTY_RGB
      if content == FOOD:
        self._food_left -= 1
        food_eaten = 1
        reward += rules.food
      else:
        self._pills_left -= 1
        pill_eaten = 1
        reward += rules.pill
        power = POWER_PILL_DURATION
    self._power = power

    ghosts = self._ghost_cells
    killed = False
    if ghosts:
      if pacman in ghosts:  # Pac-Man walked onto a ghost.
        killed, ghosts_eaten = self._collide(pacman, power)
      if not killed and ghosts:
        speed = self._ghost_speed if power else 2 * self._ghost_speed
        self._ghost_move_credit += speed
        if self._ghost_move_credit >= 20:
          self._ghost_move_credit -= 20
          self._move_ghosts(pacman, power)
          if pacman in ghosts:  # A ghost walked onto Pac-Man.
            killed, eaten = self._collide(pacman, power)
            ghosts_eaten += eaten
    reward += ghosts_eaten * rules.ghost

    level_cleared = False
    if killed:
      reward += rules.killed
      self._needs_reset = True
    elif ((rules.ends_when_food_gone and not self._food_left)
          or (rules.ends_when_pills_gone and not self._pills_left)
          or (rules.ends_when_ghosts_gone and not ghosts)
          or self._level_steps >= self._level_step_limit):
      self._start_level(self._level + 1)
      level_cleared = True
    truncated = self.max_steps is not None and self._steps >= self.max_steps
    info = self._info(food_eaten, pill_eaten, ghosts_eaten, killed,
                      level_cleared)
    return self._observation(), reward, killed, truncated, info

  def render(self) -> Optional[np.ndarray]:
    """The observation upscaled 8x [120, 152, 3] for render_mode='rgb_array'."""
    if self.render_mode != "rgb_array":
      return None
    return self._observation().repeat(RENDER_SCALE, 0).repeat(RENDER_SCALE, 1)

  # ----------------------------------------------------------- exact copies

  def clone_state(self) -> MiniPacmanState:
    """An exact, immutable copy of the game, including the RNG state."""
    if not self._level:
      raise RuntimeError("clone_state() needs a started game; call reset().")
    return MiniPacmanState(
        task=self.task,
        pacman=divmod(self._pacman, WIDTH),
        ghosts=tuple(divmod(c, WIDTH) + (h,) for c, h in zip(
            self._ghost_cells, self._ghost_headings)),
        cells=bytes(self._cells),
        power=self._power,
        level=self._level,
        level_steps=self._level_steps,
        steps=self._steps,
        ghost_move_credit=self._ghost_move_credit,
        terminated=self._needs_reset,
        rng_state=self.np_random.bit_generator.state)

  def restore_state(self, state: MiniPacmanState) -> None:
    """Puts the game exactly in `state` (from `clone_state`, maybe edited)."""
    if not isinstance(state, MiniPacmanState):
      raise TypeError("restore_state() expects a MiniPacmanState from "
                      f"clone_state(), got {type(state).__name__}.")
    if state.task != self.task:
      raise ValueError(f"State of task {state.task!r} cannot be restored "
                       f"into a {self.task!r} env; make an env of that task.")
    codes = np.frombuffer(state.cells, dtype=np.uint8)
    if codes.shape != (HEIGHT * WIDTH,) or codes.max() > PILL or codes[
        _WALL_MASK].any():
      raise ValueError(f"state.cells must be {HEIGHT * WIDTH} bytes in "
                       "{0, 1, 2} (EMPTY, FOOD, PILL), 0 on walls.")
    if state.level < 1:
      raise ValueError(f"state.level must be >= 1, got {state.level}.")
    self._pacman = _free_cell(state.pacman, "state.pacman")
    self._ghost_cells = [_free_cell(g[:2], "state.ghosts") for g in
                         state.ghosts]
    self._ghost_headings = [int(g[2]) for g in state.ghosts]
    if any(not RIGHT <= h <= DOWN for h in self._ghost_headings):
      raise ValueError("state.ghosts headings must be 1-4 (RIGHT, UP, LEFT, "
                       f"DOWN), got {[g[2] for g in state.ghosts]}.")
    self._cells = bytearray(state.cells)
    self._base = _base_image(codes)
    self._food_left = self._cells.count(FOOD)
    self._pills_left = self._cells.count(PILL)
    self._power = int(state.power)
    self._level = int(state.level)
    self._ghost_speed = _ghost_speed(self._level)
    self._level_steps = int(state.level_steps)
    self._steps = int(state.steps)
    self._ghost_move_credit = int(state.ghost_move_credit)
    self._needs_reset = bool(state.terminated)
    self.np_random.bit_generator.state = state.rng_state

  # ---------------------------------------------------------------- helpers

  def _start_level(self, level: int) -> None:
    self._level = level
    self._level_steps = 0
    self._cells[:] = _INITIAL_CELLS
    self._base[:] = _INITIAL_BASE
    self._food_left = _INITIAL_CELLS.count(FOOD)
    self._pills_left = _INITIAL_CELLS.count(PILL)
    self._pacman = _PACMAN_START
    num_ghosts = min(1 + (level - 1) // 2, len(_GHOST_STARTS))
    self._ghost_cells = list(_GHOST_STARTS[:num_ghosts])
    self._ghost_headings = self.np_random.integers(
        1, NUM_ACTIONS, size=num_ghosts).tolist()
    self._power = 0
    self._ghost_speed = _ghost_speed(level)
    self._ghost_move_credit = 0

  def _collide(self, pacman: int, power: int) -> Tuple[bool, int]:
    """Pac-Man meets the ghosts on his cell: (killed, number eaten)."""
    if not power:
      return True, 0
    eaten = 0
    while pacman in self._ghost_cells:
      i = self._ghost_cells.index(pacman)
      del self._ghost_cells[i], self._ghost_headings[i]
      eaten += 1
    return False, eaten

  def _move_ghosts(self, pacman: int, power: int) -> None:
    """Moves every ghost one cell (PillEater's ghost logic)."""
    pac_row, pac_col = divmod(pacman, WIDTH)
    headings = self._ghost_headings
    for i, cell in enumerate(self._ghost_cells):
      heading = headings[i]
      exits = _EXITS[cell]
      if len(exits) == 1:  # Dead end: turn back.
        heading = exits[0]
      elif len(exits) == 2:  # Corridor or corner: go on, never reverse.
        if heading not in exits:
          heading = exits[1] if exits[0] == _REVERSE[heading] else exits[0]
      else:  # Junction: any exit but back.
        choices = [e for e in exits if e != _REVERSE[heading]]
        if (not power and
            self.np_random.random() < GHOST_RANDOM_MOVE_PROBABILITY):
          heading = choices[int(self.np_random.integers(len(choices)))]
        else:
          row, col = divmod(cell, WIDTH)
          scores = [(pac_row - row) * _DELTAS[e][0] +
                    (pac_col - col) * _DELTAS[e][1] for e in choices]
          best = min(scores) if power else max(scores)
          heading = choices[scores.index(best)]
      headings[i] = heading
      self._ghost_cells[i] = _MOVES[cell][heading]

  def _observation(self) -> np.ndarray:
    image = bytearray(self._base)
    color = _EDIBLE_GHOST_RGB if self._power else _GHOST_RGB
    for cell in self._ghost_cells:
      image[3 * cell:3 * cell + 3] = color
    image[3 * self._pacman:3 * self._pacman + 3] = _PACMAN_RGB
    return np.frombuffer(image, dtype=np.uint8).reshape(HEIGHT, WIDTH, 3)

  def _info(self, food_eaten: int, pill_eaten: int, ghosts_eaten: int,
            killed: bool, level_cleared: bool) -> Dict[str, Any]:
    return {
        "level": self._level,
        "steps": self._steps,
        "level_steps": self._level_steps,
        "power": self._power,
        "ghosts": len(self._ghost_cells),
        "food_eaten": food_eaten,
        "pill_eaten": pill_eaten,
        "ghosts_eaten": ghosts_eaten,
        "killed": killed,
        "level_cleared": level_cleared,
    }


def level_from_options(options: Optional[Dict[str, Any]]) -> int:
  """The starting level that reset `options` ask for (1 by default).

  Raises:
    ValueError: for options other than 'level', or a level that is not an
      int >= 1.
  """
  options = options or {}
  unknown = sorted(set(options) - {"level"})
  if unknown:
    raise ValueError(f"Unknown reset options {unknown}; MiniPacman accepts "
                     "only {'level': int >= 1}.")
  level = options.get("level", 1)
  if not isinstance(level, (int, np.integer)) or level < 1:
    raise ValueError(f"options['level'] must be an int >= 1, got {level!r}.")
  return int(level)


def _ghost_speed(level: int) -> int:
  """Ghost speed in 1/10 cell per step: 0.5 + 0.1 * (level - 1), at most 1."""
  return min(5 + (level - 1), 10)


def _free_cell(position: Tuple[int, int], what: str) -> int:
  row, col = (int(x) for x in position)
  if not (0 <= row < HEIGHT and 0 <= col < WIDTH) or _IS_WALL[
      row * WIDTH + col]:
    raise ValueError(f"{what}: {tuple(position)} is not a free maze cell "
                     f"(row, col) of the {HEIGHT}x{WIDTH} LAYOUT.")
  return row * WIDTH + col


def register() -> None:
  """Registers MiniPacman-<task>-v0 for every task (safe to call twice)."""
  for task in TASKS:
    env_id = f"MiniPacman-{task}-v0"
    if env_id not in gymnasium.registry:
      gymnasium.register(
          id=env_id,
          entry_point="i2a.environments.minipacman:MiniPacmanEnv",
          kwargs={"task": task})
