"""BERT-base pretraining with MLM + NSP: the recipe of Devlin et al. (2019).

Sequence length 128, global batch 256, AdamW (lr 1e-4, beta2 0.999, eps 1e-6, weight decay 0.01
except LayerNorm and biases), 10k warmup steps then linear decay to 0, global-norm clipping 1.0,
1M steps. (The paper spends the last 10% of steps at sequence length 512; run that as a second
experiment with `--config.data.max_seq_length=512 --config.init_from=runs/mlm_nsp_base`.)

On the embedded corpus (the Python documentation, no download):
  python launch.py --exp mlm_nsp_base
On English Wikipedia through TFDS (prepare it once with `tfds build wikipedia/20230601.en`):
  python launch.py --exp mlm_nsp_base --config.data.corpus=tfds:wikipedia/20230601.en:train

Expected: BERT-base reaches MLM accuracy ~0.65-0.70 and NSP accuracy ~0.97-0.98 on Wikipedia +
BooksCorpus after 1M steps (Devlin et al., 2019). Variants: `smoke` (seconds, on one CPU).
"""

from ml_collections import config_dict

DESCRIPTION = 'BERT-base (110M) MLM + NSP pretraining, the paper recipe'


def base_config() -> config_dict.ConfigDict:
  """Every pretraining knob with BERT's defaults; other experiments start from this."""
  c = config_dict.ConfigDict()
  c.experiment = 'mlm_nsp_base'
  c.task = 'pretraining'
  c.init_from = ''

  c.model = m = config_dict.ConfigDict()
  m.size = 'base'  # tiny | mini | small | medium | base | large; the fields below override it
  m.num_layers = config_dict.placeholder(int)
  m.hidden_size = config_dict.placeholder(int)
  m.num_heads = config_dict.placeholder(int)
  m.intermediate_size = config_dict.placeholder(int)  # default 4 x hidden_size
  m.vocab_size = config_dict.placeholder(int)  # default: the tokenizer's (data.vocab_size)
  m.max_position_embeddings = 512
  m.type_vocab_size = 2
  m.attention = 'bidirectional'  # bidirectional | causal
  m.norm = 'post'  # post (BERT) | pre (pre-LN with a final LayerNorm)
  m.activation = 'gelu'  # gelu (exact erf) | gelu_tanh (original TF code) | geglu
  m.dtype = 'float32'  # compute dtype: float32 | bfloat16; params stay float32
  m.dropout_rate = 0.1
  m.attention_dropout_rate = 0.1
  m.initializer_range = 0.02
  m.layer_norm_eps = 1e-12

  c.data = d = config_dict.ConfigDict()
  d.corpus = 'python_docs'  # python_docs (embedded) | text:GLOB | tfds:NAME[/CONFIG][:SPLIT]
  d.tokenizer = ''  # '' trains SentencePiece on the corpus; or a .model file / vocab.txt / dir
  d.vocab_size = 30522  # size of the SentencePiece vocabulary trained when tokenizer is ''
  d.lower_case = True  # for WordPiece vocab.txt files (uncased BERT)
  d.max_seq_length = 128
  d.short_seq_prob = 0.1
  d.nsp = True  # False: MLM-only instances (contiguous full-length segments, RoBERTa style)
  d.mask_rate = 0.15
  d.eval_mask_rate = 0.15  # held-out masks; fixed so runs at other training rates compare
  d.max_predictions_per_seq = config_dict.placeholder(int)  # default round(seq * mask_rate)
  d.mask_token_prob = 0.8  # of selected tokens: 80% [MASK] ...
  d.random_token_prob = 0.1  # ... 10% a random token, the rest (10%) unchanged
  d.whole_word_masking = False
  d.dynamic_masking = True  # a fresh mask every epoch; False: dupe_factor static copies
  d.dupe_factor = 1  # instance passes over the corpus (the original used 10 with static masks)
  d.eval_fraction = 0.02  # share of whole documents held out for eval
  d.max_eval_documents = 1000
  d.tfds_data_dir = ''  # '' is TFDS's default (~/tensorflow_datasets)
  d.cache_dir = ''  # '' caches tokenized data in WORKDIR/cache
  d.prefetch = 4  # batches prepared ahead in a background thread

  c.train = t = config_dict.ConfigDict()
  t.seed = 0
  t.num_steps = 1_000_000
  t.batch_size = 256  # global: per-device batch x devices across all hosts
  t.grad_accum_steps = 1
  t.optimizer = 'adamw'  # adamw | lamb
  t.learning_rate = 1e-4
  t.schedule = 'linear'  # linear (warmup then linear decay to 0) | cosine | constant
  t.warmup_steps = 10_000
  t.weight_decay = 0.01
  t.b1 = 0.9
  t.b2 = 0.999
  t.eps = 1e-6
  t.clip_norm = 1.0  # global-norm gradient clipping; 0 disables
  t.log_every = 100
  t.eval_every = 10_000
  t.eval_batches = 20
  t.checkpoint_every = 10_000
  t.keep_checkpoints = 3
  t.stop_at_step = 0  # >0: save and stop after this step, as if preempted (time-sliced jobs)
  # A NaN/inf loss or gradient norm stops the run (exit 2, the last good checkpoint kept);
  # true skips such steps instead (no update) and counts them in train metrics `skipped_steps`.
  t.skip_nonfinite = False

  c.parallel = p = config_dict.ConfigDict()  # devices and hosts: see docs/scaling.md
  p.strategy = 'pmap'  # pmap (replicated data parallel) | mesh (jit over data x fsdp x tensor)
  p.coordinator_address = ''  # multi-host: host:port of process 0 ('' = JAX_* env or auto)
  p.num_processes = 0  # 0: from JAX_NUM_PROCESSES or the cluster (TPU pod, SLURM, Open MPI)
  p.process_id = -1  # -1: from JAX_PROCESS_ID or the cluster
  p.initialize = 'auto'  # auto: join when a cluster is detected | always | never
  p.mesh_shape = config_dict.ConfigDict({'data': -1, 'fsdp': 1, 'tensor': 1})  # -1: the rest
  # Logical parameter axes -> mesh axes ('' keeps a dimension whole; 'a,b' splits over both).
  p.logical_axis_rules = config_dict.ConfigDict({
      'vocab': 'tensor', 'embed': 'fsdp', 'embed_out': '', 'heads': 'tensor', 'kv': '',
      'mlp': 'tensor'})
  return c


def smoke(c: config_dict.ConfigDict) -> config_dict.ConfigDict:
  """Shrinks any pretraining config to run in seconds on one CPU."""
  c.model.size = 'tiny'
  c.model.max_position_embeddings = 64
  c.data.vocab_size = 512
  c.data.max_seq_length = 32
  c.data.max_eval_documents = 20
  t = c.train
  t.num_steps, t.batch_size, t.warmup_steps = 4, 8, 2
  t.log_every, t.eval_every, t.eval_batches, t.checkpoint_every = 2, 4, 2, 2
  return c


def apply_variants(c: config_dict.ConfigDict, arg: str | None) -> config_dict.ConfigDict:
  """Applies the comma-separated variant options after `--exp NAME:`."""
  for option in filter(None, (arg or '').split(',')):
    if option == 'smoke':
      smoke(c)
    else:
      from encoder.errors import ConfigError
      raise ConfigError(f"unknown variant '{option}' for experiment {c.experiment} (known: smoke)")
  return c


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  return apply_variants(base_config(), arg)
