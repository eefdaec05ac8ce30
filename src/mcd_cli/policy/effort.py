"""How hard one stage of the default policy works (`Effort`), and how a pilot's verdict raises it
(`escalate`): the policy's ladder. `policy.decide` chooses the stages; docs/policy.md says why
each rung is where it is.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from mcd_cli.config import SamplerConfig, TrainConfig
from mcd_cli.policy.settings import (
    LEARN_MAX_ITERATIONS, LONG_LEAPFROG, LONG_MOVES, MAX_MOVES, MAX_POPULATION_FACTOR, TARGET_ESS,
)
from mcd_cli.run.defaults import ADAPTIVE_SMC, LEARNED_MCD, TRAINED_MCD, population_size
from mcd_cli.run.plan import RunPlan

# What a pilot's reasons ask for. The moves did not mix: more moves per temperature, then longer ones.
MIXING = frozenset({"moves_barely_move", "not_at_equilibrium"})
# The weights degenerate between temperatures: more temperatures (a higher conditional ESS).
DEGENERATE = frozenset({
    "pareto_k_high", "pareto_k_warn", "pareto_k_mean_high", "pareto_k_mean_warn", "pareto_k_outlier",
    "pareto_k_unfittable", "gap_unreliable", "gap_warn",
})
# A population too small to measure itself or to keep its lineages: larger populations.
SMALL = frozenset({
    "too_few_samples", "ess_low", "ess_rough", "genealogy_collapsed", "genealogy_negative", "populations_collapsed",
    "stderr_spread_larger", "stderr_from_spread", "populations_scatter", "nonfinite_weights",
})

# How a stage's `method` names the training mode of learned kernels (`LEARNED_MCD.train_with`).
TRAINED_BY = {"is": "by importance sampling", "smc": "with SMC in the loop"}

# Particles stuck where the moves' step size cannot reach (a funnel's neck): no effort of adaptive
# SMC moves them (more or longer moves of the same step size), nor did training (docs/policy.md);
# a change of variables by a fitted flow does (`init.flow`), so it comes first.
STUCK = frozenset({"moves_stuck"})
# A gradient that is not finite where the density is: a property of the target's code, which no
# effort or change of variables of ours mends (the verdict says how to check it).
BROKEN = frozenset({"gradient_nonfinite"})


@dataclasses.dataclass(frozen=True)
class Effort:
    """How hard one stage works: moves per temperature, the conditional ESS each temperature aims
    at, particles per population, whether the kernels are trained MCD ones (`TRAINED_MCD`), and
    the leapfrog steps of each HMC move (adaptive SMC), and whether the target is sampled through a
    flow fitted to it (`transport`: `--init flow`, `init.flow`). Kernels *learned* with time to
    spare (`LEARNED_MCD`: trained by the clock as an importance sampler, their schedule learned
    from where adaptive tempered SMC put its temperatures) train for at most
    `train_seconds` in their pilot (stopping early when their rate says `train_min_updates` will
    not be made: `training.fit`); the final run that reuses them names the updates that pilot made
    (`train_iterations`), so that its config reproduces it."""

    moves: int
    target_ess: float
    population: int
    trained: bool = False
    leapfrog: int = SamplerConfig.leapfrog
    transport: bool = False
    train_seconds: Optional[float] = None
    train_iterations: Optional[int] = None
    train_min_updates: Optional[int] = None

    @property
    def learned(self) -> bool:
        return self.train_seconds is not None or self.train_iterations is not None

    def describe(self) -> str:
        through = " through a fitted flow" if self.transport else ""
        if self.learned:
            spent = (
                f"{self.train_iterations} updates" if self.train_iterations is not None
                else f"at most {self.train_seconds:.0f} s"
            )
            by = TRAINED_BY[LEARNED_MCD.train_with]
            return (
                f"MCD kernels learned {by} ({spent}) from adaptive SMC's temperatures, in SMC, "
                f"populations of {self.population}"
            )
        if self.trained:
            return f"trained MCD in SMC{through}, populations of {self.population}"
        return (
            f"adaptive SMC{through}, {self.moves} moves of {self.leapfrog} leapfrog steps, ESS {self.target_ess:g}, "
            f"populations of {self.population}"
        )

    def as_dict(self) -> dict:
        """The effort's fields; `transport` and the learned kernels' budget only where set (the records
        of other runs are as before they existed)."""
        out = dataclasses.asdict(self)
        for name in ("transport", "train_seconds", "train_iterations", "train_min_updates"):
            if not out[name]:
                del out[name]
        return out

    def gradients(self) -> int:
        """Target gradients per particle and temperature of the refinement (per particle trained)."""
        return 1 if self.trained else self.moves * self.leapfrog

    def configs(self, sconf: SamplerConfig, tconf: TrainConfig, pilot: bool = False) -> tuple[SamplerConfig, TrainConfig]:
        """The sampler and training settings of this effort over the sizes of `sconf`/`tconf`. A
        final run's adaptive tempering replays the temperatures and tuning of a population of its
        own (`refine_tuning="pilot"`: Ẑ exactly unbiased); a `pilot`'s, which only measures the
        effort, adapts each population from its own particles, sparing that population."""
        method = LEARNED_MCD if self.learned else TRAINED_MCD if self.trained else ADAPTIVE_SMC
        settings, iterations = method.sampler_fields(), method.iterations
        training = {"train_with": method.train_with} if method.train_with is not None else {}
        if self.learned and self.train_iterations is not None:
            iterations = self.train_iterations
        elif self.learned:  # a learning pilot trains for a time, not a count
            iterations = LEARN_MAX_ITERATIONS
            training.update(max_seconds=self.train_seconds, min_updates=self.train_min_updates)
        if self.transport:
            settings["init"] = "flow"
        if not self.trained:  # resampling after every temperature: the final weights are one increment's
            settings.update(
                refine_steps=self.moves, leapfrog=self.leapfrog, target_ess=self.target_ess, resample=self.target_ess,
                refine_tuning="particles" if pilot else "pilot",
            )
        return dataclasses.replace(sconf, **settings), dataclasses.replace(tconf, iterations=iterations, **training)


def first_effort(plan: RunPlan) -> Effort:
    """The effort a run starts at: `ADAPTIVE_SMC`, in populations of the run's default size, with
    the run's leapfrog steps per move (`--leapfrog`)."""
    population = population_size(plan.num_samples, plan.particles, plan.target.dim)
    return Effort(ADAPTIVE_SMC.refine_steps, ADAPTIVE_SMC.target_ess, population, leapfrog=plan.sconf.leapfrog)


