#!/usr/bin/env bash
# BERT-base pretraining step on one GPU: seq 128, bfloat16 compute, throughput and MFU against
# this GPU's bf16 matmul ceiling measured in the same run. Needs only JAX with CUDA and this
# repository (no network, no torch). A few minutes: two compiles plus timed rounds.
#
#   bash benchmarks/gpu.sh     # BATCH=256 STEPS=10 ROUNDS=3 DTYPES=bfloat16 by default
#
# The ceiling is an 8192 x 8192 x 8192 product: the FFN-shaped one the CPU run uses is too
# small to keep a large GPU busy. One JSON line per configuration, then a table.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c 'import jax; d = jax.devices(); assert d[0].platform == "gpu", d; print("#", d)'
# One device: the pmap-ed step runs as on a one-GPU host (the global batch on that GPU).
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}"
for dtype in ${DTYPES:-bfloat16}; do  # DTYPES="bfloat16 float32" adds the f32 run
  python3 benchmarks/train_step.py --sizes base --seq 128 --batch "${BATCH:-256}" \
    --dtype "$dtype" --steps "${STEPS:-10}" --rounds "${ROUNDS:-3}" \
    --ceiling_shape 8192,8192,8192
done
