#!/usr/bin/env bash
# The plans of validation/v5e/kernel_steps/plans timed on one TPU v5e chip (from a checkout,
# docs/measure.md): each plan's winner (and, for the model's picks, its 512 baseline), one
# denoising step, 1 warm-up and 3 repeats; rows to $OUT/<plan>.csv (validation/README.md,
# section 19). Run as: OUT=DIR bash validation/v5e/kernel_steps/measure.sh (PLANS="a b": those)
set -u
cd "$(dirname "$0")/../../.."
for p in ${PLANS:-b-pick a-pick b-2048 a-2048 b-4096 c-pick a-8192 a-1024}; do
  extra="--no-baselines"
  case $p in a-pick|b-pick) extra="" ;; esac
  python3 -m aoizora measure "validation/v5e/kernel_steps/plans/$p.json" --top 0 $extra \
    --warmup 1 --repeats 3 --out "$OUT/$p.csv" || echo "measure $p failed: $?"
done
