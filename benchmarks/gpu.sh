#!/usr/bin/env bash
# BERT-base bf16 train step on one GPU beside Hugging Face's (benchmarks/gpu_step.py), prepared
# for a short GPU slot with no network: Python 3.12 and the image's own jax (0.11, CUDA),
# flax, optax, orbax, torch and transformers, plus the wheels in .whl/ for what the image
# lacks (`bash benchmarks/gpu_wheels.sh` fetches them here). Under 6 minutes on an H200.
#
#   bash benchmarks/gpu.sh              # on the GPU host
#   bash benchmarks/gpu.sh --rehearse   # anywhere (CPU): tiny sizes, the same JSON lines
set -euo pipefail
cd "$(dirname "$0")/.."
if compgen -G '.whl/*.whl' > /dev/null; then  # carried wheels, never the image's own packages
  site="${TMPDIR:-/tmp}/encoder-site"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .whl/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ "${1:-}" = --rehearse ]; then
  exec python3 -m benchmarks.gpu_step --rehearse
fi
python3 -c 'import jax; d = jax.devices(); assert d[0].platform == "gpu", d'
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"  # one GPU: the pmap-ed step on one
# JAX takes 60%; the rest is torch's (its full-vocabulary MLM logits at batch 256 are large).
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.6}"
exec python3 -m benchmarks.gpu_step
