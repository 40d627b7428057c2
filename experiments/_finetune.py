"""What the classify_*, ner_* and qa_* experiments share: GLUE configs and the smoke variants.

Their recipe is the schema's (`config_schema.finetuning_config`), BERT's fine-tuning recipe:
AdamW, batch 32, 3 epochs, 10% linear warmup then linear decay to 0, weight decay 0.01,
dropout 0.1, and a learning rate from {2e-5, 3e-5, 5e-5}: 2e-5 for sentence classification
(Hugging Face's run_glue default, safe on every GLUE task) and 5e-5 for NER (the common
CoNLL-2003 choice). The run length is epoch-based
(`train.num_epochs`); a positive `train.num_steps` overrides it. The encoder comes from
`init_from` (default runs/mlm_nsp_base, or a converted Hugging Face model:
`python -m encoder.convert --from-hf DIR --out runs/bert_base_hf`), whose architecture and
tokenizer it inherits; the head is freshly initialised. The step with the best
`train.best_metric` is kept in checkpoints/ and named in WORKDIR/best.json.

The `smoke` variant writes tiny local files and fine-tunes a tiny model from scratch (no
init_from) in seconds: `python launch.py --exp classify_sst2:smoke`.
"""

from ml_collections import config_dict

from encoder import config_schema
from experiments import _common, _smoke_data, _variants


def glue_config(name: str, glue: str, num_labels: int, best_metric: str = 'accuracy',
                eval_splits: str = 'validation') -> config_dict.ConfigDict:
  """A GLUE task from TFDS with the schema's fine-tuning recipe."""
  c = config_schema.finetuning_config(name, 'classification')
  c.data.tfds = f'glue/{glue}'
  c.data.eval_splits = eval_splits
  c.data.num_labels = num_labels
  c.train.best_metric = best_metric
  return c


# Local smoke data per kind of experiment: (text columns, label column, header).
SMOKE_DATA = {
    'single': ('sentence', 'label', True), 'single_noheader': ('3', '1', False),
    'pair': ('0,1', '2', False), 'nli': ('premise,hypothesis', 'label', True),
    'regression': ('sentence1,sentence2', 'label', True), 'ner': ('', 'label', True)}


def smoke(c: config_dict.ConfigDict, kind: str, eval_sets: int = 1) -> config_dict.ConfigDict:
  """A tiny model trained from scratch on tiny local files (written now if absent)."""
  from_scratch(c)
  c.data.train, c.data.eval = _smoke_data.smoke_files(kind, eval_sets)
  c.data.text_columns, c.data.label_column, c.data.header = SMOKE_DATA[kind]
  if kind == 'pair':
    c.data.labels = 'different,equivalent'
  return c


def from_scratch(c: config_dict.ConfigDict) -> config_dict.ConfigDict:
  """The fine-tuning half of every smoke variant: a tiny model from no checkpoint, one epoch."""
  _common.shrink(c)
  c.init_from = ''
  c.data.vocab_size = 256
  c.data.length_buckets = 'none'  # a few steps: one compile beats several shorter ones
  t = c.train
  t.num_steps, t.num_epochs, t.batch_size, t.learning_rate = 0, 1.0, 8, 1e-3
  t.warmup_steps = None  # warmup_fraction of the run, as the full recipe
  t.log_every, t.eval_every, t.checkpoint_every, t.eval_batches = 2, 3, 3, 0
  return c


def variants(kind: str, eval_sets: int = 1) -> _variants.Variants:
  """The variants of a classification or tagging experiment whose smoke data is `kind`."""
  return {'smoke': lambda c: smoke(c, kind, eval_sets)}
