"""CoLA (GLUE) grammatical acceptability, single sentences: Matthews correlation (best by mcc).

  tfds build glue/cola --file_format=array_record   # once
  python launch.py --exp classify_cola --config.init_from=runs/mlm_nsp_base
The original CoLA TSVs have no header (source, label, original label, sentence):
  --config.data.train=in_domain_train.tsv --config.data.eval=in_domain_dev.tsv \
  --config.data.header=false --config.data.text_columns=3 --config.data.label_column=1

Expected: MCC ~0.52 from BERT-base (Devlin et al., 2019); small sets vary by seed.
"""

from experiments import _finetune, _variants

DESCRIPTION = 'GLUE CoLA acceptability (Matthews correlation) on a pretrained encoder'


def get_config(arg=None):
  c = _finetune.glue_config('classify_cola', 'cola', num_labels=2, best_metric='mcc')
  return _variants.apply_variants(c, arg, _finetune.variants('single_noheader'))
