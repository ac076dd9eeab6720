"""The reward head's coding, derived from or checked against a dataset.

`networks.RewardHead` codes a reward r as bits (`networks.encode_reward`):
is-zero, sign, and the `bits` binary digits of m = floor(|r| * scale + 1e-4)
clipped to 2**bits - 1; a code decodes to sign * m / scale. So the head
represents exactly the multiples of 1 / scale up to (2**bits - 1) / scale in
magnitude and silently turns every other reward into a neighbour: with
scale 0.1, MsPacman's 10 and 50 are coded exactly, but a clipped reward of 1
(or 3, or -1) becomes 0, and with 8 bits anything beyond 2550 is clipped.

A trainer calls `resolve_scale` with the distinct rewards its model is
trained on, before it trains or writes anything:
  * scale 'auto': `derive_scale` picks the coarsest scale under which every
    reward is a whole multiple of 1 / scale (1 / the rewards' greatest
    common divisor, e.g. 0.1 for MsPacman's multiples of 10, 10 for
    MiniPacman's multiples of 0.1, 1 for clipped rewards), then the bits are
    checked;
  * a numeric scale is checked.
Both refuse with `RewardCodingError` (a ValueError) naming the rewards that
do not round-trip (decode(encode(r)) != r beyond `tolerance`), the scale and
the bits, and a scale/bits pair that codes them all.

Only numpy and the TensorFlow ops of `networks.encode_reward` are used; the
round trip runs the very ops that make the training targets.
"""

from __future__ import annotations

import dataclasses
import fractions
import math
from typing import List, Optional, Sequence, Union

import numpy as np
import tensorflow as tf

from envmodels import networks

AUTO = "auto"
# 'auto' looks for rewards on a grid of 1/q, q <= MAX_DENOMINATOR: finer
# grids (or rewards with no grid at all) are refused rather than coded.
MAX_DENOMINATOR = 10_000
# Relative tolerance within which a float32 reward is taken to be a fraction
# p/q (2 float32 ulps: float32(0.1) is 1/10, a float32 sum of c rewards is
# their exact sum). Finer would miss 1/10 in float32(12345.1); coarser would
# read it as 12345 + 1/9.
FRACTION_RTOL = 2.4e-7
# Magnitudes at or below this count as 0 when deriving a scale. A window's
# reward is a difference of float64 running sums of float32 rewards: exact
# until the running sum outgrows the finest reward by ~2**29, beyond which a
# window whose rewards cancel carries a residue (the coding maps it to 0,
# within tolerance).
ZERO_ATOL = 1e-6
# How many offending rewards an error message names.
SHOWN = 12


class RewardCodingError(ValueError):
  """Rewards the reward head cannot code, with the scale and bits that can."""


@dataclasses.dataclass(frozen=True)
class Miscoded:
  """A reward that does not survive the coding."""
  reward: float
  decoded: float
  overflow: bool  # its magnitude needs more than `bits` bits


def distinct(rewards: Union[np.ndarray, Sequence[float]]) -> np.ndarray:
  """The distinct values of `rewards` as sorted float32 (-0.0 is 0.0)."""
  values = np.unique(np.asarray(rewards, np.float32).ravel())
  return values + np.float32(0.0)  # -0.0 -> 0.0


def parse_scale(scale: Union[str, float, int]) -> Union[str, float]:
  """'auto' or a positive number (a numeric string from a flag included)."""
  if isinstance(scale, str):
    if scale.strip().lower() == AUTO:
      return AUTO
    try:
      value = float(scale)
    except ValueError:
      raise ValueError(f"reward_scale must be {AUTO!r} or a positive number, "
                       f"given {scale!r}.") from None
  elif isinstance(scale, bool) or not isinstance(scale, (int, float,
                                                         np.number)):
    raise ValueError(f"reward_scale must be {AUTO!r} or a positive number, "
                     f"given {scale!r}.")
  else:
    value = float(scale)
  if not math.isfinite(value) or value <= 0:
    raise ValueError(f"reward_scale must be {AUTO!r} or a positive number, "
                     f"given {scale!r}.")
  return value


