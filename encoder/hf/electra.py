"""Hugging Face ELECTRA (ElectraModel, ElectraForPreTraining, its generator ElectraForMaskedLM,
and the fine-tuned ElectraFor{TokenClassification,QuestionAnswering}) <-> our discriminator.

Pure numpy, no torch. ELECTRA's encoder is BERT's (the same tensor names under `electra.`, so
encoder/hf/bert.py's tables map it) over embeddings `embedding_size` wide, projected to the
hidden size by `electra.embeddings_project` (ours: `model.embedding_size` and
`encoder/embedding_projection`), and without a pooler (ours: `model.pooler=none`; its
classifiers read the [CLS] token). The discriminator's head, `discriminator_predictions`
(dense, activation, dense to one logit), is our `discriminator_head`.

A converted discriminator is a run of the `electra` task (encoder/tasks/electra.py): `encode`,
`embed` and fine-tuning (`init_from`) read its encoder. `--generator DIR` (python -m
encoder.convert) adds the generator that trained it (an ElectraForMaskedLM directory): its
encoder and `generator_predictions` become `generator` and `generator_mlm`, so `fill_mask`
runs it, and `electra.generator_size` says its width as a fraction of the discriminator's.
Google's generators were trained sharing the discriminator's embeddings: where the two
checkpoints' embeddings are equal they are kept once (`electra.embedding_sharing=shared`),
else the generator keeps its own (`none`). `--to-hf` writes the discriminator
(ElectraForPreTraining, or ElectraModel without its head); the generator is not exported.
"""

from __future__ import annotations

import numpy as np

from encoder import config_schema
from encoder.configs import nested_set
from encoder.errors import CheckpointError
from encoder.hf import bert

MODEL_TYPE = 'electra'
_PROJECTION = [('encoder/embedding_projection/kernel', 'embeddings_project.weight', 'dense'),
               ('encoder/embedding_projection/bias', 'embeddings_project.bias', 'vector')]
_DISCRIMINATOR = [
    ('discriminator_head/dense/kernel', 'discriminator_predictions.dense.weight', 'dense'),
    ('discriminator_head/dense/bias', 'discriminator_predictions.dense.bias', 'vector'),
    ('discriminator_head/prediction/kernel', 'discriminator_predictions.dense_prediction.weight',
     'dense'),
    ('discriminator_head/prediction/bias', 'discriminator_predictions.dense_prediction.bias',
     'vector')]
_GENERATOR_HEAD = [
    ('generator_mlm/transform/kernel', 'generator_predictions.dense.weight', 'dense'),
    ('generator_mlm/transform/bias', 'generator_predictions.dense.bias', 'vector'),
    ('generator_mlm/transform_norm/scale', 'generator_predictions.LayerNorm.weight', 'vector'),
    ('generator_mlm/transform_norm/bias', 'generator_predictions.LayerNorm.bias', 'vector'),
    ('generator_mlm/output_bias', 'generator_lm_head.bias', 'vector')]
# Fine-tuned heads that are ours: one Linear on every token (ElectraForSequenceClassification's
# dense + GELU + dense on [CLS] has no counterpart, so it converts as its encoder alone).
HEAD_ARCHITECTURES = {'tagging': 'ElectraForTokenClassification',
                      'span_qa': 'ElectraForQuestionAnswering'}


def _encoder_entries(num_layers: int, factorized: bool, group: str = 'encoder'
                     ) -> list[tuple[str, str, str]]:
  """The encoder's (our path, HF name under `electra.`, kind), under our group `group`."""
  entries = bert.encoder_entries(num_layers) + (_PROJECTION if factorized else [])
  return [(group + ours.removeprefix('encoder'), hf, kind) for ours, hf, kind in entries]


def _read(tensors: dict, entries, prefix: str, num_heads: int, params: dict) -> None:
  for ours, name, kind in entries:
    value = bert.to_ours(np.asarray(tensors[prefix + name], np.float32), kind, num_heads)
    nested_set(params, ours.split('/'), value)


