"""The floors of the package: no module imports a module on a higher floor (docs/architecture.md).

Every `import mcd_cli...` and `from mcd_cli... import` in src/mcd_cli, at module level or inside a
function, is checked against `FLOORS`; a new top-level module must be given a floor here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "mcd_cli"

# Lowest first. A module may import modules of its own floor and of the floors below it.
FLOORS: list[tuple[str, ...]] = [
    ("_version", "errors", "io", "runtime"),
    ("stats",),
    ("targets",),
    ("kernels", "init"),
    ("config",),
    ("path",),
    ("train", "smc"),
    ("record",),
    ("run",),
    ("policy",),
    ("report",),
    ("cli", "__init__", "__main__", "_bundled"),
]
FLOOR = {name: i for i, names in enumerate(FLOORS) for name in names}


def top(module: str) -> str:
    """`mcd_cli.run.plan` -> `run`; `mcd_cli` -> `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path) -> list[tuple[int, str]]:
    """`(line, module)` of every import of mcd_cli in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "mcd_cli":
            if node.module == "mcd_cli":
                found += [(node.lineno, f"mcd_cli.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "mcd_cli"]
    return found


def source_files() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if "_bundled" not in p.parts)


def test_every_module_has_a_floor():
    names = {p.relative_to(SRC).parts[0].removesuffix(".py") for p in source_files()}
    assert names <= set(FLOOR), f"give these modules a floor in FLOORS: {sorted(names - set(FLOOR))}"


@pytest.mark.parametrize("path", source_files(), ids=lambda p: str(p.relative_to(SRC)))
def test_no_import_climbs_a_floor(path):
    here = top("mcd_cli." + ".".join(path.relative_to(SRC).with_suffix("").parts))
    climbs = [
        f"line {line}: {module} (floor {FLOOR[top(module)]}) from floor {FLOOR[here]}"
        for line, module in imports(path)
        if FLOOR[top(module)] > FLOOR[here]
    ]
    assert not climbs, f"{path.relative_to(SRC)} imports from a higher floor: " + "; ".join(climbs)


def _module_graph() -> dict[str, set[str]]:
    """Module -> the mcd_cli modules it imports (a name imported from a package resolves to its
    submodule when there is one). Package `__init__`s are left out: they re-export their modules."""
    modules = {
        "mcd_cli." + ".".join(p.relative_to(SRC).with_suffix("").parts): p
        for p in source_files() if p.name != "__init__.py"
    }
    graph = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mcd_cli"):
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    edges.add(target if target in modules else node.module)
            elif isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name.startswith("mcd_cli"))
        graph[name] = {e for e in edges if e in modules and e != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """A cycle of `graph` (as its modules in order), or [] when there is none."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        state[node] = 2
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def test_no_two_modules_import_each_other_in_a_circle():
    cycle = _cycle(_module_graph())
    assert not cycle, "import circle: " + " -> ".join(cycle)
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # the check itself


def test_at_most_eight_modules_sit_loose_at_the_top():
    loose = sorted(p.name for p in SRC.glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= 8, loose


def test_a_climb_is_caught():
    """The check itself: `record` importing `run` would be flagged."""
    assert FLOOR[top("mcd_cli.run.plan")] > FLOOR[top("mcd_cli.record")]


@pytest.mark.slow  # a minute under the profiler; the floors themselves are checked by every run
def test_execute_climbs_back_at_most_ten_times(tmp_path):
    """Following a plan through `run.execute` (training with checkpoints and --save, SMC, importance
    sampling), and a default run through `policy.execute`, calls back up to a higher floor only
    through the few callbacks a lower floor is handed (progress, checkpoint saving): distinct
    caller → callee pairs that climb, at most 10 for each."""
    import sys

    import mcd_cli
    from mcd_cli import run
    from mcd_cli.config import SamplerConfig, TrainConfig

    def floor_of(frame):
        name = frame.f_globals.get("__name__", "")
        return FLOOR.get(top(name)) if name.startswith("mcd_cli.") else None

    climbs = set()

    def profile(frame, event, arg):
        if event == "call" and frame.f_back is not None:
            low, high = floor_of(frame.f_back), floor_of(frame)
            if low is not None and high is not None and high > low:
                climbs.add((f"{frame.f_back.f_globals['__name__']}:{frame.f_back.f_code.co_name}",
                            f"{frame.f_globals['__name__']}:{frame.f_code.co_name}"))

    target = mcd_cli.load_target("gmm8", {"dim": "2"})
    smc_plan = run.RunPlan(
        target, SamplerConfig(steps=4, hidden=8, resample=0.5, refine="hmc", step_size="pilot"),
        TrainConfig(iterations=4, batch_size=8, chunk=2), num_samples=256, checkpoint_dir=tmp_path / "ck",
        checkpoint_every=2, save=tmp_path / "p.npz",
    )
    is_plan = run.RunPlan(target, SamplerConfig(steps=4, hidden=8), TrainConfig(iterations=2, batch_size=8), num_samples=256)
    run.validate(smc_plan)  # creates the checkpoint directory
    sys.setprofile(profile)
    try:
        run.execute(smc_plan)
        run.execute(is_plan)
    finally:
        sys.setprofile(None)
    assert len(climbs) <= 10, sorted(climbs)
    # A default run (`mcd estimate TARGET`): the policy's stages, each a `run.execute`.
    climbs.clear()
    from mcd_cli import policy

    sys.setprofile(profile)
    try:
        policy.execute(run.RunPlan(target, SamplerConfig(), TrainConfig(), num_samples=1024), policy.Policy())
    finally:
        sys.setprofile(None)
    assert len(climbs) <= 10, sorted(climbs)
