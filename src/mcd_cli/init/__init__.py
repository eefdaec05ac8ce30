"""Initial distributions fitted from the target.

A sampler starts from a diagonal Gaussian `π0` and anneals along `γ_k = γ^β_k π0^(1−β_k)`. When
`π0` is far wider than the target (a posterior much narrower than its prior), the annealing path
is long and the estimate suffers; this package fits `π0` from the target instead. Each fit returns
an `InitFit`: the `Gaussian`, whether the fit converged, its own log Z approximation, an
importance-sampling check of the Gaussian as a proposal (`ProposalCheck`), and warnings.

Modules:
    gaussian: `Gaussian`, `InitFit`, `ProposalCheck`, `check_proposal` (the check every fit runs).
    laplace: `laplace(target, cov="diag"|"full")`, the Gaussian at the mode of `log γ` with the
        curvature there.
    vi: `vi(target, key)`, a mean-field Gaussian maximising the ELBO, from several starts at once.
    choose: `fit_initial(target, key, method)`, what `--init` asks for: "target" (the declared
        distribution), "laplace", "vi", or "auto" (the declared distribution when the target sets
        one explicitly, otherwise VI from several starts, and a Gaussian covering every mode the
        starts found).

A fit is used through `mcd_cli.targets.transforms.apply_initial` (the same density with the fit as
its initial distribution, or whitened by it); the step sizes that follow it come from
`mcd_cli.path.step_sizes`.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from mcd_cli.targets import Target
    >>> t = Target.create(lambda x: -0.5 * jnp.sum(((x - 1.0) / 0.1) ** 2), dim=3)
    >>> fit = laplace(t, restarts=0)
    >>> [round(float(v), 3) for v in fit.gaussian.scale], fit.converged
    ([0.1, 0.1, 0.1], True)
"""

from mcd_cli.init.choose import AUTO_FULL_MAX_DIM, METHODS, fit_initial
from mcd_cli.init.gaussian import K_HAT_WARN, Gaussian, InitFit, ProposalCheck, check_proposal
from mcd_cli.init.laplace import BARRIER_NATS, COVARIANCES, MODE_SEPARATION, NEWTON_DECREMENT_TOL, laplace
from mcd_cli.init.vi import vi

__all__ = [
    "AUTO_FULL_MAX_DIM", "BARRIER_NATS", "COVARIANCES", "Gaussian", "InitFit", "K_HAT_WARN", "METHODS",
    "MODE_SEPARATION", "NEWTON_DECREMENT_TOL", "ProposalCheck", "check_proposal", "fit_initial", "laplace", "vi",
]