def tolerance(rewards: np.ndarray, scale: float) -> np.ndarray:
  """How far decode(encode(r)) may be from r: the encoder's 1e-4 of a code
  step (it rounds |r| * scale up from 1e-4 below an integer) plus float32
  rounding."""
  return 1e-4 / scale + FRACTION_RTOL * np.abs(rewards)


def round_trip(rewards: np.ndarray, scale: float, bits: int) -> np.ndarray:
  """decode(encode(r)) with the reward head's own ops: float32 [N]."""
  values = tf.constant(np.asarray(rewards, np.float32))
  code = networks.encode_reward(values, int(bits), float(scale))
  return networks.decode_reward(code, float(scale)).numpy()


def max_magnitude(bits: int) -> int:
  return 2**int(bits) - 1


def _magnitudes(rewards: np.ndarray, scale: float) -> np.ndarray:
  """floor(|r| * scale + 1e-4) before clipping, as the encoder computes it."""
  scaled = np.abs(np.asarray(rewards, np.float32)) * np.float32(scale)
  return np.floor(scaled + np.float32(1e-4))


def miscoded(rewards: np.ndarray, scale: float, bits: int) -> List[Miscoded]:
  """The rewards that do not round-trip through the coding (scale, bits)."""
  rewards = distinct(rewards)
  decoded = round_trip(rewards, scale, bits)
  bad = np.abs(decoded - rewards) > tolerance(rewards, scale)
  overflow = _magnitudes(rewards, scale) > max_magnitude(bits)
  return [Miscoded(float(r), float(d), bool(o))
          for r, d, o in zip(rewards[bad], decoded[bad], overflow[bad])]


def bits_needed(rewards: np.ndarray, scale: float) -> int:
  """The fewest reward bits whose magnitudes reach every reward (>= 1)."""
  rewards = np.asarray(rewards, np.float32)
  largest = int(_magnitudes(rewards, scale).max()) if rewards.size else 0
  return max(1, largest.bit_length())


def _simplest_fraction(low: fractions.Fraction,
                       high: fractions.Fraction) -> fractions.Fraction:
  """The fraction with the smallest denominator in [low, high], 0 < low
  (the continued-fraction recursion of the Stern-Brocot tree)."""
  whole = math.floor(low)
  if whole == low:
    return fractions.Fraction(whole)
  if whole + 1 <= high:
    return fractions.Fraction(whole + 1)
  # Both ends lie in (whole, whole + 1): recurse on the reciprocals.
  return whole + 1 / _simplest_fraction(1 / (high - whole), 1 / (low - whole))


def derive_scale(rewards: np.ndarray,
                 max_denominator: int = MAX_DENOMINATOR) -> Optional[float]:
  """The coarsest scale that makes every reward a whole multiple of 1/scale.

  Each |r| > ZERO_ATOL is read as the simplest fraction p/q within
  FRACTION_RTOL of it (float32 0.1 -> 1/10); the scale is 1 / gcd of those
  fractions, i.e. lcm(q) / gcd of the numerators over that denominator:
  0.1 for {10, 50, 200, 1600, 1610, ...}, 10 for {0.1, -5, -20, 1, 2},
  1 for {-1, 1}, 20 for {0.1, 0.25}. 1.0 when no reward is nonzero. None
  when no grid of 1/q, q <= max_denominator, holds all rewards (the
  rewards are not on a grid the head can code).
  """
  magnitudes = np.unique(np.abs(distinct(rewards)))
  magnitudes = magnitudes[magnitudes > ZERO_ATOL]
  if not magnitudes.size:
    return 1.0
  denominator = 1
  grid: List[fractions.Fraction] = []
  for value in magnitudes:
    exact = fractions.Fraction(float(value))
    slack = exact * fractions.Fraction(FRACTION_RTOL)
    fraction = _simplest_fraction(exact - slack, exact + slack)
    denominator = math.lcm(denominator, fraction.denominator)
    if denominator > max_denominator:
      return None
    grid.append(fraction)
  numerators = [int(f * denominator) for f in grid]
  return float(fractions.Fraction(denominator, math.gcd(*numerators)))


