"""CoNLL-2003 English NER (PER, ORG, LOC, MISC): a tag per word, entity-level F1 as conlleval.

  tfds build conll2003 --file_format=array_record   # once
  python launch.py --exp ner_conll2003 --config.init_from=runs/mlm_nsp_base
Local CoNLL files instead (token first, tag last; IOB2 or IOB1):
  python launch.py --exp ner_conll2003 --config.data.train=train.txt --config.data.eval=dev.txt

Each word's tag is predicted at its first sub-token. Metrics: `f1`, `precision`, `recall`
(micro over entities) and `f1_<TYPE>`. Expected: dev F1 ~0.95 from BERT-base (Devlin et al.,
2019); ~0.85+ from MiniLM-L6 (benchmarks/finetune.py, on a 4k-sentence slice).
"""

from encoder import config_schema
from experiments import _finetune, _variants

DESCRIPTION = 'CoNLL-2003 NER (entity F1) on a pretrained encoder'


def get_config(arg=None):
  c = config_schema.finetuning_config('ner_conll2003', 'tagging')
  c.data.tfds = 'conll2003'
  c.train.learning_rate = 5e-5
  c.train.best_metric = 'f1'
  return _variants.apply_variants(c, arg, _finetune.variants('ner'))
