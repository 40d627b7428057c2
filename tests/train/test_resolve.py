"""The config resolved once: init_from's architecture, the size preset, the checks, and the data's
answers (vocabulary, labels, run length)."""

import json
import types

import pytest

from encoder import config_schema, configs, saved_config
from encoder.errors import CheckpointError, ConfigError
from encoder.train import resolve
from encoder.train.trainer import check_workdir


def _fake_run(tmp_path, **model):
  """A workdir with a config.json, a tokenizer/ and a complete checkpoint step 7."""
  (tmp_path / 'tokenizer').mkdir()
  (tmp_path / 'checkpoints' / '7' / 'params').mkdir(parents=True)
  (tmp_path / 'config.json').write_text(json.dumps({'task': 'pretraining', 'model': model}))
  return tmp_path


def _config(spec='classify_sst2:smoke', *overrides):
  config = configs.load_experiment(spec)
  configs.apply_overrides(config, list(overrides))
  return config


def test_init_from_dictates_the_architecture_and_tokenizer(tmp_path):
  run = _fake_run(tmp_path, size='mini', num_layers=4, hidden_size=256, vocab_size=999)
  config = _config('classify_sst2:smoke', 'model.num_layers=7', 'model.size=large')
  config.init_from = str(run / 'checkpoints' / '7')  # a step inside the run finds the run
  final = resolve.resolve_config(config)
  # The run's fields (an older config.json lacks most: its size's preset fills them) win over
  # what the experiment or the command line set; the vocabulary comes with the weights.
  assert final.model.to_dict() == {**config.model.to_dict(), **config_schema.preset('mini'),
                                   'size': 'mini', 'vocab_size': 999}
  assert final.data.tokenizer == str(run / 'tokenizer')
  config.data.tokenizer = '/my/own'
  assert resolve.resolve_config(config).data.tokenizer == '/my/own'  # a given tokenizer wins
  # The pooling is the head's: a run may set its own (a causal encoder pooled by mean).
  assert final.model.pooling == 'cls'
  config.model.pooling = 'mean'
  assert resolve.resolve_config(config).model.pooling == 'mean'


def test_a_missing_init_from_is_refused_in_one_line(tmp_path):
  config = _config()
  config.init_from = str(tmp_path / 'nothing')
  with pytest.raises(CheckpointError, match='no checkpoint at') as e:
    resolve.resolve_config(config)
  assert '\n' not in str(e.value)


def test_the_preset_fills_only_what_is_unset():
  # mlm_modern_tiny sets its MLP width and position table; the preset fills the rest.
  m = resolve.resolve_config(_config('mlm_modern_tiny')).model
  assert (m.intermediate_size, m.max_position_embeddings) == (344, 512)
  assert (m.num_layers, m.hidden_size, m.norm, m.activation, m.local_window) == (
      2, 128, 'pre', 'geglu', 32)
  # A size given on the command line changes the shape and (BERT's sizes) the architecture;
  # what the experiment set explicitly stays.
  m = resolve.resolve_config(_config('mlm_modern_tiny', 'model.size=mini')).model
  assert (m.num_layers, m.hidden_size, m.num_heads, m.norm, m.activation) == (
      4, 256, 4, 'post', 'gelu')
  assert (m.intermediate_size, m.rope_theta) == (344, 10_000.0)
  # A BERT size's MLP is 4 x the hidden size, also when the hidden size is set.
  m = resolve.resolve_config(_config('mlm_nsp_base', 'model.hidden_size=96')).model
  assert (m.hidden_size, m.intermediate_size, m.num_layers) == (96, 384, 12)


def test_no_model_field_is_left_to_the_code():
  for name in configs.list_experiments():
    config = _config(f'{name}:smoke')
    unset = [k for k, v in resolve.resolve_config(config).model.items() if v is None]
    assert unset == ['vocab_size'], name  # the tokenizer's, once the data is read


@pytest.mark.parametrize('overrides, message', [
    (('data.max_seq_length=128',), 'exceeds the learned position table'),
    (('model.num_heads=3',), 'not divisible'),
    (('model.size=huge',), "model.size='huge'"),
    (('data.packing=documents',), 'needs data.nsp=false'),
    (('data.mask_rate_schedule=linear',), 'needs data.mask_rate_final'),
])
def test_what_training_refuses_is_refused_when_resolving(overrides, message):
  with pytest.raises(ConfigError, match=message) as e:
    resolve.resolve_config(_config('mlm_nsp_tiny:smoke', *overrides))
  assert '\n' not in str(e.value)


