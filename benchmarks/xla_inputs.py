"""Input recipes of the exported XLA programs: how `export_xla.py` (with
TensorFlow) and `xla_speed.py` (without it) draw the same inputs.

Inputs and large variables are not shipped with the programs: the
manifest names a recipe (a JSON-able dict) and both sides draw it with
numpy's legacy RandomState, the same stream in every numpy version. This
module needs only numpy, so the timing side can import it anywhere.
"""

from typing import Any, Dict, Sequence

import numpy as np

Recipe = Dict[str, Any]


def randint(shape: Sequence[int], low: int, high: int, dtype: str,
            seed: int) -> Recipe:
  """Integers uniform in [low, high), cast to `dtype`."""
  return dict(draw="randint", shape=list(shape), low=low, high=high,
              dtype=dtype, seed=seed)


def normal(shape: Sequence[int], seed: int, loc: float = 0.0,
           scale: float = 1.0) -> Recipe:
  """float32 draws of N(loc, scale^2)."""
  return dict(draw="normal", shape=list(shape), dtype="float32", seed=seed,
              loc=loc, scale=scale)


def constant(shape: Sequence[int], value: float, dtype: str) -> Recipe:
  """Every element `value`."""
  return dict(draw="constant", shape=list(shape), value=value, dtype=dtype)


def draw(recipe: Recipe) -> np.ndarray:
  """The array a recipe names: the same values every time, everywhere."""
  shape, dtype = tuple(recipe["shape"]), np.dtype(recipe["dtype"])
  if recipe["draw"] == "randint":
    return np.random.RandomState(recipe["seed"]).randint(
        recipe["low"], recipe["high"], shape, dtype=np.int64).astype(dtype)
  if recipe["draw"] == "normal":
    return (recipe.get("loc", 0.0) + recipe.get("scale", 1.0) *
            np.random.RandomState(recipe["seed"]).standard_normal(shape)
            ).astype(dtype)
  if recipe["draw"] == "constant":
    return np.full(shape, recipe["value"], dtype)
  raise ValueError(f"unknown input recipe {recipe['draw']!r} (expected "
                   "randint, normal or constant): the manifest was written "
                   "by another export_xla.py; export the programs again")
