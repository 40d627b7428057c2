"""Run by test_one_device.py in a process that sees one CPU device (the suite's other tests see
eight): 20 train steps of mlm_nsp_tiny with dropout on, under a one-device pmap and under the
strategy `make_strategy` picks there (jit); prints one JSON line comparing them."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from encoder.train.strategy import PmapStrategy, make_strategy  # noqa: E402
from tests.train.test_mesh import random_batches, tiny_setup  # noqa: E402


def run(strategy, config, task, model, tx, batches):
  state = strategy.init_state(model, tx, task.dummy_batch(config), config.train.seed)
  train, _ = strategy.steps(model, task, tx, config.train.grad_accum_steps)
  losses = []
  for batch in batches:
    state, sums = train(state, strategy.place_batch(batch))
    losses.append(float(task.reduce_metrics(strategy.sum_metrics([sums]))['loss']))
  return losses, jax.tree.leaves(strategy.to_checkpoint(state))


def main():
  config, task, model, tx = tiny_setup('model.dropout_rate=0.1',
                                       'model.attention_dropout_rate=0.1')
  batches = random_batches(config, 20)
  chosen = make_strategy(config.parallel)
  pmap_losses, pmap_leaves = run(PmapStrategy(), config, task, model, tx, batches)
  jit_losses, jit_leaves = run(chosen, config, task, model, tx, batches)
  print(json.dumps({
      'devices': jax.device_count(), 'chosen': type(chosen).__name__,
      'loss_diff': max(abs(a - b) for a, b in zip(pmap_losses, jit_losses, strict=True)),
      'state_diff': max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b))))
                        for a, b in zip(pmap_leaves, jit_leaves, strict=True)),
      'losses_move': pmap_losses[0] - pmap_losses[-1]}))


if __name__ == '__main__':
  main()
