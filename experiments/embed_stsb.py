"""Sentence embeddings from scored pairs (STS Benchmark): the CoSENT loss (Su, 2022), which
orders every pair of pairs in the batch by their gold similarity.

  python launch.py --exp embed_stsb --config.init_from=runs/minilm \\
      --config.data.train=stsb/train.tsv --config.data.eval=stsb/dev.tsv
TSV with a header sentence1<TAB>sentence2<TAB>score (0-5). Eval: Spearman of the cosine.
"""

from experiments import _embed, _variants

DESCRIPTION = 'Contrastive sentence embeddings from scored pairs (STS-B, CoSENT)'


def get_config(arg=None):
  c = _embed.embed_config('embed_stsb', best_metric='spearman')
  c.contrastive.loss = 'cosent'
  c.train.num_epochs = 4.0  # sentence-transformers' STS-B training script
  c.train.batch_size = 16
  return _variants.apply_variants(c, arg, {'smoke': lambda c: _embed.smoke(c, 'scored')})
