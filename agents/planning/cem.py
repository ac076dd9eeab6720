"""The categorical cross-entropy method over discrete action sequences.

Where it sits: the planner (agents/planning/planner.py) asks this module for
the best sequence of H model steps, each of c primitive actions, for a batch
of B environments at once; the candidates are scored by a function the
planner builds from an environment model's rollouts. Pure TensorFlow, no
model in sight, so it runs eagerly (the emulator oracle) and inside
`tf.function` (learned models) alike.

The belief is one categorical per primitive action slot, probabilities
[B, H, c, A] (uniform at first). Each of `iterations` rounds:
  1. samples `population` sequences per batch row, int32 [B, P, H, c];
  2. scores all B * P of them in ONE call of `score_fn` ([B * P, H, c] ->
     returns [B * P]), so a model sees one big batch;
  3. takes the top `num_elites` per row and refits the belief to their
     action frequencies, smoothed:
       probabilities = smoothing * old + (1 - smoothing) * elite_frequency.
The best candidate ever scored is kept per row; `CEMResult` returns it
together with the final belief (whose per-slot argmax is `mode_actions`).
PlaNet (Hafner et al. 2019) plans with a Gaussian belief over continuous
actions; the categorical belief is the discrete analogue (one practitioner in
shared/papers/planet-atari-hyperparameters-thread.txt floored a Gaussian
onto Atari actions instead, and lists "sampling actions from a discrete
distribution" as the thing to try).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Tuple

import tensorflow as tf

ScoreFn = Callable[[tf.Tensor], tf.Tensor]  # int32 [N, H, c] -> float32 [N]


class CEMResult(NamedTuple):
  best_actions: tf.Tensor  # int32 [B, H, c]: the best sequence scored
  best_return: tf.Tensor  # float32 [B]: its score
  probabilities: tf.Tensor  # float32 [B, H, c, A]: the final belief
  mode_actions: tf.Tensor  # int32 [B, H, c]: argmax of the final belief
  elite_return: tf.Tensor  # float32 [B]: mean score of the last elites


def check_settings(horizon: int, jump: int, num_actions: int, population: int,
                   iterations: int, num_elites: int, smoothing: float) -> None:
  """ValueError naming the setting, what it must be and what was given."""
  for name, value in (("horizon", horizon), ("jump", jump),
                      ("population", population), ("iterations", iterations),
                      ("num_elites", num_elites)):
    if not isinstance(value, int) or value < 1:
      raise ValueError(f"CEM {name} must be a positive int, given {value!r}.")
  if not isinstance(num_actions, int) or num_actions < 2:
    raise ValueError(f"CEM needs at least 2 actions to choose from, given "
                     f"num_actions={num_actions!r}.")
  if num_elites > population:
    raise ValueError(f"CEM num_elites ({num_elites}) must be at most the "
                     f"population ({population}); lower num_elites or raise "
                     "population.")
  if not 0.0 <= smoothing < 1.0:
    raise ValueError(f"CEM smoothing must be in [0, 1) (the weight of the old "
                     f"belief), given {smoothing!r}.")


def uniform_probabilities(batch_size, horizon: int, jump: int,
                          num_actions: int) -> tf.Tensor:
  """float32 [B, H, c, A], every slot uniform (B may be a tensor)."""
  return tf.fill([batch_size, horizon, jump, num_actions],
                 1.0 / num_actions)


def sample_sequences(probabilities: tf.Tensor, population: int,
                     seed: tf.Tensor) -> tf.Tensor:
  """probabilities [B, H, c, A] -> int32 candidates [B, P, H, c] (stateless)."""
  shape = tf.shape(probabilities)
  batch, horizon, jump, num_actions = shape[0], shape[1], shape[2], shape[3]
  logits = tf.math.log(tf.reshape(probabilities, [-1, num_actions]))
  samples = tf.random.stateless_categorical(
      logits, population, seed, dtype=tf.int32)  # [B * H * c, P]
  samples = tf.reshape(samples, [batch, horizon, jump, population])
  return tf.transpose(samples, [0, 3, 1, 2])  # [B, P, H, c]


def elite_frequencies(candidates: tf.Tensor, returns: tf.Tensor,
                      num_elites: int, num_actions: int
                      ) -> Tuple[tf.Tensor, tf.Tensor]:
  """The top `num_elites` candidates [B, P, H, c] by returns [B, P]: their
  action frequencies float32 [B, H, c, A] and mean return [B]."""
  elite_returns, elite_index = tf.math.top_k(returns, k=num_elites)  # [B, K]
  elites = tf.gather(candidates, elite_index, batch_dims=1)  # [B, K, H, c]
  frequencies = tf.reduce_mean(
      tf.one_hot(elites, num_actions, dtype=tf.float32), axis=1)
  return frequencies, tf.reduce_mean(elite_returns, axis=1)


def categorical_cem(score_fn: ScoreFn, batch_size, horizon: int, jump: int,
                    num_actions: int, population: int, iterations: int,
                    num_elites: int, smoothing: float, seed: tf.Tensor,
                    initial_probabilities: Optional[tf.Tensor] = None
                    ) -> CEMResult:
  """Plans B action sequences of H model steps x c primitive actions.

  Args:
    score_fn: int32 actions [B * P, H, c] (row b * P + p is candidate p of
      batch row b) -> float32 returns [B * P]; higher is better.
    batch_size: B, an int or a scalar int32 tensor.
    horizon, jump, num_actions: H, c, A.
    population, iterations, num_elites, smoothing: the CEM settings (module
      docstring).
    seed: int32/int64 [2], the stateless seed of this call's sampling.
    initial_probabilities: float32 [B, H, c, A]; uniform by default.
  Returns:
    CEMResult.
  """
  check_settings(horizon, jump, num_actions, population, iterations,
                 num_elites, smoothing)
  if initial_probabilities is None:
    probabilities = uniform_probabilities(batch_size, horizon, jump,
                                          num_actions)
  else:
    probabilities = tf.convert_to_tensor(initial_probabilities, tf.float32)
  seeds = tf.random.experimental.stateless_split(
      tf.cast(seed, tf.int64), num=iterations)  # [iterations, 2]
  best_actions = tf.zeros([batch_size, horizon, jump], tf.int32)
  best_return = tf.fill([batch_size], float("-inf"))
  elite_return = tf.zeros([batch_size], tf.float32)

  def body(i, probabilities, best_actions, best_return, elite_return):
    candidates = sample_sequences(probabilities, population,
                                  seeds[i])  # [B, P, H, c]
    returns = score_fn(tf.reshape(candidates, [-1, horizon, jump]))
    returns = tf.reshape(tf.cast(returns, tf.float32),
                         [-1, population])  # [B, P]
    frequencies, elite_return = elite_frequencies(candidates, returns,
                                                  num_elites, num_actions)
    probabilities = smoothing * probabilities + (1.0 - smoothing) * frequencies
    top = tf.argmax(returns, axis=1, output_type=tf.int32)  # [B]
    top_return = tf.gather(returns, top, batch_dims=1)
    top_actions = tf.gather(candidates, top, batch_dims=1)  # [B, H, c]
    better = top_return > best_return
    best_actions = tf.where(better[:, None, None], top_actions, best_actions)
    best_return = tf.where(better, top_return, best_return)
    return i + 1, probabilities, best_actions, best_return, elite_return

  _, probabilities, best_actions, best_return, elite_return = tf.while_loop(
      lambda i, *_: i < iterations, body,
      (tf.constant(0), probabilities, best_actions, best_return,
       elite_return))
  return CEMResult(
      best_actions=best_actions, best_return=best_return,
      probabilities=probabilities,
      mode_actions=tf.argmax(probabilities, axis=-1, output_type=tf.int32),
      elite_return=elite_return)
