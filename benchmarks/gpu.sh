#!/usr/bin/env bash
# BERT-base bf16 train step on one GPU (benchmarks/gpu_step.py): its jax.profiler profile by op
# category, then its variants (PRNG, attention, donation, batch 128/256/512) beside Hugging
# Face's, prepared for a short GPU slot with no network: Python 3.12 and the image's own jax
# (0.11, CUDA), flax, optax, orbax, torch and transformers, plus the wheels in .whl/ for what
# the image lacks (`bash benchmarks/gpu_wheels.sh` fetches them here). gpu_step keeps the
# call within 8 minutes (its budget skips what would not fit, saying so in its JSON line).
#
#   bash benchmarks/gpu.sh              # on the GPU host
#   bash benchmarks/gpu.sh --rehearse   # anywhere (CPU): tiny sizes, the same JSON lines
#   bash benchmarks/gpu.sh --long       # a second call: long rows (benchmarks/long_context.py),
#                                       # modern_base at 1k-8k tokens, cuDNN/blockwise/explicit
#   bash benchmarks/gpu.sh --long --rehearse   # the same at tiny lengths on a CPU
set -euo pipefail
cd "$(dirname "$0")/.."
# JAX's persistent compilation cache: a second call on the same machine skips the compiles.
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-${TMPDIR:-/tmp}/encoder-jax-cache}"
if compgen -G '.whl/*.whl' > /dev/null; then  # carried wheels, never the image's own packages
  site="${TMPDIR:-/tmp}/encoder-site"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .whl/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ "${1:-}" = --long ]; then
  # modern_base (22 layers, ModernBERT's windows) in bfloat16, batch 1: the train step and the
  # forward pass per length, the auto form (cuDNN on global layers, blockwise on local ones)
  # beside blockwise everywhere and the explicit form (which stops where memory ends).
  if [ "${2:-}" = --rehearse ]; then
    exec python3 -m benchmarks.long_context --sizes modern_tiny --lengths 64,128 \
      --impls auto,blockwise,explicit --modes train,embed --steps 1 --json \
      --config model.attention_block_size=32
  fi
  exec python3 -m benchmarks.long_context --sizes modern_base --lengths 1024,2048,4096,8192 \
    --impls auto,blockwise,explicit --modes train,embed --dtype bfloat16 --steps 3 \
    --max_rss_gb 100
fi
if [ "${1:-}" = --rehearse ]; then
  exec python3 -m benchmarks.gpu_step --rehearse
fi
python3 -c 'import jax; d = jax.devices(); assert d[0].platform == "gpu", d'
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"  # one GPU: the pmap-ed step on one
# JAX takes 60%; the rest is torch's (its full-vocabulary MLM logits at batch 256 are large).
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.6}"
exec python3 -m benchmarks.gpu_step
