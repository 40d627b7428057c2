#!/usr/bin/env bash
# Downloads into .whl/ the wheels benchmarks/gpu.sh needs beyond the GPU image's packages
# (Python 3.12, x86-64; the image has jax, flax, optax, orbax, numpy, sentencepiece,
# tokenizers, safetensors, tqdm, matplotlib, absl-py, PyYAML, torch and transformers).
# Run it where pip reaches PyPI; .whl/ is git-ignored and travels with the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
for pkg in ml-collections; do  # what `encoder.configs` imports that the image lacks
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d .whl "$pkg"
done
ls .whl
