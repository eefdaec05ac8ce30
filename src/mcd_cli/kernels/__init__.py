"""Kernels: forward kernels (`ula`, `uha`), backward kernels (`ais`, `mcd`) and their registry.

See `kernels.base` for the interface and `kernels.registry` for the estimators they make.
"""

from mcd_cli.kernels.base import AnnealedPath, BackwardKernel, ForwardKernel, Step, Transition
from mcd_cli.kernels.registry import BACKWARD, FORWARD, Estimator, estimator, estimators, register, unregister

__all__ = [
    "AnnealedPath",
    "BackwardKernel",
    "ForwardKernel",
    "Step",
    "Transition",
    "BACKWARD",
    "FORWARD",
    "Estimator",
    "estimator",
    "estimators",
    "register",
    "unregister",
]