def escalate(
    effort: Effort, codes: set, plan: RunPlan, moves_stalled: bool = False, tails_stalled: bool = False,
    too_short: bool = False, can_transport: bool = True,
) -> tuple[Optional[Effort], str]:
    """The next effort after a pilot whose verdict gave the reason `codes`, and why; None when
    nothing is left to raise. Each family of reasons raises its own part (moves for poor mixing,
    the conditional ESS for degenerate weights, the population for runs too small to measure
    themselves). Poor mixing doubles the moves up to `MAX_MOVES`; then, as the last rung,
    makes them longer: `LONG_MOVES` moves of `LONG_LEAPFROG` leapfrog steps (at about the
    cost of the old rung of 60 short moves, longer trajectories travel further than more short
    ones); `too_short` (`doubling_too_short`: the pilot's move correlation says twice the moves
    would still barely move) goes to that rung at once. Moves come before particles: a population
    whose moves did not mix keeps the duplicates resampling made, so its genealogy collapses and
    its ESS is rough whatever its size; only once the moves mix (or are at their cap) do reasons
    of a small population grow it. `moves_stalled` (`mixing_stalled`): raising the moves did not
    lower their correlation as mixing would, so the moves, short or long, count as at their cap
    (what holds the particles is a mode no move leaves); `tails_stalled` (`tails_stalled`): raising
    the conditional ESS and the population did not lighten the weights' tails, so they count as at
    their caps. Moves that cannot mix at their cap, or reasons
    of no family, go to trained kernels; heavy-tailed weights or small populations at their caps
    are left to the final run's verdict (None), since training never lightened them where it was
    measured (student_t3, funnel, nice_mnist: k̂ still above 0.5 after 100–530 s of training;
    docs/policy.md). Stuck particles (`STUCK`) come first: where the run's start is auto's, the next
    pilot samples the target through a flow fitted to it (`transport`, `--init flow`), from the first
    effort again (what the other reasons asked for was asked of the old geometry); once transported,
    from a start the user chose, or where no flow can be fitted (`can_transport` False: a
    conditional target's start is one per datum), they raise nothing, and once the other reasons have nothing left
    to raise, the final run is made at the effort reached."""
    if codes & BROKEN:
        return None, "the target's gradient is not finite where its density is: no effort mends that"
    cap = MAX_POPULATION_FACTOR * population_size(plan.num_samples, plan.particles, plan.target.dim)
    moves, ess, population, leapfrog = effort.moves, effort.target_ess, effort.population, effort.leapfrog
    stuck, codes = bool(codes & STUCK), set(codes) - STUCK
    if stuck and can_transport and not effort.transport and not effort.trained and plan.sconf.init == "auto":
        return dataclasses.replace(first_effort(plan), transport=True), (
            "particles stuck where no step size of these moves reaches: the target through a fitted flow"
        )
    why = []
    mixing = bool(codes & MIXING) and leapfrog < LONG_LEAPFROG and not moves_stalled
    more_moves = mixing and moves < MAX_MOVES and not too_short
    longer = mixing and not more_moves
    if more_moves:
        moves, why = min(2 * moves, MAX_MOVES), why + ["the moves did not mix: more moves"]
    elif longer:
        moves, leapfrog = LONG_MOVES, LONG_LEAPFROG
        why = why + [f"the moves did not mix: longer moves ({moves} of {leapfrog} leapfrog steps)"]
    more_moves = more_moves or longer
    higher = [e for e in TARGET_ESS if e > ess and not tails_stalled]
    if codes & DEGENERATE and higher:
        ess, why = higher[0], why + ["the weights degenerated: more temperatures"]
    grow = codes & DEGENERATE and not tails_stalled or codes & SMALL and not more_moves
    if grow and population < cap:
        population, why = min(2 * population, cap), why + ["populations too small to measure: larger ones"]
    if why and not effort.trained:
        return Effort(moves, ess, population, leapfrog=leapfrog, transport=effort.transport), "; ".join(why)
    if stuck:
        return None, "particles stuck where no step size of these moves reaches: nothing left to raise"
    if not effort.trained and (codes & MIXING or not codes <= DEGENERATE | SMALL):
        stalled = "more moves stopped helping the moves mix; " if moves_stalled and codes & MIXING else ""
        return Effort(moves, ess, population, trained=True, leapfrog=leapfrog, transport=effort.transport), (
            f"{stalled}nothing left to raise in adaptive SMC: trained kernels"
        )
    if not effort.trained:
        return None, "nothing left to raise in adaptive SMC, and trained kernels do not lighten tails"
    return None, "nothing left to raise"
