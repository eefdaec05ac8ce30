"""The annealed path: one particle through the K steps of forward and backward kernels.

Modules: `annealing` (the path's parameters, one particle's log weight, the compiled chunk of
particles), `schedules` (step sizes and the β schedule as trainable parameters), `step_sizes`
(initial step sizes from the curvature along the path, and their AIS check).
"""
