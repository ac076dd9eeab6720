"""Model-predictive control with a frozen environment model (PlaNet-style).

Where it sits: a second consumer of `envmodels`, next to the I2A. Each
environment step the planner takes the current context of every environment
(the last `context_length` frames for a learned model; the live environments
for the emulator oracle), plans H model steps ahead with the categorical
cross-entropy method (agents/planning/cem.py), scoring each candidate by the
model's predicted rewards (summed, discounted per model step, averaged over
`num_samples` model samples), and returns the first model step of the best
plan: one primitive action, or c of them for a jumpy model. The caller
executes them and plans again (i2a/run/plan.py does that for the
`python -m i2a.plan` binary).

Batching: all N environments' candidates go through the model in one
rollout of N * population * num_samples rows (the state tiled row-wise).
A learned model plans inside one `tf.function` traced once for any N; the
oracle plans eagerly (it runs the emulator on the host anyway), from
snapshots of the live environments that are released after each plan.

Only the public envmodels API is used: `model.spec`, `initial_state`,
`rollout`, `tile_state`, `deterministic` (one sample per candidate), and
for a `LiveEnvModel` (the oracle) `initial_state_from_envs` / `release`
(tests/agents/test_planning.py checks the imports of this package).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping, NamedTuple, Optional, Sequence

import numpy as np
import tensorflow as tf

import envmodels
from agents.acting import uniform_actions
from agents.planning import cem

SELECT_MODES = ("best", "mode")


@dataclasses.dataclass(frozen=True)
class PlannerConfig:
  """The planner's settings (configs/agents/planning.py, `config.planner`).

  Attributes:
    horizon: H, model steps planned ahead (H * jump primitive actions).
    population: candidate sequences per environment per CEM iteration.
    iterations: CEM refits of the belief.
    num_elites: top candidates the belief is refitted to.
    smoothing: weight of the old belief in each refit,
      new = smoothing * old + (1 - smoothing) * elite frequencies.
    discount: per model step; a candidate scores sum_t discount^t r_t.
    num_samples: model samples averaged per candidate (stochastic models; a
      deterministic one, `model.deterministic`, always uses 1: one sample
      says it all).
    select: 'best' executes the best candidate scored, 'mode' the argmax of
      the final belief.
  """
  horizon: int = 8
  population: int = 64
  iterations: int = 4
  num_elites: int = 8
  smoothing: float = 0.25
  discount: float = 1.0
  num_samples: int = 1
  select: str = "best"

  def __post_init__(self):
    cem.check_settings(self.horizon, 1, 2, self.population, self.iterations,
                       self.num_elites, self.smoothing)
    if not isinstance(self.num_samples, int) or self.num_samples < 1:
      raise ValueError(f"planner num_samples must be a positive int, given "
                       f"{self.num_samples!r}.")
    if not 0.0 < self.discount <= 1.0:
      raise ValueError(f"planner discount must be in (0, 1], given "
                       f"{self.discount!r}.")
    if self.select not in SELECT_MODES:
      raise ValueError(f"planner select must be one of {SELECT_MODES}, "
                       f"given {self.select!r}.")

  @classmethod
  def from_config(cls, config: Mapping[str, Any]) -> "PlannerConfig":
    """From a ConfigDict or dict (config.planner); unknown keys are refused."""
    fields = dict(config.to_dict() if hasattr(config, "to_dict") else config)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - known)
    if unknown:
      raise ValueError(f"unknown planner settings {unknown}; known: "
                       f"{sorted(known)}.")
    return cls(**fields)


class Plan(NamedTuple):
  """One planning step for N environments (numpy)."""
  actions: np.ndarray  # int32 [N, c]: execute these c primitive actions
  sequence: np.ndarray  # int32 [N, H, c]: the whole chosen plan
  predicted_return: np.ndarray  # float32 [N]: its score ('mode': elites')
  probabilities: np.ndarray  # float32 [N, H, c, A]: the final CEM belief


class CEMPlanner:
  """MPC over a frozen envmodel with the categorical CEM (module docstring).

  Args:
    model: an envmodels.EnvModel (envmodels.load(...)), or the emulator
      oracle (envmodels.oracle.OracleModel, see agents.builder.make_oracle).
    config: PlannerConfig.
    seed: seeds the CEM's sampling (the model's own noise comes from the
      seed it was loaded with).
    compile: plan inside tf.function; default: for models that start from
      frames (not a LiveEnvModel, which runs the emulator on the host).
  """

  def __init__(self, model: envmodels.EnvModel,
               config: PlannerConfig = PlannerConfig(), seed: int = 0,
               # pylint: disable-next=redefined-builtin
               compile: Optional[bool] = None):
    if not isinstance(config, PlannerConfig):
      config = PlannerConfig.from_config(config)
    self.model = model
    self.config = config
    self.spec = model.spec
    cem.check_settings(config.horizon, self.spec.jump, self.spec.num_actions,
                       config.population, config.iterations,
                       config.num_elites, config.smoothing)
    # The oracle is stepped from live environments, not from frames.
    self.needs_envs = isinstance(model, envmodels.LiveEnvModel)
    self.num_samples = 1 if model.deterministic else config.num_samples
    self._seeds = tf.random.Generator.from_seed(seed)
    self._discounts = tf.constant(
        config.discount ** np.arange(config.horizon), tf.float32)  # [H]
    if compile is None:
      compile = not self.needs_envs
    self._plan_from_context = self._plan_from_context_impl
    if compile and not self.needs_envs:
      frame = tuple(self.spec.observation_shape)
      self._plan_from_context = tf.function(
          self._plan_from_context_impl, input_signature=[
              tf.TensorSpec([None, self.spec.context_length, *frame],
                            tf.uint8),
              tf.TensorSpec([2], tf.int64)])

  @property
  def jump(self) -> int:
    """Primitive actions per plan (c)."""
    return self.spec.jump

  @property
  def context_length(self) -> int:
    """Frames per context window (oldest first), spaced c primitive steps."""
    return self.spec.context_length

  # -- Planning --------------------------------------------------------------

  def score(self, state: Any, actions: tf.Tensor) -> tf.Tensor:
    """Returns of candidates: state for N * P rows (each row's state), actions
    int32 [N * P, H, c] -> float32 [N * P], averaged over num_samples."""
    samples = self.num_samples
    if samples > 1:
      state = self.model.tile_state(state, samples)
      actions = tf.repeat(actions, samples, axis=0)  # [N * P * S, H, c]
    rollout = self.model.rollout(state, actions)
    returns = tf.reduce_sum(rollout.rewards * self._discounts, axis=1)
    return tf.reduce_mean(tf.reshape(returns, [-1, samples]), axis=1)

  def _plan_state(self, state: Any, batch_size, seed: tf.Tensor
                  ) -> cem.CEMResult:
    config = self.config
    tiled = self.model.tile_state(state, config.population)  # [N * P, ...]
    return cem.categorical_cem(
        functools.partial(self.score, tiled), batch_size,
        horizon=config.horizon, jump=self.spec.jump,
        num_actions=self.spec.num_actions, population=config.population,
        iterations=config.iterations, num_elites=config.num_elites,
        smoothing=config.smoothing, seed=seed)

  def _plan_from_context_impl(self, context: tf.Tensor, seed: tf.Tensor
                              ) -> cem.CEMResult:
    state = self.model.initial_state(context)
    return self._plan_state(state, tf.shape(context)[0], seed)

  def _check_context(self, context: Optional[np.ndarray]) -> np.ndarray:
    expected = (self.spec.context_length,) + tuple(
        self.spec.observation_shape)
    if context is None:
      raise ValueError(
          f"the {self.spec.kind!r} model plans from frames: pass context, "
          f"uint8 [N, {', '.join(map(str, expected))}] (each environment's "
          "last context_length frames, oldest first).")
    context = np.asarray(context)
    if context.ndim != 5 or context.shape[1:] != expected:
      raise ValueError(
          f"planner context: expected uint8 [N, "
          f"{', '.join(map(str, expected))}] (the model spec's "
          f"context_length and observation_shape), given "
          f"{list(context.shape)}.")
    return context.astype(np.uint8, copy=False)

  def plan(self, context: Optional[np.ndarray] = None,
           envs: Optional[Sequence[Any]] = None) -> Plan:
    """Plans for N environments.

    Args:
      context: uint8 [N, context_length, H, W, C], the last frames of each
        environment (oldest first, c primitive steps apart); what a learned
        model needs. The oracle uses context[:, -1] as the current frames
        when given.
      envs: the N live environments (only read); what the oracle needs.
    Returns:
      Plan; execute plan.actions[i] (c primitive actions) in environment i.
    """
    seed = self._seeds.make_seeds(1)[:, 0]
    if self.needs_envs:
      envs = list(envs) if envs is not None else []
      if not envs:
        raise ValueError(
            "the emulator oracle plans from the live environments: pass "
            "envs=[env, ...] (built like the oracle's env_fn, e.g. "
            "i2a.environments.make_env(protocol)).")
      frames = None
      if context is not None:
        frames = np.asarray(context)[:, -1]
      state = self.model.initial_state_from_envs(envs, observations=frames)
      try:
        result = self._plan_state(state, len(envs), seed)
      finally:
        self.model.release(state)
    else:
      context = self._check_context(context)
      result = self._plan_from_context(tf.constant(context), seed)
    if self.config.select == "best":
      sequence, predicted = result.best_actions, result.best_return
    else:
      sequence, predicted = result.mode_actions, result.elite_return
    sequence = sequence.numpy()
    return Plan(actions=sequence[:, 0], sequence=sequence,
                predicted_return=predicted.numpy(),
                probabilities=result.probabilities.numpy())

  def act(self, context: Optional[np.ndarray] = None,
          envs: Optional[Sequence[Any]] = None) -> np.ndarray:
    """int32 [N, c]: the primitive actions to execute now (see `plan`)."""
    return self.plan(context, envs).actions


class UniformRandomPolicy:
  """The baseline: uniformly random primitive actions, one per env step.

  Same interface as CEMPlanner (`act`, `jump`, `context_length`,
  `needs_envs`), so the runner evaluates both the same way.
  """

  needs_envs = False
  jump = 1
  context_length = 1

  def __init__(self, num_actions: int, seed: int = 0):
    self.num_actions = int(num_actions)
    self._rng = np.random.default_rng(seed)

  def act(self, context: Optional[np.ndarray] = None,
          envs: Optional[Sequence[Any]] = None) -> np.ndarray:
    count = len(context) if context is not None else len(envs)
    return uniform_actions(self.num_actions, count, self._rng)[:, None]
