"""Builds an agent's network for a config, by name, and checks its envmodel.

Data flow: the runtimes (agents/training.py, agents/evaluation.py) call
`load_envmodel` (when config.envmodel is set) and `build_network`; the
network goes to the actor and to the learner. Networks are registered by
name (`config.agent`) with `register_network(name, factory)`:

  factory(config, num_actions, observation_shape[, envmodel])
      -> agents.base.ActorCriticNetwork

A factory that declares an `envmodel` parameter receives the loaded, frozen
envmodels.EnvModel of config.envmodel (None when config.envmodel is '');
one without it is model-free and a config that names an envmodel for it is
refused. 'a2c' is registered here; agents.imagination registers its
networks when imported, and `build_network` imports it on demand.

`check_export` is what every agent binary (i2a.train, i2a.launch, i2a.plan)
asks of config.envmodel before it writes anything: the export's protocol
(its provenance, written by i2a.pretrain) must agree with the agent's on
every field that changes the transitions (Protocol.MODEL_FIELDS) unless
config.allow_protocol_mismatch says the transfer is deliberate, and the
export's fingerprint is returned for the workdir's identity.json.
"""

from __future__ import annotations

import importlib
import inspect
import os
from typing import Callable, Dict, Optional, Tuple

import ml_collections
import numpy as np
from absl import logging

import envmodels
from agents.a2c import networks as a2c_networks
from agents.base import ActorCriticNetwork
from i2a import environments, runs

NetworkFactory = Callable[..., ActorCriticNetwork]
# The name of the envmodel export in a workdir's identity.json.
ENVMODEL_IDENTITY = "envmodel"

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


def export_protocol(export_dir: str
                    ) -> Tuple[Optional[environments.Protocol], str]:
  """(the protocol the export was trained under, where it was read):
  the export's provenance; for exports written before provenance existed,
  protocol.json of the pretrain workdir the export sits in; (None, '')
  when neither records it (unknown). ExportError for an unusable export."""
  recorded = envmodels.provenance(export_dir).get("protocol")
  try:
    if isinstance(recorded, dict):
      return (environments.Protocol.from_json(recorded),
              f"the provenance in {os.path.join(export_dir, 'spec.json')}")
    path = os.path.join(os.path.dirname(os.path.abspath(export_dir)),
                        runs.PROTOCOL)
    if os.path.exists(path):
      return environments.Protocol.load(path), path
  except (TypeError, ValueError) as e:
    raise envmodels.ExportError(
        f"the protocol recorded for the envmodel export {export_dir!r} is "
        f"not a valid protocol ({e}); export the model again.") from e
  return None, ""


def check_export(config: ml_collections.ConfigDict,
                 protocol: environments.Protocol,
                 export_dir: str = "") -> runs.Identity:
  """The identity of the export `export_dir` (default config.envmodel),
  refused (ValueError naming the fields) if it was trained under a protocol
  that differs from `protocol` on Protocol.MODEL_FIELDS, unless
  config.allow_protocol_mismatch is True (a deliberate transfer: logged).
  An export whose protocol is unknown (written before provenance, outside
  a pretrain workdir) is accepted with a warning; its spec is still
  checked against the environment by `check_envmodel_spec`."""
  export_dir = export_dir or config.envmodel
  exported, source = export_protocol(export_dir)
  if exported is None:
    logging.warning("the envmodel export %s records no protocol (written "
                    "before provenance existed, outside a pretrain "
                    "workdir): only its observation shape and action count "
                    "are checked against %s.", export_dir, protocol.env_id)
  else:
    diff = exported.model_differences(protocol)
    allowed = bool(config.get("allow_protocol_mismatch", False))
    lines = "\n".join(f"  protocol.{name}: {theirs!r} (export) vs "
                      f"{ours!r} (config)"
                      for name, (theirs, ours) in diff.items())
    if diff and not allowed:
      flags = " ".join(f"--config.protocol.{name}={theirs!r}"
                       for name, (theirs, _) in diff.items())
      raise ValueError(
          f"the envmodel export {export_dir!r} was trained under another "
          f"protocol than this run's (export's protocol read from {source})"
          f":\n{lines}\nRun under the export's protocol ({flags}), "
          "pretrain a model on data collected under this protocol, or pass "
          "--config.allow_protocol_mismatch=True to transfer the model "
          "deliberately.")
    if diff:
      logging.warning("allow_protocol_mismatch: using the export %s, "
                      "trained under another protocol:\n%s", export_dir,
                      lines)
  return runs.Identity(what="envmodel export",
                       fingerprint=envmodels.fingerprint(export_dir),
                       path=os.path.abspath(export_dir),
                       flag="--config.envmodel")


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
