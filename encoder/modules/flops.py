"""Model FLOPs of a training step, counted from the model's shape (arithmetic, not a compiler's
count): what a step's useful work is, for throughput per FLOP (benchmarks) and the memory and
compute plan of a run on a target (`--compile_for`)."""

from __future__ import annotations

from encoder.modules.config import ModelConfig


def keys_per_query(seq: int, window: int) -> float:
  """Mean keys a query attends to in a row of `seq` tokens: all of them, or (a local layer,
  window > 0) the ones at most window // 2 away, fewer at the row's ends."""
  if not window:
    return float(seq)
  half = window // 2
  return sum(min(q + half, seq - 1) - max(q - half, 0) + 1 for q in range(seq)) / seq


def model_flops(model_cfg: ModelConfig, batch: int, seq: int, preds: int) -> float:
  """Training FLOPs of one step, as in PaLM's appendix B (forward + backward = 3 x forward):
  6 N B T + 12 d B T sum_l K_l + 6 d^2 B + 6 (d e + e V) B P. N: the encoder layers' matmul
  parameters (embeddings excluded); K_l: the keys a query of layer l attends to (T on a global
  layer, `keys_per_query` on a local one: the band's useful work, though the score matrix is
  computed whole and masked); d^2 B: the pooler, on one position a row; P: the masked
  positions per sequence; e: the embedding tables' width (the MLM head maps d to e and decodes
  through the tied table; e = d but for factorized embeddings). benchmarks/train_step.py says
  more."""
  d, layers = model_cfg.hidden_size, model_cfg.num_layers
  gated = model_cfg.activation in ('geglu', 'swiglu')
  ffn = model_cfg.intermediate_size * (2 if gated else 1)
  per_layer = 4 * d * d + d * ffn + model_cfg.intermediate_size * d
  pooler = d * d if model_cfg.pooler == 'tanh' else 0  # run on one position a row
  n = layers * per_layer
  keys = sum(keys_per_query(seq, model_cfg.local_window if model_cfg.is_local(i) else 0)
             for i in range(layers))
  return (6 * n * batch * seq + 12 * d * batch * seq * keys + 6 * pooler * batch
          + mlm_head_flops(model_cfg, batch, preds))


def mlm_head_flops(model_cfg: ModelConfig, batch: int, preds: int) -> float:
  """Training FLOPs of the MLM head at `preds` masked positions a row: its dense maps the
  hidden size d to the tables' width e and decodes through the tied table (e x V)."""
  d, e = model_cfg.hidden_size, model_cfg.embedding_width
  return 6 * (d * e + e * model_cfg.vocab_size) * batch * preds


def electra_flops(discriminator: ModelConfig, generator: ModelConfig, batch: int, seq: int,
                  preds: int) -> float:
  """Training FLOPs of one replaced-token-detection step: the generator's MLM step (its
  encoder on every token, its head at the `preds` masked positions), the discriminator's
  encoder on every token, and its head (a d x d dense and a d x 1 one) on every token. The
  sampling between them is not a product and is not counted."""
  d = discriminator.hidden_size
  return (model_flops(generator, batch, seq, preds) + model_flops(discriminator, batch, seq, 0)
          + 6 * (d * d + d) * batch * seq)
