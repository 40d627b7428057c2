"""QNLI (GLUE): does the sentence answer the question? Sentence pairs, accuracy.

  tfds build glue/qnli --file_format=array_record   # once
  python launch.py --exp classify_qnli --config.init_from=runs/mlm_nsp_base

Expected: accuracy ~0.91 from BERT-base (Devlin et al., 2019).
"""

from experiments import _finetune, _variants

DESCRIPTION = 'GLUE QNLI question/answer entailment (accuracy) on a pretrained encoder'


def get_config(arg=None):
  c = _finetune.glue_config('classify_qnli', 'qnli', num_labels=2)
  return _variants.apply_variants(c, arg, _finetune.variants('pair'))
