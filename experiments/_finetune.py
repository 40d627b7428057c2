"""The fine-tuning recipe every classify_*, ner_* and qa_* experiment shares (Devlin et al., 2019).

BERT's fine-tuning recipe: AdamW, batch 32, 3 epochs, 10% linear warmup then linear decay to
0, weight decay 0.01, dropout 0.1, and a learning rate from {2e-5, 3e-5, 5e-5}: we default
to 2e-5 for sentence classification (Hugging Face's run_glue default, safe on every GLUE task)
and 5e-5 for NER (the common CoNLL-2003 choice). The run length is epoch-based
(`train.num_epochs`); a positive `train.num_steps` overrides it. The encoder comes from
`init_from` (default runs/mlm_nsp_base, or a converted Hugging Face model:
`python -m encoder.convert --from-hf DIR --out runs/bert_base_hf`), whose architecture and
tokenizer it inherits; the head is freshly initialised. The step with the best
`train.best_metric` is kept in checkpoints/ and named in WORKDIR/best.json.

The `smoke` variant writes tiny local files and fine-tunes a tiny model from scratch (no
init_from) in seconds: `python launch.py --exp classify_sst2:smoke`.
"""

from ml_collections import config_dict

from experiments import _common, _smoke_data, _variants


def finetune_config(name: str, task: str) -> config_dict.ConfigDict:
  """The shared sections plus fine-tuning data fields and the fine-tuning recipe."""
  c = _common.shared_config(name, task)
  c.init_from = 'runs/mlm_nsp_base'
  d = c.data
  d.tfds = ''  # a TFDS dataset (glue/sst2, conll2003); read only when data.train is ''
  d.train_split = 'train'
  d.eval_splits = 'validation'  # comma-separated; the first is the main eval set
  d.train = ''  # a local file: .tsv/.csv/.jsonl (classification) or CoNLL columns (tagging)
  d.eval = ''  # local eval file(s), comma-separated; the first is the main eval set
  d.format = ''  # tsv | csv | jsonl; '' from the file extension
  d.header = True  # TSV/CSV: the first row names the columns (else columns are 0-based numbers)
  d.text_columns = ''  # one or two columns (A, B), comma-separated; '' = the GLUE config's
  d.label_column = 'label'
  d.labels = config_dict.placeholder(str)  # label names, comma-separated; None: from the data
  d.num_labels = config_dict.placeholder(int)  # None: len(labels); 1 = regression
  d.token_column = 0  # CoNLL: column of the word ...
  d.tag_column = config_dict.placeholder(int)  # ... and of its IOB tags; None: from the file
  # Each batch is padded to the shortest of these lengths holding its longest example: auto
  # (16, 32, 64, ... up to max_seq_length), none (max_seq_length, as BERT), or e.g. 32,64,128;
  # one compile per length used.
  d.length_buckets = 'auto'
  d.bucket_window = 50  # train batches grouped by length: this many global batches at a time
  # data.packing=examples (in _common): several examples per max_seq_length row, each
  # attending only to itself (classification and tagging; SQuAD refuses it). Every step is
  # then pack_rows rows, so the examples per step vary around train.batch_size (logged at the
  # start) and length_buckets is ignored.
  # Rows per packed step; 0 (auto): as many as hold train.batch_size examples on average,
  # rounded up to a multiple of devices x train.grad_accum_steps (so it depends on the device
  # count: set it to compare or resume runs across device counts).
  d.pack_rows = 0
  t = c.train
  t.num_steps = 0  # > 0 overrides num_epochs
  t.num_epochs = 3.0
  t.batch_size = 32
  t.learning_rate = 2e-5
  t.warmup_steps = config_dict.placeholder(int)  # None: warmup_fraction of the run
  t.warmup_fraction = 0.1
  t.log_every = 50
  t.eval_every = 1000
  t.eval_batches = 0  # 0: the whole eval set (metrics need every prediction)
  t.checkpoint_every = 1000
  t.keep_checkpoints = 1  # plus the best step, which is always kept
  t.best_metric = 'accuracy'
  return c


def glue_config(name: str, glue: str, num_labels: int, best_metric: str = 'accuracy',
                eval_splits: str = 'validation') -> config_dict.ConfigDict:
  c = finetune_config(name, 'classification')
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
