"""RTE (GLUE) textual entailment on sentence pairs (2.5k training examples), accuracy.

  tfds build glue/rte --file_format=array_record   # once
  python launch.py --exp classify_rte --config.init_from=runs/mlm_nsp_base

Expected: accuracy ~0.66 from BERT-base (Devlin et al., 2019); varies by seed.
"""

from experiments import _finetune, _variants

DESCRIPTION = 'GLUE RTE entailment (accuracy) on a pretrained encoder'


def get_config(arg=None):
  c = _finetune.glue_config('classify_rte', 'rte', num_labels=2)
  return _variants.apply_variants(c, arg, _finetune.variants('pair'))
