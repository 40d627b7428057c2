"""The `smoke` variants' shrink, shared by every experiment: seconds on one CPU, same code path."""

from ml_collections import config_dict


def shrink(c: config_dict.ConfigDict, size: str = 'tiny') -> config_dict.ConfigDict:
  """The shared part of every `smoke` variant: a tiny model on short sequences, a few steps."""
  c.model.size = size
  c.model.max_position_embeddings = 64
  c.data.vocab_size = 512
  c.data.max_seq_length = 32
  t = c.train
  t.num_steps, t.batch_size, t.warmup_steps = 4, 8, 2
  t.log_every, t.eval_every, t.eval_batches, t.checkpoint_every = 2, 4, 2, 2
  return c


def pretraining_smoke(c: config_dict.ConfigDict, size: str = 'tiny') -> config_dict.ConfigDict:
  """Shrinks any pretraining config to run in seconds on one CPU."""
  shrink(c, size)
  c.data.max_eval_documents = 20
  return c


def modern_smoke(c: config_dict.ConfigDict) -> config_dict.ConfigDict:
  """The modern recipe on a tiny modern model, in seconds on one CPU (4 steps, the last two
  decaying; a 16-token window on the 32-token rows)."""
  pretraining_smoke(c, 'modern_tiny')
  c.model.local_window = 16
  c.train.decay_steps = 2
  return c
