#!/bin/bash
# Speed of the code before and after a change, interleaved in one job on one machine: from a git
# worktree of BEFORE (a revision) and from this tree, alternately, PAIRS times, each pinned to
# core 0, (1) the `speed` module of that tree (training and importance-sampling timings, steady
# state) and (2) whole `mcd estimate` runs through that tree's command line, timed by this tree's
# speed_before_after.py (the default pipeline, and adaptive tempered SMC); then the ratios.
#
#   bash benchmarks/speed_before_after.sh d8a376d 5 /tmp/speed_ab
set -euo pipefail
before_rev=${1:?usage: speed_before_after.sh BEFORE_REV [PAIRS] [OUTDIR]}
pairs=${2:-5}
out=${3:-/tmp/speed_ab}
cd "$(dirname "$0")/.."
here=$(pwd)
tree=$(mktemp -d)/before
git worktree add --detach "$tree" "$before_rev" > /dev/null
trap 'git worktree remove --force "$tree"' EXIT
mkdir -p "$out"
speed_args=(--dims 20 --repeats 3 --iterations 10 --chunks 2 --hidden 32 --memory-estimators)

# The speed module of tree $1: benchmarks/speed.py before the benchmarks had a runner,
# benchmarks/questions/speed.py (with benchmarks/lib on the path) after.
speed() {
  local src=$1; shift
  if [ -f "$src/benchmarks/speed.py" ]; then
    python "$src/benchmarks/speed.py" "$@"
  else
    python -c 'import sys; b = sys.argv.pop(1); sys.path[:0] = [b + "/lib", b + "/questions"]
import speed; speed.main(sys.argv[1:])' "$src/benchmarks" "$@"
  fi
}

for i in $(seq 1 "$pairs"); do
  for side in before after; do
    if [ "$side" = before ]; then src=$tree; else src=$here; fi
    PYTHONPATH=$src/src taskset -c 0 bash -c "$(declare -f speed); speed \"\$@\"" _ "$src" "${speed_args[@]}" \
      --output "$out/$side-$i.json" > "$out/$side-$i.log" 2>&1
    PYTHONPATH=$src/src taskset -c 0 python "$here/benchmarks/speed_before_after.py" time-cli \
      "$out/$side-$i-cli.json" > "$out/$side-$i-cli.log" 2>&1
  done
done
python benchmarks/speed_before_after.py ratios "$out" --output "$out/ratios.json"
