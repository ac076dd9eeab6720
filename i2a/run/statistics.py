"""Confidence intervals over seeds, for the sweep reports
(i2a/run/sweep_report.py, sweep_combine.py) and the benchmarks' tables.

  values per seed -> t_interval(values)       Interval: the mean and its
                                              Student t interval
  two groups      -> welch_interval(a, b)     Difference: mean(a) - mean(b)
                                              and its Welch t interval

Student's t quantiles are computed here (the regularized incomplete beta
function by its continued fraction, then bisection on the CDF), so the
reports need no SciPy.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence


def _continued_fraction(a: float, b: float, x: float) -> float:
  """The continued fraction of the incomplete beta function (modified Lentz;
  Numerical Recipes 6.4), converging for x < (a + 1) / (a + b + 2)."""
  tiny, eps = 1e-300, 1e-16
  c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
  d = 1.0 / (d if abs(d) > tiny else tiny)
  result = d
  for m in range(1, 1000):
    for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                      -(a + m) * (a + b + m) * x / ((a + 2 * m) *
                                                    (a + 2 * m + 1))):
      d = 1.0 + numerator * d
      d = 1.0 / (d if abs(d) > tiny else tiny)
      c = 1.0 + numerator / c
      c = c if abs(c) > tiny else tiny
      result *= c * d
    if abs(c * d - 1.0) < eps:
      break
  return result


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
  """I_x(a, b), the CDF of a Beta(a, b) variable at x."""
  if x <= 0.0:
    return 0.0
  if x >= 1.0:
    return 1.0
  log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) +
               a * math.log(x) + b * math.log1p(-x))
  if x < (a + 1.0) / (a + b + 2.0):
    return math.exp(log_front) * _continued_fraction(a, b, x) / a
  return 1.0 - math.exp(log_front) * _continued_fraction(b, a, 1.0 - x) / b


def student_t_cdf(t: float, df: float) -> float:
  """P(T <= t) for Student's t with `df` degrees of freedom."""
  tail = 0.5 * regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
  return 1.0 - tail if t > 0 else tail


def student_t_quantile(p: float, df: float) -> float:
  """The t with P(T <= t) = p (bisection on the CDF, to machine precision)."""
  if not 0.0 < p < 1.0:
    raise ValueError(f"p must be in (0, 1), given {p}.")
  if df <= 0:
    raise ValueError(f"df must be > 0, given {df}.")
  if p == 0.5:
    return 0.0
  if p < 0.5:
    return -student_t_quantile(1.0 - p, df)
  low, high = 0.0, 1.0
  while student_t_cdf(high, df) < p:
    low, high = high, 2.0 * high
  for _ in range(200):
    middle = 0.5 * (low + high)
    if middle in (low, high):
      break
    if student_t_cdf(middle, df) < p:
      low = middle
    else:
      high = middle
  return 0.5 * (low + high)


@dataclasses.dataclass
class Interval:
  """The mean of n values and its Student t confidence interval (None for
  n = 1: one seed says nothing about the spread)."""
  mean: float
  n: int
  std: Optional[float] = None  # the sample standard deviation (n - 1)
  half_width: Optional[float] = None
  low: Optional[float] = None
  high: Optional[float] = None
  confidence: float = 0.95

  def format(self, spec: str = ".2f") -> str:
    if self.half_width is None:
      return f"{self.mean:{spec}} (n={self.n}, no interval)"
    return (f"{self.mean:{spec}} ± {self.half_width:{spec}} "
            f"[{self.low:{spec}}, {self.high:{spec}}] (n={self.n})")


def t_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
  """Mean and two-sided Student t interval of `values` (one per seed):
  mean ± t_{(1 + confidence) / 2, n - 1} * s / sqrt(n), s the sample
  standard deviation."""
  values = [float(v) for v in values]
  if not values:
    raise ValueError("t_interval needs at least one value.")
  n = len(values)
  mean = math.fsum(values) / n
  if n == 1:
    return Interval(mean, 1, confidence=confidence)
  std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
  half = student_t_quantile(0.5 + confidence / 2.0, n - 1) * std / math.sqrt(n)
  return Interval(mean, n, std, half, mean - half, mean + half, confidence)


@dataclasses.dataclass
class Difference:
  """mean(a) - mean(b) of two groups of seeds and its Welch t confidence
  interval (unequal variances, Welch-Satterthwaite degrees of freedom);
  None bounds when a group has one seed."""
  mean: float
  n_a: int
  n_b: int
  df: Optional[float] = None
  half_width: Optional[float] = None
  low: Optional[float] = None
  high: Optional[float] = None
  confidence: float = 0.95

  @property
  def separated(self) -> bool:
    """Whether the interval excludes 0 (the two means differ at this
    confidence)."""
    return self.low is not None and (self.low > 0 or self.high < 0)

  def format(self, spec: str = ".2f") -> str:
    if self.half_width is None:
      return f"{self.mean:+{spec}} (n={self.n_a}, {self.n_b}: no interval)"
    if self.half_width == 0.0:
      # Both groups constant (every seed the same value, e.g. agents that
      # all stand still): the interval is the point, say why.
      return (f"{self.mean:+{spec}} (n={self.n_a}, {self.n_b}; every seed "
              "the same value on each side: no spread)")
    return (f"{self.mean:+{spec}} ± {self.half_width:{spec}} "
            f"[{self.low:{spec}}, {self.high:{spec}}] (n={self.n_a}, "
            f"{self.n_b}; df={self.df:.1f})")


def welch_interval(a: Sequence[float], b: Sequence[float],
                   confidence: float = 0.95) -> Difference:
  """mean(a) - mean(b) ± t_{(1 + confidence) / 2, df} * sqrt(s_a^2 / n_a +
  s_b^2 / n_b), df by Welch-Satterthwaite: whether two configurations'
  means differ, which two overlapping t intervals do not decide."""
  a, b = [float(v) for v in a], [float(v) for v in b]
  if not a or not b:
    raise ValueError("welch_interval needs at least one value in each "
                     f"group, given {len(a)} and {len(b)}.")
  one, two = t_interval(a, confidence), t_interval(b, confidence)
  mean = one.mean - two.mean
  if one.std is None or two.std is None:
    return Difference(mean, one.n, two.n, confidence=confidence)
  va, vb = one.std ** 2 / one.n, two.std ** 2 / two.n
  if va + vb == 0.0:
    return Difference(mean, one.n, two.n, float(one.n + two.n - 2), 0.0,
                      mean, mean, confidence)
  df = (va + vb) ** 2 / (va ** 2 / (one.n - 1) + vb ** 2 / (two.n - 1))
  half = student_t_quantile(0.5 + confidence / 2.0, df) * math.sqrt(va + vb)
  return Difference(mean, one.n, two.n, df, half, mean - half, mean + half,
                    confidence)
