"""A2C: the model-free advantage actor-critic baseline.

The agent is the shared actor/learner machinery (agents/acting.py,
agents/learning.py, agents/losses.py) with the network of networks.py,
registered in agents.builder as 'a2c'.
"""

from agents.a2c.networks import A2CNetwork, ConvTorso, frames_on_channels, \
    make_network

__all__ = ["A2CNetwork", "ConvTorso", "frames_on_channels", "make_network"]
