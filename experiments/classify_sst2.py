"""SST-2 sentiment (GLUE), single sentences, accuracy: BERT's fine-tuning recipe.

  tfds build glue/sst2 --file_format=array_record   # once
  python launch.py --exp classify_sst2 --config.init_from=runs/mlm_nsp_base
Local files instead of TFDS (GLUE's TSVs: a `sentence` and a `label` column):
  python launch.py --exp classify_sst2 --config.data.train=train.tsv --config.data.eval=dev.tsv

Expected: dev accuracy ~0.93 from BERT-base (Devlin et al., 2019), ~0.90 from a converted
MiniLM-L6 (benchmarks/finetune.py reaches the high 80s on a 4k-example slice in minutes).
"""

from experiments import _finetune, _variants

DESCRIPTION = 'GLUE SST-2 sentiment classification (accuracy) on a pretrained encoder'


def get_config(arg=None):
  c = _finetune.glue_config('classify_sst2', 'sst2', num_labels=2)
  return _variants.apply_variants(c, arg, _finetune.variants('single'))
