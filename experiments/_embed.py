"""What the embed_* experiments share: the contrastive recipe and its smoke variant.

The recipe is sentence-transformers' (`config_schema.contrastive`): scale 20, batch 32, lr 2e-5,
10% warmup, one epoch; the encoder comes from `init_from`, typically an imported
sentence-transformers model (`python -m encoder.convert --from-hf DIR --out runs/minilm`),
whose pooling, normalisation and length the run inherits (`embed.*`). A larger negative pool
than fits in memory: raise `train.batch_size` and split it with `train.grad_accum_steps`
(GradCache: the same update as the whole batch at once).
"""

from ml_collections import config_dict

from encoder import config_schema
from experiments import _finetune, _smoke_embed


def embed_config(name: str, best_metric: str = 'mrr@10') -> config_dict.ConfigDict:
  c = config_schema.contrastive(config_schema.finetuning_config(name, 'contrastive'))
  c.train.best_metric = best_metric
  return c


def smoke(c: config_dict.ConfigDict, kind: str) -> config_dict.ConfigDict:
  """A tiny model trained from scratch on tiny local files (written now if absent)."""
  _finetune.from_scratch(c)
  c.data.train, c.data.eval = _smoke_embed.smoke_files(kind)
  c.train.batch_size = 16
  return c
