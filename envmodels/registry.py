"""Registry of envmodel kinds: name -> EnvModel subclass.

Model modules register their classes with `@register("kind")`; the trainer
builds a model by name (`build`) and `envmodels.load` rebuilds an export from
the kind and hyperparameters in its spec.json. Every registered class takes
`(spec: EnvModelSpec, seed: int = 0, **hyperparameters)` and exposes the
JSON-able `hyperparameters` dict it was built with.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Type

from envmodels.base import EnvModel, EnvModelSpec

_KINDS: Dict[str, Type[EnvModel]] = {}


def register(kind: str) -> Callable[[Type[EnvModel]], Type[EnvModel]]:
  def decorator(cls: Type[EnvModel]) -> Type[EnvModel]:
    if kind in _KINDS and _KINDS[kind] is not cls:
      raise ValueError(f"envmodel kind {kind!r} is registered twice.")
    _KINDS[kind] = cls
    return cls
  return decorator


def kinds() -> tuple:
  return tuple(sorted(_KINDS))


def model_class(kind: str) -> Type[EnvModel]:
  if kind not in _KINDS:
    raise ValueError(f"unknown envmodel kind {kind!r}; known kinds: "
                     f"{', '.join(kinds())}.")
  return _KINDS[kind]


def build(spec: EnvModelSpec, seed: int = 0, **hyperparameters: Any) -> EnvModel:
  """Builds a fresh (trainable) model of kind `spec.kind`."""
  return model_class(spec.kind)(spec, seed=seed, **hyperparameters)