def _missing(tensors: dict, entries, prefix: str = '') -> str | None:
  return next((prefix + n for _, n, _ in entries if prefix + n not in tensors), None)


class Electra(bert.Bert):
  """ELECTRA as transformers defines it: BERT's layers over factorized embeddings, no pooler,
  the discriminator's head, and the generator beside it."""

  name = 'ELECTRA'
  architectures = ('ElectraModel', 'ElectraForPreTraining')
  param_groups = ('encoder', 'discriminator_head')
  head_architectures = HEAD_ARCHITECTURES

  def recognises(self, hf: dict) -> bool:
    return hf.get('model_type') == MODEL_TYPE

  def model_fields(self, hf: dict) -> dict:
    """BERT's fields, the embeddings' width, and no pooler."""
    fields = super().model_fields(hf)
    try:
      width = int(hf.get('embedding_size', fields['hidden_size']))
    except (TypeError, ValueError):
      raise CheckpointError(f"the config.json gives embedding_size={hf.get('embedding_size')!r}: "
                            'it must be a positive integer') from None
    if width < 1:
      raise CheckpointError(f'the config.json gives embedding_size={width}: sizes must be '
                            'positive')
    return {**fields, 'embedding_size': 0 if width == fields['hidden_size'] else width,
            'pooler': 'none'}

  def hf_to_ours(self, tensors: dict[str, np.ndarray], fields: dict, task: str | None = None
                 ) -> tuple[dict, list[str]]:
    """ElectraModel, ElectraForPreTraining (its head when all of it is there) or, with `task`,
    the fine-tuned class, whose head must be."""
    prefix = 'electra.' if 'electra.embeddings.word_embeddings.weight' in tensors else ''
    encoder = _encoder_entries(fields['num_layers'], bool(fields['embedding_size']))
    missing = _missing(tensors, encoder, prefix)
    if missing:
      raise CheckpointError(f"the checkpoint lacks '{missing}': its config.json (layers, "
                            'embedding_size) does not match its weights')
    params, absent = {}, []
    _read(tensors, encoder, prefix, fields['num_heads'], params)
    head = bert.task_entries(task) if task else _DISCRIMINATOR
    missing = _missing(tensors, head)
    if missing and task:
      raise CheckpointError(f"the checkpoint lacks '{missing}', which its config.json's "
                            f'{HEAD_ARCHITECTURES[task]} has')
    if missing:
      absent.append('discriminator_head')
    else:
      _read(tensors, head, '', fields['num_heads'], params)
    return params, absent

  def data_fields(self, params: dict, tokenizer) -> dict:
    """ELECTRA's masking for continued pretraining: no NSP, 85% [MASK], no random tokens."""
    return {'lower_case': tokenizer.lower_case, 'nsp': False, 'mask_token_prob': 0.85,
            'random_token_prob': 0.0}

  def pretraining_config(self, params: dict):
    """An `electra` run: its generator's fraction and embedding sharing as converted."""
    c = config_schema.electra_config('from_hf')
    generator = params.get('generator')
    if generator is not None:
      def width(group):
        return np.shape(group['layer_0']['attention']['query']['kernel'])[0]
      c.electra.generator_size = width(generator) / width(params['encoder'])
      c.electra.embedding_sharing = 'none' if 'embeddings' in generator else 'shared'
    return c

  def generator_params(self, hf: dict, tensors: dict[str, np.ndarray], params: dict,
                       fields: dict) -> dict:
    """`generator` and `generator_mlm` from an ElectraForMaskedLM's config.json and tensors,
    refused in one line unless it is the generator our `generator_config` derives from the
    discriminator's `fields` at its width's fraction (same vocabulary, depth, embedding width
    and architecture). Its embeddings are dropped where they equal the discriminator's
    (`params`): it was trained sharing them."""
    from encoder.modules.config import model_config  # lazy: JAX loads only when converting
    from encoder.modules.electra import generator_config  # lazy: as above

    if not self.recognises(hf):
      raise CheckpointError(f"--generator: model_type '{hf.get('model_type')}' is not an ELECTRA "
                            'generator (ElectraForMaskedLM)')
    own = self.model_fields(hf)
    width = own['embedding_size'] or own['hidden_size']
    discriminator = model_config(fields, platform='cpu')
    expected = generator_config(discriminator, own['hidden_size'] / fields['hidden_size'])
    shape = ('num_layers', 'hidden_size', 'num_heads', 'intermediate_size')
    theirs = tuple(own[k] for k in shape)
    ours = tuple(getattr(expected, k) for k in shape)
    for what, a, b in (('vocab_size', own['vocab_size'], fields['vocab_size']),
                       ('embedding width', width, discriminator.embedding_width),
                       ('layers, hidden size, heads, MLP', theirs, ours)):
      if a != b:
        raise CheckpointError(f"--generator: its {what} {a} does not fit the discriminator's "
                              f'generator ({b})')
    differs = next((k for k in ('activation', 'layer_norm_eps', 'max_position_embeddings',
                                'type_vocab_size') if own[k] != fields[k]), None)
    if differs or own['activation'] != 'gelu':
      field = differs or 'activation'
      raise CheckpointError(f'--generator: its {field}={own[field]!r} is not the '
                            "discriminator's GELU architecture ELECTRA trains it with")
    prefix = 'electra.' if 'electra.embeddings.word_embeddings.weight' in tensors else ''
    entries = _encoder_entries(own['num_layers'], width != own['hidden_size'], 'generator')
    missing = _missing(tensors, entries, prefix) or _missing(tensors, _GENERATOR_HEAD)
    if missing:
      raise CheckpointError(f"--generator: the checkpoint lacks '{missing}': it is not a "
                            'complete ElectraForMaskedLM')
    groups: dict = {}
    _read(tensors, entries, prefix, own['num_heads'], groups)
    _read(tensors, _GENERATOR_HEAD, '', own['num_heads'], groups)
    shared = params['encoder']['embeddings']
    mine = groups['generator']['embeddings']
    if all(np.array_equal(np.asarray(mine[k][leaf]), np.asarray(shared[k][leaf]))
           for k in shared for leaf in shared[k]):
      del groups['generator']['embeddings']  # trained shared: kept once, as `shared` reads it
    return groups

  def writes(self, cfg, task: str | None = None) -> bool:
    """An `electra` run's discriminator; a fine-tuned token or span head over factorized
    embeddings (BERT writes the others)."""
    return task == 'electra' or (task in HEAD_ARCHITECTURES
                                 and cfg.embedding_width != cfg.hidden_size)

  def refusal(self, cfg, task: str | None = None) -> str | None:
    if task == 'classification':
      return ("a sequence classification head (ElectraForSequenceClassification's is dense, "
              'GELU, dense on the [CLS] token)')
    if task is not None and cfg.classifier_head != 'linear':
      return f'model.classifier_head={cfg.classifier_head} (its token heads are one Linear)'
    return bert.encoder_refusal(cfg)

  def ours_to_hf(self, params: dict, cfg, task: str | None = None
                 ) -> tuple[dict[str, np.ndarray], str]:
    """`task`'s class for a fine-tuned run; else ElectraForPreTraining with the
    discriminator's head, ElectraModel without it."""
    factorized = cfg.embedding_width != cfg.hidden_size
    encoder = [(o, 'electra.' + h, k) for o, h, k in _encoder_entries(cfg.num_layers,
                                                                     factorized)]
    if task:
      return bert.tensors_of(params, encoder + bert.task_entries(task)), HEAD_ARCHITECTURES[task]
    if 'discriminator_head' in params:
      return bert.tensors_of(params, encoder + _DISCRIMINATOR), 'ElectraForPreTraining'
    return bert.tensors_of(params, [(o, h.removeprefix('electra.'), k) for o, h, k in encoder]
                           ), 'ElectraModel'

  def hf_config(self, cfg, tokenizer, architecture: str) -> dict:
    return {**super().hf_config(cfg, tokenizer, architecture), 'model_type': MODEL_TYPE,
            'embedding_size': cfg.embedding_width}


FAMILY = Electra()
