#!/bin/bash
# Speed of the code before and after a change, interleaved in one job on one machine:
# benchmarks/speed.py from a git worktree of BEFORE (a revision) and from this tree, alternately,
# PAIRS times, each pinned to core 0; then benchmarks/speed_before_after.py prints the ratios.
#
#   bash benchmarks/speed_before_after.sh 9877eed 5 /tmp/speed_ab
set -euo pipefail
before_rev=${1:?usage: speed_before_after.sh BEFORE_REV [PAIRS] [OUTDIR]}
pairs=${2:-5}
out=${3:-/tmp/speed_ab}
cd "$(dirname "$0")/.."
here=$(pwd)
tree=$(mktemp -d)/before
git worktree add --detach "$tree" "$before_rev" > /dev/null
mkdir -p "$out"
for i in $(seq 1 "$pairs"); do
  for side in before after; do
    if [ "$side" = before ]; then src=$tree; else src=$here; fi
    PYTHONPATH=$src/src taskset -c 0 python "$src/benchmarks/speed.py" --dims 20 --repeats 3 \
      --iterations 10 --chunks 2 --hidden 32 --memory-estimators --output "$out/$side-$i.json" \
      > "$out/$side-$i.log" 2>&1
  done
done
git worktree remove --force "$tree"
python benchmarks/speed_before_after.py "$out"
