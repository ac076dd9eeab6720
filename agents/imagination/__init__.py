"""I2A: the imagination-augmented agent (Weber et al. 2017), with the
rollout policies of Buesing et al. (2018) and the paper's baselines.

The agent is the shared actor/learner machinery (agents/acting.py,
agents/learning.py, agents/losses.py) with the network of networks.py,
registered in agents.builder as 'i2a' when this package is imported
(agents.builder imports it on demand). Config: configs/agents/i2a.py.
"""

from agents import builder
from agents.imagination.imagination import (CopyModel, Imagination,
                                            ImaginationCore, RolloutEncoder,
                                            untrained_envmodel)
from agents.imagination.networks import (MODELS, I2ANetwork, make_envmodel,
                                         make_network)
from agents.imagination.rollout_policies import (STRATEGIES, RolloutPolicy,
                                                 RolloutPolicyNetwork,
                                                 make_rollout_policy,
                                                 register_strategy)

builder.register_network("i2a", make_network)

__all__ = [
    "CopyModel", "Imagination", "ImaginationCore", "RolloutEncoder",
    "untrained_envmodel", "MODELS", "I2ANetwork",
    "make_envmodel", "make_network", "STRATEGIES",
    "RolloutPolicy", "RolloutPolicyNetwork", "make_rollout_policy",
    "register_strategy",
]
