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

`check_envmodel_fits` refuses a model whose frames or actions are not the
environment's (the one check, for loaded exports and for the model an I2A
is built with); `make_oracle` builds the emulator oracle for a protocol
(the I2A's network.model='oracle', the planner's config.envmodel='oracle').
The check of an export's recorded protocol and its identity in a workdir
(`check_export`) is the runtimes' business: i2a/run/exports.py.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Callable, Dict, Optional, Sequence, Tuple

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


def check_envmodel_fits(spec: envmodels.EnvModelSpec, num_actions: int,
                        observation_shape: Sequence[int], model: str = "",
                        environment: str = "") -> None:
  """ValueError unless the model sees the environment's frames and actions:
  the one check of an envmodel against an environment (a loaded export,
  `load_envmodel`; the model an I2A network is built with). `model` and
  `environment` name them in the message (an export dir, an env id)."""
  expected = dict(observation_shape=tuple(observation_shape),
                  num_actions=int(num_actions))
  given = dict(observation_shape=tuple(spec.observation_shape),
               num_actions=int(spec.num_actions))
  if expected != given:
    where = f" {environment!r}" if environment else ""
    raise ValueError(
        f"the environment model {model or spec.kind!r} does not match "
        f"the environment{where}: the environment has {expected}, the model "
        f"spec has {given} (full model spec: {spec.to_json()}). Pretrain a "
        "model on data collected under this protocol (python -m "
        "i2a.collect, python -m i2a.pretrain) or pass the matching "
        "--config.protocol.")


def make_oracle(protocol: environments.Protocol, jump: int = 1,
                context_length: int = 1, seed: int = 0,
                capacity: int = 4096) -> envmodels.LiveEnvModel:
  """The emulator oracle (envmodels.oracle.OracleModel) for environments of
  `protocol`: c = `jump` primitive actions per model step, `context_length`
  frames of context, snapshots of at most `capacity` states; MiniPacman's
  snapshots are stepped as arrays (i2a.environments.minipacman_oracle)."""
  # Imported here: importing envmodels.oracle registers the 'oracle' kind,
  # which suites that build every registered kind cannot build.
  from envmodels import oracle  # pylint: disable=import-outside-toplevel
  from i2a.environments import minipacman_oracle  # pylint: disable=import-outside-toplevel
  env_fn = functools.partial(environments.make_env, protocol)
  probe = env_fn()
  try:
    spec = oracle.spec_for_env(probe, jump=jump,
                               context_length=context_length)
  finally:
    probe.close()
  return oracle.OracleModel(
      spec, env_fn=env_fn, seed=seed, capacity=capacity,
      batch_emulator=minipacman_oracle.batch_emulator(protocol))


def load_envmodel(export_dir: str, protocol: environments.Protocol,
                  num_actions: int, seed: int = 0) -> envmodels.EnvModel:
  """envmodels.load(export_dir), refused unless it matches the environment."""
  model = envmodels.load(export_dir, seed=seed)
  check_envmodel_fits(model.spec, num_actions, protocol.observation_shape,
                      export_dir, protocol.env_id)
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
