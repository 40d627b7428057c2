"""Sentence embeddings from NLI triplets (anchor, entailed, contradicted): in-batch negatives
plus one hard negative each, the recipe behind SBERT's NLI models (Reimers & Gurevych, 2019;
multiple negatives ranking as in sentence-transformers' training scripts).

  python launch.py --exp embed_nli --config.init_from=runs/minilm \\
      --config.data.train=triplets.jsonl --config.data.eval=dev_triplets.jsonl
JSONL lines {"anchor", "positive", "negative"}; judge the result as an embedder with
`python launch.py --eval_suite embed --config.init_from=WORKDIR ...` (STS, BEIR).
"""

from experiments import _embed, _variants

DESCRIPTION = 'Contrastive sentence embeddings from NLI triplets (hard negatives, InfoNCE)'


def get_config(arg=None):
  c = _embed.embed_config('embed_nli')
  return _variants.apply_variants(c, arg, {'smoke': lambda c: _embed.smoke(c, 'triplets')})