def _format(value: float) -> str:
  return f"{value:.7g}"


def suggestion(rewards: np.ndarray, bits: int) -> str:
  """'reward_scale=S with reward_bits=N codes all K of them' for the
  coarsest scale that codes all `rewards` with at least `bits` bits, or why
  no scale does."""
  scale = derive_scale(rewards)
  if scale is None:
    return (f"No reward_scale codes them all: they are not all multiples "
            f"of one 1/q with q <= {MAX_DENOMINATOR}. Quantise the rewards "
            "(e.g. clip them in the protocol) before training this reward "
            "head")
  needed = max(int(bits), bits_needed(rewards, scale))
  if miscoded(rewards, scale, needed):
    return (f"No reward_scale codes them all: they are multiples of "
            f"1/{_format(scale)}, but float32 does not hold {needed}-bit "
            "multiples exactly. Quantise the rewards more coarsely")
  return (f"reward_scale={_format(scale)} with reward_bits={needed} codes "
          f"all {len(distinct(rewards))} of them")


def _listing(bad: List[Miscoded]) -> str:
  shown = ", ".join(f"{_format(m.reward)} -> {_format(m.decoded + 0.0)}"
                    + (" (overflow)" if m.overflow else "")
                    for m in bad[:SHOWN])
  more = f", ... ({len(bad) - SHOWN} more)" if len(bad) > SHOWN else ""
  return shown + more


def _advice(values: np.ndarray, bits: int,
            requested: Union[str, float]) -> str:
  suggested = suggestion(values, bits)
  if requested == AUTO or suggested.startswith("No "):
    return suggested
  return f"{suggested}, as does reward_scale={AUTO!r}"


def check(rewards: np.ndarray, scale: float, bits: int,
          what: str = "rewards", requested: Union[str, float, None] = None
          ) -> None:
  """Raises RewardCodingError unless every reward round-trips.

  Args:
    rewards: the rewards the model will be trained on (any shape).
    scale: the reward scale to check.
    bits: the reward bits.
    what: says where the rewards come from, for the message.
    requested: the configured reward_scale ('auto' when `scale` was
      derived), for the message; defaults to `scale`.
  """
  values = distinct(rewards)
  bad = miscoded(values, scale, bits)
  if not bad:
    return
  requested = scale if requested is None else requested
  setting = (f"reward_scale={requested!r} (derived scale {_format(scale)})"
             if requested == AUTO else f"reward_scale={_format(scale)}")
  overflow = sum(m.overflow for m in bad)
  reach = _format(max_magnitude(bits) / scale)
  raise RewardCodingError(
      f"the reward head cannot code {len(bad)} of the {len(values)} distinct "
      f"{what}: {setting} with reward_bits={bits} codes the multiples of "
      f"1/scale = {_format(1.0 / scale)} up to {reach} in magnitude, and "
      f"turns these rewards into others (reward -> decoded): "
      f"{_listing(bad)}"
      + (f"; {overflow} overflow the {bits} bits" if overflow else "")
      + ". " + _advice(values, bits, requested) + ".")


def resolve_scale(rewards: np.ndarray, scale: Union[str, float, int],
                  bits: int, what: str = "rewards") -> float:
  """The reward scale to train with: derived for 'auto', else `scale`;
  either way checked against `rewards` (RewardCodingError if they do not
  all round-trip with `bits` bits)."""
  requested = parse_scale(scale)
  if requested == AUTO:
    derived = derive_scale(rewards)
    if derived is None:
      values = distinct(rewards)
      raise RewardCodingError(
          f"reward_scale={AUTO!r} found no scale for the {len(values)} "
          f"distinct {what} (e.g. "
          f"{', '.join(_format(v) for v in values[:SHOWN])}). "
          f"{suggestion(values, bits)}.")
    check(rewards, derived, bits, what, requested=AUTO)
    return derived
  check(rewards, requested, bits, what)
  return requested
