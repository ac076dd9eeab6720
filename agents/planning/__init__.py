"""Planning: model-predictive control over a frozen environment model.

A second consumer of `envmodels` (after the I2A): each environment step the
planner plans H model steps ahead with the categorical cross-entropy method
over discrete actions, scores candidates by the model's predicted rewards,
executes the first (c primitive) actions and replans (PlaNet-style MPC,
Hafner et al. 2019, with the frozen, pluggable models of Buesing et al.
2018 or the emulator oracle). Runtime of `python -m i2a.plan`:
i2a/run/plan.py; config: configs/agents/planning.py; guide:
docs/planning.md.
"""

from agents.builder import make_oracle  # the emulator oracle, for planning too
from agents.planning.cem import CEMResult, categorical_cem
from agents.planning.planner import (CEMPlanner, Plan, PlannerConfig,
                                     UniformRandomPolicy)

__all__ = [
    "CEMResult", "categorical_cem", "CEMPlanner", "Plan", "PlannerConfig",
    "UniformRandomPolicy", "make_oracle",
]
