"""NSP's share of the gradient in a pretraining checkpoint, per parameter group.

  python -m benchmarks.nsp_share RUN_DIR_OR_STEP_DIR [--batches 16]

The MLM and NSP terms of the loss are differentiated separately on `--batches` training
batches (those the run's loader gives at the checkpoint's step). Per group of shared encoder
parameters it prints the norm of the mean gradient of each term (the signal a step follows)
and the root mean square of each term's per-batch gradient (what fills Adam's second moment,
and so sets how small a step the signal gets). `nsp_rms_share` is NSP's part of the summed
squares: where it is large, Adam's denominator is mostly NSP noise and an MLM signal of the
same size moves those weights less.
"""

from __future__ import annotations

import argparse
import json
import re

import numpy as np

GROUPS = [('position_embeddings', r'position_embeddings'),
          ('word_embeddings', r'word_embeddings'),
          ('attention_qk', r'attention/(query|key)/kernel'),
          ('attention_v_out', r'attention/(value|out)/kernel'),
          ('mlp', r'mlp/.*/kernel'),
          ('layer_norms', r'norm/scale')]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('path')
  parser.add_argument('--batches', type=int, default=16)
  args = parser.parse_args(argv)
  import jax
  import jax.numpy as jnp

  import encoder
  from encoder import configs
  from encoder.tasks import pretraining as task
  loaded = encoder.load(args.path)
  step = int(re.search(r'(\d+)(/params)?/?$', loaded.path).group(1))
  config = configs.from_json(json.dumps(loaded.config))
  data = task.datasets(config, loaded.workdir)
  model = task.build_model(config)

  def terms(params, batch):
    out = model.apply({'params': params}, batch, deterministic=True)
    den = task.loss_denominators(batch)
    w = batch['masked_weights']
    mlm_x = -jnp.take_along_axis(jax.nn.log_softmax(out['mlm_logits']),
                                 batch['masked_ids'][..., None], -1)[..., 0]
    nsp_x = -jnp.take_along_axis(jax.nn.log_softmax(out['nsp_logits']),
                                 batch['nsp_label'][:, None], -1)[:, 0]
    return (mlm_x * w).sum() / den['mlm'], nsp_x.sum() / den['nsp']

  grads = jax.jit(lambda p, b: (jax.grad(lambda q: terms(q, b)[0])(p),
                                jax.grad(lambda q: terms(q, b)[1])(p)))
  it = data.train_iterator({'step': step})
  flat_names = None
  mlm_g, nsp_g = [], []
  for _ in range(args.batches):
    gm, gn = grads(loaded.params, next(it))
    leaves = jax.tree_util.tree_flatten_with_path(gm)[0]
    flat_names = ['/'.join(str(getattr(k, 'key', k)) for k in path) for path, _ in leaves]
    mlm_g.append([np.asarray(v) for _, v in leaves])
    nsp_g.append([np.asarray(v) for v in jax.tree.leaves(gn)])
  rows = []
  for group, pattern in GROUPS:
    idx = [i for i, n in enumerate(flat_names) if n.startswith('encoder/')
           and re.search(pattern, n)]

    def stack(gs, idx=idx):
      return np.stack([np.concatenate([g[i].ravel() for i in idx]) for g in gs])
    m, n = stack(mlm_g), stack(nsp_g)
    rms_m, rms_n = np.sqrt((m ** 2).sum(1).mean()), np.sqrt((n ** 2).sum(1).mean())
    rows.append({'step': step, 'group': group,
                 'mlm_mean_norm': float(np.linalg.norm(m.mean(0))),
                 'nsp_mean_norm': float(np.linalg.norm(n.mean(0))),
                 'mlm_rms': float(rms_m), 'nsp_rms': float(rms_n),
                 'nsp_rms_share': float(rms_n ** 2 / (rms_m ** 2 + rms_n ** 2))})
  for row in rows:
    print(json.dumps(row))
  return rows


if __name__ == '__main__':
  main()
