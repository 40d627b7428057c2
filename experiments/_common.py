"""The config sections every experiment shares, pretraining or fine-tuning.

`mlm_nsp_base` adds the pretraining data fields (corpus, masking, NSP, ...) on top and
`_finetune` the fine-tuning ones (data files, labels, epochs, ...), so a config holds only knobs
its task reads: a fine-tuning run neither shows nor compares (on resume) masking settings that
nothing uses. The data fields here are read on both paths: the tokenizer, the sequence length,
TFDS, the cache and the loader.
"""

from ml_collections import config_dict


def shared_config(experiment: str, task: str) -> config_dict.ConfigDict:
  """The model, shared data, train and parallel sections with BERT's pretraining defaults."""
  c = config_dict.ConfigDict()
  c.experiment = experiment
  c.task = task
  c.init_from = ''

  c.model = m = config_dict.ConfigDict()
  # A size presets the shape: tiny | mini | small | medium | base | large (BERT's, with BERT's
  # architecture below), or modern_tiny | modern_mini | modern_base | modern_large
  # (ModernBERT's shape and architecture: encoder/modules/config.py). A field set below
  # overrides the preset; None (the placeholders) takes the preset's value, else BERT's.
  m.size = 'base'
  m.num_layers = config_dict.placeholder(int)
  m.hidden_size = config_dict.placeholder(int)
  m.num_heads = config_dict.placeholder(int)
  m.intermediate_size = config_dict.placeholder(int)  # default 4 x hidden_size
  m.vocab_size = config_dict.placeholder(int)  # default: the tokenizer's (data.vocab_size)
  m.max_position_embeddings = config_dict.placeholder(int)  # BERT 512; ModernBERT 8192
  m.type_vocab_size = config_dict.placeholder(int)  # segment ids: BERT 2; 0: no table
  m.attention = 'bidirectional'  # bidirectional | causal
  m.attention_impl = 'auto'  # auto | explicit | xla | cudnn: how scores are computed
  m.norm = config_dict.placeholder(str)  # post (BERT) | pre (pre-LN with a final LayerNorm)
  m.first_attention_norm = config_dict.placeholder(bool)  # pre-LN: norm before layer 0 (BERT)
  m.embedding_norm = config_dict.placeholder(bool)  # LayerNorm after the embeddings (BERT)
  m.use_bias = config_dict.placeholder(bool)  # biases of dense layers and norms (BERT: true)
  # gelu (exact erf) | gelu_tanh (original TF code) | geglu (ModernBERT) | swiglu (NeoBERT)
  m.activation = config_dict.placeholder(str)
  m.position_embedding = config_dict.placeholder(str)  # learned (BERT) | rope | none
  m.rope_theta = config_dict.placeholder(float)  # RoPE base, global layers (default 10000)
  m.local_rope_theta = config_dict.placeholder(float)  # ... local layers (default 10000)
  # Local layers see keys within local_window // 2 positions (ModernBERT: 128); layer i is
  # global when i % global_every == 0 (ModernBERT: 3; 0: none global). 0: every layer global.
  m.local_window = config_dict.placeholder(int)
  m.global_every = config_dict.placeholder(int)
  m.dtype = 'float32'  # compute dtype: float32 | bfloat16; params stay float32
  m.dropout_rate = 0.1
  m.attention_dropout_rate = 0.1
  m.init = config_dict.placeholder(str)  # bert | modern (depth-scaled output layers)
  m.init_cutoff = config_dict.placeholder(float)  # modern: truncation, in deviations (2)
  m.initializer_range = 0.02
  m.layer_norm_eps = config_dict.placeholder(float)  # BERT 1e-12; ModernBERT 1e-5
  m.pooler = config_dict.placeholder(str)  # tanh (BERT's dense + tanh; NSP reads it) | none
  m.pooling = config_dict.placeholder(str)  # cls | mean (of the real tokens)
  m.classifier_head = config_dict.placeholder(str)  # linear (BERT) | mlp (ModernBERT's)

  c.data = d = config_dict.ConfigDict()
  d.tokenizer = ''  # '' trains SentencePiece on the training text; or a .model / vocab.txt / dir
  d.vocab_size = 30522  # size of the SentencePiece vocabulary trained when tokenizer is ''
  d.character_coverage = 0.9999  # SentencePiece: share of the text's characters kept whole
  d.lower_case = True  # for WordPiece vocab.txt files (uncased BERT)
  d.max_seq_length = 128
  d.tfds_data_dir = ''  # '' is TFDS's default (~/tensorflow_datasets)
  d.cache_dir = ''  # '' caches tokenized data in WORKDIR/cache
  d.prefetch = 4  # batches prepared ahead in a background thread
  # Several examples (fine-tuning) or documents (pretraining) per row: both paths read it, and
  # each lists its values where it sets it (_finetune: none | examples; mlm_nsp_base).
  d.packing = 'none'

  c.train = t = config_dict.ConfigDict()
  t.seed = 0
  t.num_steps = 1_000_000
  t.batch_size = 256  # global: per-device batch x devices across all hosts
  t.grad_accum_steps = 1
  # adamw | lamb | stable_adamw (AdamW with per-tensor update clipping: ModernBERT's)
  t.optimizer = 'adamw'
  t.learning_rate = 1e-4
  # linear (warmup then linear decay to 0) | cosine | constant | wsd (warmup, constant, then
  # the last decay_steps steps decay to 0 in decay_shape: linear | cosine | 1-sqrt)
  t.schedule = 'linear'
  t.warmup_steps = 10_000
  t.decay_steps = 0  # wsd: 0 keeps the rate constant to the end (a stable run to branch from)
  t.decay_shape = '1-sqrt'
  # DIR:STEP (or DIR, its newest step): start from that run's checkpoint with its optimizer
  # state, step and data position, in this workdir: one stable wsd run feeds several decays.
  t.decay_from = ''
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


def shrink(c: config_dict.ConfigDict) -> config_dict.ConfigDict:
  """The shared part of every `smoke` variant: a tiny model on short sequences, a few steps."""
  c.model.size = 'tiny'
  c.model.max_position_embeddings = 64
  c.data.vocab_size = 512
  c.data.max_seq_length = 32
  t = c.train
  t.num_steps, t.batch_size, t.warmup_steps = 4, 8, 2
  t.log_every, t.eval_every, t.eval_batches, t.checkpoint_every = 2, 4, 2, 2
  return c