def test_a_rotary_model_has_no_position_table_to_exceed():
  config = _config('mlm_modern_tiny:smoke', 'data.max_seq_length=128')
  assert resolve.resolve_config(config).model.max_position_embeddings == 64


def test_fine_tuning_data_fields_are_checked():
  with pytest.raises(ConfigError, match='data.packing'):
    resolve.resolve_config(_config('classify_sst2:smoke', 'data.packing=documents'))
  with pytest.raises(ConfigError, match='data.length_buckets'):
    resolve.resolve_config(_config('classify_sst2:smoke', 'data.length_buckets=8,999'))
  with pytest.raises(ConfigError, match='SQuAD'):
    resolve.resolve_config(_config('qa_squad:smoke', 'data.packing=examples'))


def test_resolve_fills_the_data_answers_and_leaves_the_given_config_alone():
  config = resolve.resolve_config(_config('classify_sst2', 'init_from='))
  given = configs.to_json(config)
  task = types.SimpleNamespace(resolved_fields=lambda c, data: {
      'model.vocab_size': 999, 'data.num_labels': 2, 'data.labels': 'neg,pos'})
  final = resolve.resolve(config, task, types.SimpleNamespace(num_train_examples=1000))
  assert configs.to_json(config) == given
  assert (final.model.vocab_size, final.data.labels) == (999, 'neg,pos')
  # ceil(3 epochs * 1000 / 32) steps, 10% warmup
  assert (final.train.num_steps, final.train.warmup_steps) == (94, 9)


def test_print_config_says_where_the_data_answers_come_from():
  shown = resolve.printable(resolve.resolve_config(_config()))
  assert shown['model']['vocab_size'].startswith('(from the data:')
  assert shown['train']['num_steps'].startswith('(from the data: train.num_epochs')
  assert shown['data']['labels'].startswith('(from the data:')
  assert shown['data']['num_labels'] == 2  # the GLUE experiment says it
  assert shown['model']['num_layers'] == 2


def test_run_length_needs_steps_or_epochs_over_a_known_size():
  train = configs.load_experiment('classify_sst2').train
  train.num_steps = 7  # a positive num_steps wins over num_epochs
  assert resolve.length_fields(train, 1000) == {'train.warmup_steps': 1}
  train.num_steps, train.num_epochs = 0, 0.0
  with pytest.raises(ConfigError, match='num_epochs'):
    resolve.length_fields(train, 1000)
  train.num_epochs = 1.0
  with pytest.raises(ConfigError, match='num_epochs'):
    resolve.length_fields(train, None)


def test_a_config_json_of_an_earlier_version_is_completed_and_resumes(tmp_path):
  config = resolve.resolve_config(_config('mlm_nsp_tiny:smoke'))
  saved = config.to_dict()
  saved['model']['vocab_size'] = 512  # the data's answer, as a run writes it
  for section, key in (('train', 'skip_nonfinite'), ('data', 'read_concurrency'),
                       ('model', 'classifier_head'), ('model', 'pooling')):
    del saved[section][key]  # fields added to the code since
  (tmp_path / 'config.json').write_text(json.dumps(saved))
  completed = saved_config.read_saved(str(tmp_path))
  assert completed['model']['classifier_head'] == 'linear'  # tiny's preset
  assert completed['data']['read_concurrency'] == 64
  assert check_workdir(config, str(tmp_path)) == completed
  other = resolve.resolve_config(_config('mlm_nsp_tiny:smoke', 'model.pooling=mean'))
  with pytest.raises(ConfigError, match="model.pooling='cls' there, 'mean' here"):
    check_workdir(other, str(tmp_path))


def test_a_run_resumes_with_another_attention_form_tile_or_remat(tmp_path):
  # How attention is computed and whether activations are recomputed are the machine's
  # choices: a run started one way resumes another (more memory, another kernel).
  config = resolve.resolve_config(_config('mlm_nsp_tiny:smoke'))
  saved = config.to_dict()
  saved['model']['vocab_size'] = 512
  (tmp_path / 'config.json').write_text(json.dumps(saved))
  for change in ('model.attention_impl=explicit', 'model.attention_block_size=64',
                 'model.remat=true'):
    changed = resolve.resolve_config(_config('mlm_nsp_tiny:smoke', change))
    assert check_workdir(changed, str(tmp_path)) is not None, change
  other = resolve.resolve_config(_config('mlm_nsp_tiny:smoke', 'model.local_window=8'))
  with pytest.raises(ConfigError, match='model.local_window=0 there, 8 here'):
    check_workdir(other, str(tmp_path))
