"""The config resolved once: init_from's architecture, the task's and the length's fields."""

import json
import types

import pytest

from encoder import configs
from encoder.errors import ConfigError
from encoder.train import resolve


def _fake_run(tmp_path, **model):
  (tmp_path / 'tokenizer').mkdir()
  (tmp_path / 'config.json').write_text(json.dumps({'model': model}))
  return tmp_path


def test_init_from_dictates_the_architecture_and_tokenizer(tmp_path):
  run = _fake_run(tmp_path, size='mini', num_layers=4, hidden_size=256,
                  attention='bidirectional')
  config = configs.load_experiment('classify_sst2')
  config.init_from = str(run / 'checkpoints' / '7')  # a step inside the run finds the run
  fields = resolve.init_from_fields(config)
  # attention is 'bidirectional' in both: only what differs is listed.
  assert fields == {'model.size': 'mini', 'model.num_layers': 4, 'model.hidden_size': 256,
                    'data.tokenizer': str(run / 'tokenizer')}
  config.data.tokenizer = '/my/own'
  assert 'data.tokenizer' not in resolve.init_from_fields(config)  # a given tokenizer wins
  config.init_from = ''
  assert resolve.init_from_fields(config) == {}


def test_resolve_returns_a_new_config_and_leaves_the_given_one_alone(tmp_path):
  config = configs.load_experiment('classify_sst2')
  config.init_from = str(_fake_run(tmp_path, size='mini'))
  given = configs.to_json(config)
  task = types.SimpleNamespace(resolved_fields=lambda c, data: {
      'model.vocab_size': 999, 'data.num_labels': 2, 'data.labels': 'neg,pos'})
  data = types.SimpleNamespace(num_train_examples=1000)
  final = resolve.resolve(config, task, data)
  assert configs.to_json(config) == given
  assert (final.model.size, final.model.vocab_size, final.data.labels) == ('mini', 999, 'neg,pos')
  # ceil(3 epochs * 1000 / 32) steps, 10% warmup; the mini preset written out in numbers
  assert (final.train.num_steps, final.train.warmup_steps) == (94, 9)
  assert (final.model.num_layers, final.model.hidden_size, final.model.num_heads) == (4, 256, 4)


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
