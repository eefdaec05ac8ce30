"""The benchmark runner: one question, its config, its module, its kept results.

    python benchmarks/run.py QUESTION [--config FILE] [--module NAME] [MODULE ARGS ...]
    python benchmarks/run.py QUESTION --render            # results/QUESTION.jsonl -> .md
    python benchmarks/run.py QUESTION --convert FILE ...  # a module's result file -> .jsonl
    python benchmarks/run.py --list

`benchmarks/questions/QUESTION.yaml` names the module that answers the question (`module`), the
arguments of its current headline run (`args`), and the other modules that answer parts of it
(`also`, each with its own `args`); `--module NAME` runs one of those. The module's `main(argv)`
gets the config's arguments followed by the ones given here (argparse keeps the last value of a
repeated option, so `run.py calibration --seeds 10` overrides the config's seeds). The module
writes its resumable file under `results/raw/` (ignored by git); when it returns, every file it
wrote there is converted into `results/QUESTION.jsonl` and the table `results/QUESTION.md` is
drawn again.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib
import json
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
QUESTIONS = HERE / "questions"
sys.path[:0] = [str(HERE / "lib"), str(QUESTIONS)]

# Modules whose file format has a renderer of its own (benchmark name -> module.render).
MODULE_RENDERERS = {
    "calibration": "calibration", "learned_smc": "learned_smc", "smc_vs_blackjax": "smc_vs_blackjax",
    "nice_tables": "nice_tables", "vae_table": "vae_table", "stats_calibration": "stats_calibration",
    "tail_rule": "tail_rule", "time_breakdown": "time_breakdown", "stop_rule": "stop_rule",
    "tail_scale": "tail_scale", "effort_drift": "effort_drift", "tools": "tools",
}


def load_config(question: str, path: Path | None) -> dict:
    path = path or QUESTIONS / f"{question}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in QUESTIONS.glob("*.yaml")))
        raise SystemExit(f"no question '{question}' ({path} missing); questions: {known}")
    return yaml.safe_load(path.read_text())


def module_args(config: dict, module: str) -> list[str]:
    if module == config["module"]:
        return [str(a) for a in config.get("args") or []]
    also = config.get("also") or {}
    return [str(a) for a in (also.get(module) or {}).get("args") or []]


def renderer(benchmark: str):
    import render

    if benchmark in render.RENDERERS:
        return render.RENDERERS[benchmark]
    if benchmark in MODULE_RENDERERS:
        try:
            return importlib.import_module(MODULE_RENDERERS[benchmark]).render
        except ImportError as e:  # the library does not import: a plain table still can be drawn
            print(f"{benchmark}: no renderer ({e}); plain table", file=sys.stderr)
    return None


def render_question(question: str, config: dict) -> str:
    """`results/QUESTION.md`: each source file's table, headline first, in the jsonl's order."""
    import results

    rows = results.read(question)
    out = [f"# {config.get('title', question)}", "", config.get("asks", "").strip(), "",
           f"Rows: `benchmarks/results/{question}.jsonl`; config: `benchmarks/questions/{question}.yaml`; "
           f"rerun: `{config.get('command', '')}`. Regenerate this file with "
           f"`python benchmarks/run.py {question} --render`.", ""]
    for source in results.sources(rows):
        data = results.to_data(rows, source)
        # A converted file keeps the table it was published with (some were annotated by hand).
        text = data.pop("rendered_md", None)
        draw = renderer(data["benchmark"])
        try:
            text = text or (draw(data) if draw else results.generic_table(data))
        except Exception as e:  # an older file lacks a field its renderer now expects
            text = f"(renderer failed: {type(e).__name__}: {e}; plain table)\n\n" + results.generic_table(data)
        commands = sorted({s.get("command") or "" for s in data.get("sessions") or []} - {""})
        out += [f"## `{Path(source).name}`", ""]
        out += [f"- command: `{c}`" for c in commands] + [""]
        # The module's own headings move one level down, under the source's.
        out += [("#" + line if line.startswith("#") else line) for line in text.rstrip().splitlines()] + [""]
    return "\n".join(out).rstrip() + "\n"


def write_rendered(question: str, config: dict) -> Path:
    import results

    path = results.KEPT / f"{question}.md"
    path.write_text(render_question(question, config))
    return path


def convert(question: str, config: dict, files: list[Path]) -> None:
    """Adds `files`' rows to results/QUESTION.jsonl and redraws its table, holding the question's lock
    (`_locked`) from the read to the write."""
    import results

    new = [row for f in files for row in results.rows_of(question, f)]
    with _locked(question):
        results.merge(question, new)
        print(f"{len(new)} rows from {len(files)} file(s) -> {results.path_of(question)}", file=sys.stderr)
        print(f"table -> {write_rendered(question, config)}", file=sys.stderr)


@contextlib.contextmanager
def _locked(question: str):
    """An exclusive lock on the question's results (`results/raw/.QUESTION.lock`, git-ignored). The
    merge reads the jsonl, replaces its sources' rows and writes it: two jobs that end at once would
    each write what they read before the other's rows were there, and one job's rows would be lost."""
    lock = HERE / "results" / "raw" / f".{question}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _output_of(argv: list[str]) -> Path | None:
    """The module's result file named in `argv` (its last `--output`/`--out` before any `--extra`,
    whose options are calibration's `mcd estimate` options), or None."""
    argv = argv[: argv.index("--extra")] if "--extra" in argv else argv
    for flag in ("--output", "--out"):
        if flag in argv and argv.index(flag) + 1 < len(argv):
            return Path(argv[len(argv) - 1 - argv[::-1].index(flag) + 1])
    return None


