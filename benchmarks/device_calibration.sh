#!/usr/bin/env bash
# Cells of the calibration study (benchmarks/questions/calibration.py) on every CPU core of a larger
# machine, one process per core, for a study too long for this project's 2-core CPU.
#
# Usage: RES=/tmp/cal PACK=$OUT/cal.tgz SEEDS="19 18 17" BOX=540 bash benchmarks/device_calibration.sh
#
# The cells (target@seed) run from one queue, the slowest targets first (ORDER: by their wall times
# in earlier studies), each as `calibration.py --seeds 1 --first-seed S --targets T` writing
# RES/T@S.json, pinned to one core (taskset) with JAX_PLATFORMS=cpu. Every cell stops at the
# deadline BOX seconds after the start (a cell cut there leaves no file: run it again elsewhere).
# GPU_TARGETS (default none): targets whose cells (for the same SEEDS) run one after another on the
# GPU instead, from the last core, beside the CPU queue on the others (for targets too slow for one
# CPU core within BOX). PACK: a tarball of RES, rewritten as cells finish (a device command returns
# a limited count of files). Merge the cells into a study with `calibration.py --merge RES/*.json
# --output FILE`.
set -u
RES=${RES:-/tmp/cal}
BOX=${BOX:-540}
SEEDS=${SEEDS:-0}
ORDER=${ORDER:-"nice_flow nice_mnist funnel mixture2 logreg_breast_cancer brownian_motion diabetes_linreg longley_linreg gauss_shift many_well correlated_gauss gmm8 student_t3 gauss_narrow laplace"}
mkdir -p "$RES"
export RES PACK="${PACK:-}" DEADLINE=$(( $(date +%s) + BOX )) PYTHONUNBUFFERED=1
{ date -u; nproc; lscpu | grep -m1 'Model name'; python3 -c 'import jax; print(jax.__version__)'; } > "$RES/machine.txt" 2>&1
path_of() {  # the calibration study's spelling of a target
  case "$1" in correlated_gauss|mixture2) echo "benchmarks/questions/calibration_targets/$1.py" ;; *) echo "$1" ;; esac
}
for t in $ORDER; do for s in $SEEDS; do echo "$(path_of "$t") $s"; done; done > "$RES/queue.txt"
cell() {  # $1 target, $2 seed; SLOT: the core; PLATFORM: cpu, or empty for JAX's default (the GPU)
  local left=$(( DEADLINE - $(date +%s) )) name; name=$(basename "$1" .py)
  [ "$left" -gt 15 ] || return 0
  JAX_PLATFORMS=$PLATFORM taskset -c "$SLOT" timeout -k 5 "$left" python3 -c "import sys; sys.path[:0] = ['benchmarks/lib', 'benchmarks/questions']
import calibration; calibration.main(sys.argv[1:])" --seeds 1 --first-seed "$2" --targets "$1" \
    --output "$RES/$name@$2.json" > "$RES/log_$name@$2.txt" 2>&1
  if [ -n "$PACK" ]; then tar czf "$PACK.$SLOT.tmp" -C "$RES" . 2>/dev/null && mv "$PACK.$SLOT.tmp" "$PACK"; fi
}
export -f cell
LAST=$(( $(nproc) - 1 ))
CPU_CORES=$(nproc)
if [ -n "${GPU_TARGETS:-}" ]; then
  CPU_CORES=$LAST
  ( for t in $GPU_TARGETS; do for s in $SEEDS; do SLOT=$LAST PLATFORM= cell "$(path_of "$t")" "$s"; done; done ) &
fi
PLATFORM=cpu xargs -P "$CPU_CORES" --process-slot-var=SLOT -L 1 bash -c 'cell "$0" "$1"' < "$RES/queue.txt"
wait
if [ -n "$PACK" ]; then tar czf "$PACK.tmp" -C "$RES" . && mv "$PACK.tmp" "$PACK"; fi
ls "$RES"/*@*.json 2>/dev/null | wc -l
