#!/usr/bin/env bash
# One GPU session's benchmarks, time-boxed to fit one 10-minute device command.
#
# On the GPU (pinned to cores 0-3, one after another so that no two timings share the GPU):
#   A. training_step.py at d = 200 (ms per update of ULA, UHA, ULA-MCD, UHA-MCD, K = 64), batch
#      128 and the auto batch (1024);
#   B. smc_vs_blackjax.py at d = 200 and 500 (both methods interleaved in one process);
#   C. learned_smc.py at d = 200 (trained ULA-MCD inside SMC against adaptive SMC).
# Meanwhile on the other CPU cores (JAX_PLATFORMS=cpu, one process per core): cells of the
# calibration study of the default pipeline (benchmarks/calibration.py), one seed per core, the
# seeds from CAL_SEEDS (those not yet in benchmarks/results/calibration_cpu.json); each core's file
# is merged into that one afterwards (same settings; cells keyed target@seed).
#
# Usage: RES=/path/to/results CAL_SEEDS="15 16 17" bash benchmarks/device_session.sh [scale]
# scale < 1 shrinks every time box (a dry run on a small machine: scale 0.1 and SMOKE=1).
set -u
RES=${RES:-/tmp/res}
SCALE=${1:-1}
mkdir -p "$RES"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
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
      timeout -k 5 "$(box 560)" python3 benchmarks/calibration.py --seeds 1 --first-seed "$seed" \
      --output "$RES/calibration_s$seed.json" > "$RES/cal_$core.log" 2>&1 &
    core=$((core + 1))
  done
fi

g() { if [ "$CPUS" -ge 8 ]; then taskset -c 0-3 "$@"; else "$@"; fi; }
echo "A $(date -u +%T)" >> "$RES/progress.txt"
g timeout -k 5 "$(box 150)" python3 benchmarks/training_step.py --dim $D --repeats 5 --unrolls 1 --chunk-unrolls 4 --per-step-backward \
  --no-logvar --output "$RES/training_step_gpu.json" > "$RES/A.log" 2>&1
echo "A2 $(date -u +%T)" >> "$RES/progress.txt"
g timeout -k 5 "$(box 80)" python3 benchmarks/training_step.py --dim $D --batch-size 1024 --repeats 3 --unrolls \
  --chunk-unrolls 4 --no-logvar --output "$RES/training_step_gpu_b1024.json" > "$RES/A2.log" 2>&1
echo "B $(date -u +%T)" >> "$RES/progress.txt"
g timeout -k 5 "$(box 130)" python3 benchmarks/smc_vs_blackjax.py --targets gmm8 gauss_narrow --dim $D $D2 --seeds 3 \
  --particles $P --output "$RES/smc_vs_blackjax_gpu.json" > "$RES/B.log" 2>&1
echo "C $(date -u +%T)" >> "$RES/progress.txt"
g timeout -k 5 "$(box 160)" python3 benchmarks/learned_smc.py --targets gmm8 gauss_narrow --dim $D --seeds 2 \
  --configs adaptive-$N mcd-smc-$IT --samples $N --output "$RES/learned_smc_gpu.json" > "$RES/C.log" 2>&1
echo "end $(date -u +%T)" >> "$RES/progress.txt"
wait