def _other_module(path: Path, module: str) -> bool:
    """Whether a result file names another module as its `benchmark` (a job running beside this
    one wrote it: `refine_timing` once took in two `learned_pays` files being written meanwhile).
    Files without the field (JSON lines) are kept."""
    if path.suffix != ".json":
        return False
    try:
        name = json.loads(path.read_text()).get("benchmark")
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(name, str) and not name.startswith(module)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False, add_help=False)
    p.add_argument("question", nargs="?")
    p.add_argument("--config", type=Path, help="another config file for the question")
    p.add_argument("--module", help="one of the question's other modules (the config's `also`)")
    p.add_argument("--render", action="store_true", help="only redraw results/QUESTION.md")
    p.add_argument("--convert", type=Path, nargs="+", help="add these result files to results/QUESTION.jsonl")
    p.add_argument("--list", action="store_true", help="the questions and their modules")
    argv = list(sys.argv[1:] if argv is None else argv)
    # What follows `--extra` (calibration's further `mcd estimate` options) is the module's alone.
    cut = argv.index("--extra") if "--extra" in argv else len(argv)
    args, rest = p.parse_known_args(argv[:cut])
    rest += argv[cut:]
    if not args.question and {"-h", "--help"} & set(rest):  # with a question, -h is the module's
        p.print_help()
        return
    if args.list or not args.question:
        for path in sorted(QUESTIONS.glob("*.yaml")):
            c = yaml.safe_load(path.read_text())
            print(f"{path.stem:18s} {c['module']}{' + ' + ', '.join(c.get('also') or {}) if c.get('also') else ''}")
        return
    config = load_config(args.question, args.config)
    if args.render:
        print(f"table -> {write_rendered(args.question, config)}", file=sys.stderr)
        return
    if args.convert:
        convert(args.question, config, args.convert)
        return
    import common

    module = args.module or config["module"]
    margs = module_args(config, module) + rest
    # What common.command_line() records: the command a user would type to rerun this.
    sys.argv = [f"benchmarks/run.py {args.question}" + (f" --module {module}" if args.module else ""), *margs]
    out = _output_of(margs)
    before = {f: f.stat().st_mtime for f in common.RESULTS.glob("*")} if common.RESULTS.exists() else {}
    importlib.import_module(module).main(margs)
    if out is not None:  # the module's own file only: another job may write beside it meanwhile
        written = [out] if out.exists() else []
        if written and common.RESULTS.parent not in out.resolve().parents:
            # a study kept outside the repository's results (a scratch folder, another checkout):
            # its rows are not this repository's until asked for
            print(f"{out} is outside {common.RESULTS.parent}: not added to {args.question}.jsonl "
                  f"(add it with `python benchmarks/run.py {args.question} --convert {out}`)", file=sys.stderr)
            written = []
    else:  # the module's default file(s): those changed during the run, but not another module's
        written = [f for f in sorted(common.RESULTS.glob("*")) if f.is_file() and before.get(f) != f.stat().st_mtime
                   and f.suffix in (".json", ".jsonl") and not _other_module(f, module)]
    if written:
        convert(args.question, config, written)


if __name__ == "__main__":
    main()
