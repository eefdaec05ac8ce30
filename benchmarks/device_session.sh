#!/usr/bin/env bash
# One GPU session's benchmarks, time-boxed to fit one 10-minute device command.
#
# On the GPU (pinned to cores 0-3, one after another so that no two timings share the GPU):
#   A. training_step.py at d = 200 (ms per update of ULA, UHA, ULA-MCD, UHA-MCD, K = 64), batch
#      128 and the auto batch (1024);
#   T. time_to_accuracy.py at d = 200 (gmm8, ELBO and log-variance loss, one seed);
#   B. smc_vs_blackjax.py at d = 200 and 500 (both methods interleaved in one process);
#   C. learned_smc.py at d = 200 (trained ULA-MCD inside SMC against adaptive SMC; RUN_C=0 skips it).
# Meanwhile on the other CPU cores (JAX_PLATFORMS=cpu, one process per core): cells of the
# calibration study (benchmarks/run.py calibration), CAL_PER_CORE consecutive seeds per core starting
# at each of CAL_SEEDS, for the targets CAL_TARGETS (default: all) with the further `mcd estimate`
# options CAL_EXTRA (default: none, i.e. the default pipeline); each core writes its own file, to
# be merged with `calibration.py --merge` (same settings; cells keyed target@seed).
#
# Usage: RES=/tmp/r PACK=$OUT/res.tgz CAL_SEEDS="15 16 17" bash benchmarks/device_session.sh [scale]
# PACK: a tarball of RES rewritten after every step (a device command returns only a limited count
# of files from $OUT, so write RES outside it and pack it there; a time-out keeps the last pack).
# Time boxes (seconds): A_BOX, A2_BOX, T_BOX, B_BOX, CAL_BOX; A_UNROLLS='' drops the one-update-per-call
# timers of A. scale < 1 shrinks every time box (a dry run on a small machine: scale 0.1 and SMOKE=1).
set -u
RES=${RES:-/tmp/res}
SCALE=${1:-1}
mkdir -p "$RES"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
pack() { if [ -n "${PACK:-}" ]; then tar czf "$PACK.tmp" -C "$RES" . && mv "$PACK.tmp" "$PACK"; fi; }
box() { python3 -c "print(max(5, int($1 * $SCALE)))"; }
CPUS=$(nproc)
{ date -u; nproc; nvidia-smi -L 2>/dev/null; python3 -c 'import jax; print(jax.__version__, jax.devices())'; } > "$RES/machine.txt" 2>&1

if [ "${SMOKE:-0}" = 1 ]; then D=4; D2=6; P=256; IT=20; N=512; else D=200; D2=500; P=4096; IT=1000; N=16384; fi

# Calibration cells on the spare CPU cores (cores 4 ... CPUS-1), one seed per core.
core=4
if [ "$CPUS" -ge 8 ]; then
  for seed in ${CAL_SEEDS:-}; do
    [ "$core" -lt "$CPUS" ] || break
    JAX_PLATFORMS=cpu JAX_COMPILATION_CACHE_DIR=/tmp/jc_$core taskset -c $core \
      timeout -k 5 "$(box ${CAL_BOX:-560})" python3 benchmarks/run.py calibration --seeds "${CAL_PER_CORE:-1}" \
      --first-seed "$seed" ${CAL_TARGETS:+--targets $CAL_TARGETS} --output "$RES/calibration_s$seed.json" \
      ${CAL_EXTRA:+--extra $CAL_EXTRA} > "$RES/cal_$core.log" 2>&1 &
    core=$((core + 1))
  done
fi

g() { if [ "$CPUS" -ge 8 ]; then taskset -c 0-3 "$@"; else "$@"; fi; }
echo "A $(date -u +%T)" >> "$RES/progress.txt"
g timeout -k 5 "$(box ${A_BOX:-180})" python3 benchmarks/run.py scaling --module training_step --dim $D --repeats 5 --unrolls ${A_UNROLLS-1} --chunk-unrolls 4 --per-step-backward \
  --no-logvar --output "$RES/training_step_gpu.json" > "$RES/A.log" 2>&1
pack
echo "A2 $(date -u +%T)" >> "$RES/progress.txt"
g timeout -k 5 "$(box ${A2_BOX:-100})" python3 benchmarks/run.py scaling --module training_step --dim $D --batch-size 1024 --repeats 3 --unrolls \
  --chunk-unrolls 4 --no-logvar --output "$RES/training_step_gpu_b1024.json" > "$RES/A2.log" 2>&1
pack
echo "T $(date -u +%T)" >> "$RES/progress.txt"
g timeout -k 5 "$(box ${T_BOX:-150})" python3 benchmarks/run.py time_to_accuracy --targets gmm8 --dims $D --seeds 1 \
  --every $((IT / 4)) --max-iterations $((IT * 2)) --output "$RES/time_to_accuracy_gpu.json" > "$RES/T.log" 2>&1
pack
echo "B $(date -u +%T)" >> "$RES/progress.txt"
g timeout -k 5 "$(box ${B_BOX:-130})" python3 benchmarks/run.py peers --targets gmm8 gauss_narrow --dim $D $D2 --seeds 3 \
  --particles $P --output "$RES/smc_vs_blackjax_gpu.json" > "$RES/B.log" 2>&1
pack
echo "C $(date -u +%T)" >> "$RES/progress.txt"
[ "${RUN_C:-1}" = 1 ] && g timeout -k 5 "$(box 160)" python3 benchmarks/run.py estimators --module learned_smc --targets gmm8 gauss_narrow --dim $D --seeds 2 \
  --configs adaptive-$N mcd-smc-$IT --samples $N --output "$RES/learned_smc_gpu.json" > "$RES/C.log" 2>&1
pack
echo "end $(date -u +%T)" >> "$RES/progress.txt"
wait
pack
