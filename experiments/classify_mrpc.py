"""MRPC (GLUE) paraphrase pairs: accuracy and F1 of the paraphrase class (best by F1).

  tfds build glue/mrpc --file_format=array_record   # once
  python launch.py --exp classify_mrpc --config.init_from=runs/mlm_nsp_base

Expected: F1 ~0.89 from BERT-base (Devlin et al., 2019); small sets vary by seed.
"""

from experiments import _finetune, _variants

DESCRIPTION = 'GLUE MRPC paraphrase classification (F1, accuracy) on a pretrained encoder'


def get_config(arg=None):
  c = _finetune.glue_config('classify_mrpc', 'mrpc', num_labels=2, best_metric='f1')
  return _variants.apply_variants(c, arg, _finetune.variants('pair'))
