"""ALCOP's three pipeline levels lowered to Gluon on Hopper (sm90): config record, plan, source emitter, launch.

``config`` (the frozen validated record), ``plan`` (each level's depth and why), ``emit`` (the Gluon
source), ``launch`` (host side: kernel cache, TMA descriptors, grid, ``matmul``). Importing this package
imports no torch; ``launch`` does.
"""

from .config import HopperConfig
from .plan import HopperPlan, explain, plan

__all__ = ["HopperConfig", "HopperPlan", "explain", "plan"]
