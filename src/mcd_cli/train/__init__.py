"""Training: fitting the sampler's parameters to an objective of the batch's log weights.

Modules: `loop` (Adam in on-device chunks, divergence recovery), `state` (what training carries
and returns), `objectives` (the ELBO and the log-variance loss), `stopping` (when training stops early:
the ELBO's plateau, a time limit, a rate too slow for the updates needed: the rules applied
between chunks), `amortised` (one sampler over the data
of a conditional target).
"""
