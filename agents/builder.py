"""Builds an agent's network for a config, by name, and checks its envmodel.

Data flow: the runtimes (i2a/run/train.py, evaluate.py, distributed.py)
call `load_envmodel` (when config.envmodel is set) and `build_network`; the
network goes to the actor and to the learner. Networks are registered by
name (`config.agent`) with `register_network(name, factory)`:

  factory(config, num_actions, observation_shape[, envmodel])
      -> agents.base.ActorCriticNetwork

A factory that declares an `envmodel` parameter receives the loaded, frozen
envmodels.EnvModel of config.envmodel (None when config.envmodel is '');
one without it is model-free and a config that names an envmodel for it is
refused. 'a2c' is registered here; agents.imagination registers its
networks when imported, and `build_network` imports it on demand.

`check_envmodel_spec` refuses a model whose frames or actions are not the
environment's. The check of an export's recorded protocol and its identity
in a workdir (`check_export`) is the runtimes' business:
i2a/run/exports.py.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Callable, Dict, Optional, Tuple

import ml_collections
import numpy as np

import envmodels
from agents.a2c import networks as a2c_networks
from agents.base import ActorCriticNetwork
from i2a import environments

NetworkFactory = Callable[..., ActorCriticNetwork]

_FACTORIES: Dict[str, NetworkFactory] = {}
# Packages that register networks when imported (imported on demand).
_PLUGINS = ("agents.imagination",)


def register_network(name: str, factory: NetworkFactory,
                     overwrite: bool = False) -> None:
  """Makes `factory` buildable as `config.agent == name`."""
  if not name or not isinstance(name, str):
    raise ValueError(f"a network name must be a non-empty string, given "
                     f"{name!r}.")
  if name in _FACTORIES and not overwrite and _FACTORIES[name] is not factory:
    raise ValueError(f"a network named {name!r} is already registered "
                     f"({_FACTORIES[name]!r}); pass overwrite=True to "
                     "replace it.")
  _FACTORIES[name] = factory


def _load_plugins() -> None:
  for module in _PLUGINS:
    try:
      importlib.import_module(module)
    except ModuleNotFoundError as e:
      if e.name != module:  # A real import error inside the plugin.
        raise


def network_names() -> Tuple[str, ...]:
  _load_plugins()
  return tuple(sorted(_FACTORIES))


def network_factory(name: str) -> NetworkFactory:
  if name not in _FACTORIES:
    _load_plugins()
  if name not in _FACTORIES:
    raise ValueError(f"unknown agent network {name!r} (config.agent); "
                     f"registered: {', '.join(network_names())}.")
  return _FACTORIES[name]


def uses_envmodel(factory: NetworkFactory) -> bool:
  parameters = inspect.signature(factory).parameters
  return "envmodel" in parameters or any(
      p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def check_envmodel_spec(spec: envmodels.EnvModelSpec,
                        protocol: environments.Protocol,
                        num_actions: int, export_dir: str = "") -> None:
  """ValueError unless the model sees this environment's frames and actions."""
  expected = dict(observation_shape=tuple(protocol.observation_shape),
                  num_actions=int(num_actions))
  given = dict(observation_shape=tuple(spec.observation_shape),
               num_actions=int(spec.num_actions))
  if expected != given:
    raise ValueError(
        f"the environment model {export_dir or spec.kind!r} does not match "
        f"the environment {protocol.env_id!r}: the environment has "
        f"{expected}, the model spec has {given} (full model spec: "
        f"{spec.to_json()}). Pretrain a model on data collected under this "
        "protocol (python -m i2a.collect, python -m i2a.pretrain) or pass "
        "the matching --config.protocol.")


def load_envmodel(export_dir: str, protocol: environments.Protocol,
                  num_actions: int, seed: int = 0) -> envmodels.EnvModel:
  """envmodels.load(export_dir), refused unless it matches the environment."""
  model = envmodels.load(export_dir, seed=seed)
  check_envmodel_spec(model.spec, protocol, num_actions, export_dir)
  return model


def check_agent(config: ml_collections.ConfigDict) -> NetworkFactory:
  """The factory of config.agent; ValueError if it cannot take the config.

  Called before a run writes anything: an unknown agent, or an envmodel
  given to a model-free network, is refused up front.
  """
  factory = network_factory(config.agent)
  if config.get("envmodel", "") and not uses_envmodel(factory):
    raise ValueError(
        f"the {config.agent!r} network is model-free but config.envmodel is "
        f"{config.envmodel!r}; drop --config.envmodel or use an agent that "
        "queries an environment model.")
  return factory


def build_network(config: ml_collections.ConfigDict, num_actions: int,
                  observation_shape: Tuple[int, int, int],
                  envmodel: Optional[envmodels.EnvModel] = None
                  ) -> ActorCriticNetwork:
  """The network of `config.agent`, variables not created yet."""
  factory = check_agent(config)
  if uses_envmodel(factory):
    network = factory(config, num_actions, tuple(observation_shape),
                      envmodel=envmodel)
  elif envmodel is not None:
    raise ValueError(f"the {config.agent!r} network is model-free; build it "
                     "without an envmodel.")
  else:
    network = factory(config, num_actions, tuple(observation_shape))
  if not isinstance(network, ActorCriticNetwork):
    raise TypeError(f"the factory of {config.agent!r} returned "
                    f"{type(network).__name__}, not an ActorCriticNetwork.")
  return network


def create_variables(network: ActorCriticNetwork,
                     observation_shape: Tuple[int, int, int]) -> None:
  """Calls the network once on zeros (frames and any side inputs) so that
  its variables exist."""
  side = {name: np.zeros([1, *spec.shape], spec.dtype.as_numpy_dtype)
          for name, spec in network.side_input_spec().items()}
  network(np.zeros([1, len(network.window_offsets), *observation_shape],
                   np.uint8),
          side or None)


register_network("a2c", a2c_networks.make_network)
