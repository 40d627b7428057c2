"""A retriever fine-tuned on a BEIR folder's training judgements: each query paired with its
relevant documents, every other document of the batch a negative (in-batch negatives, InfoNCE).

  python launch.py --exp embed_beir --config.init_from=runs/minilm \\
      --config.data.train=scifact --config.data.eval=scifact_dev --config.data.eval_splits=dev
`data.train_split` names the training qrels (qrels/train.tsv) and `data.eval_splits` the eval
folder's. Documents are cut at data.max_seq_length tokens (256 here, as all-MiniLM-L6-v2 reads).
"""

from experiments import _embed, _variants

DESCRIPTION = 'A dense retriever fine-tuned on a BEIR folder (queries and relevant documents)'


def get_config(arg=None):
  c = _embed.embed_config('embed_beir')
  c.data.max_seq_length = 256
  return _variants.apply_variants(c, arg, {'smoke': lambda c: _embed.smoke(c, 'beir')})
