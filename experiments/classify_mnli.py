"""MNLI (GLUE) three-way entailment on sentence pairs; eval on matched and mismatched dev.

  tfds build glue/mnli --file_format=array_record   # once
  python launch.py --exp classify_mnli --config.init_from=runs/mlm_nsp_base

Metrics: `accuracy` (matched) and `accuracy_mismatched`. Expected: ~0.84 / ~0.84 from
BERT-base (Devlin et al., 2019).
"""

from experiments import _finetune, _variants

DESCRIPTION = 'GLUE MNLI entailment (accuracy, matched + mismatched) on a pretrained encoder'


def get_config(arg=None):
  c = _finetune.glue_config('classify_mnli', 'mnli', num_labels=3,
                            eval_splits='validation_matched,validation_mismatched')
  return _variants.apply_variants(c, arg, _finetune.variants('nli', eval_sets=2))
