"""Experiments load, their variants parse strictly, and overrides are typed and strict."""

import pytest
from ml_collections import config_dict

from encoder import config_schema, configs
from encoder.errors import ConfigError
from encoder.modules.config import model_config
from experiments import _variants

EXPERIMENTS = sorted(configs.list_experiments())


def test_private_modules_are_not_experiments():
  assert {'mlm_nsp_base', 'mlm_nsp_large', 'mlm_nsp_tiny', 'classify_sst2'} <= set(EXPERIMENTS)
  assert not [name for name in EXPERIMENTS if name.startswith('_')]


@pytest.mark.parametrize('name', EXPERIMENTS)
def test_every_experiment_loads_with_and_without_smoke(name):
  assert configs.load_experiment(name).experiment == name
  smoke = configs.load_experiment(f'{name}:smoke')
  assert smoke.experiment == name and smoke.train.num_steps <= 10
  # A modern experiment's smoke keeps its architecture at the tiny size.
  assert smoke.model.size in ('tiny', 'modern_tiny') and not smoke.init_from


def test_variants_apply_in_order_and_unknown_ones_name_the_known():
  calls = []
  options = {'smoke': lambda c: calls.append('smoke'), 'long': lambda c: calls.append('long')}
  c = config_dict.ConfigDict({'experiment': 'demo'})
  assert _variants.apply_variants(c, 'long,,smoke', options) is c
  assert calls == ['long', 'smoke']
  assert _variants.apply_variants(c, None, options) is c and len(calls) == 2
  with pytest.raises(ConfigError) as e:
    _variants.apply_variants(c, 'smoke,fast', options)
  assert str(e.value) == "unknown variant 'fast' for experiment demo (known: smoke, long)"
  with pytest.raises(ConfigError) as e:
    _variants.apply_variants(c, 'a\nb', options)
  assert '\n' not in str(e.value)


@pytest.mark.parametrize('name', EXPERIMENTS)
def test_every_experiment_refuses_an_unknown_variant(name):
  with pytest.raises(ConfigError) as e:
    configs.load_experiment(f'{name}:smoke,fast')
  known = {'mlm_modern_base': 'smoke, context', 'mlm_modern_large': 'smoke, context',
           'cram': 'smoke, electra'}.get(name, 'smoke')
  assert str(e.value) == f"unknown variant 'fast' for experiment {name} (known: {known})"


def pretraining_only_data_fields() -> set[str]:
  """What the pretraining schema adds to the shared data section: read by its pipeline only."""
  return set(config_schema.pretraining_config('x').data) - set(config_schema.data_section())


def test_fine_tuning_configs_carry_no_pretraining_data_fields():
  pretraining_only = pretraining_only_data_fields()
  assert {'corpus', 'mask_rate', 'nsp', 'dupe_factor'} <= pretraining_only
  fine_tuning = [n for n in EXPERIMENTS
                 if configs.load_experiment(n).task not in config_schema.PRETRAINING_TASKS]
  assert {'classify_sst2', 'ner_conll2003', 'qa_squad'} <= set(fine_tuning)
  for name in fine_tuning:
    for spec in (name, f'{name}:smoke'):
      assert not pretraining_only & set(configs.load_experiment(spec).data), spec


def test_overrides_are_typed():
  c = configs.load_experiment('mlm_nsp_base')
  configs.apply_overrides(c, ['train.num_steps=1e3', 'train.learning_rate=3e-4',
                              'data.nsp=false', 'model.num_layers=3', 'model.attention=causal'])
  assert c.train.num_steps == 1000 and isinstance(c.train.num_steps, int)
  assert c.train.learning_rate == 3e-4
  assert c.data.nsp is False
  assert model_config(c.model, 100).num_layers == 3
  assert model_config(c.model, 100).hidden_size == 768  # the preset fills the rest


@pytest.mark.parametrize('override, message', [
    ('train.num_stpes=3', "did you mean 'train.num_steps'"),
    ('train.num_steps=abc', 'expects an integer'),
    ('train.learning_rate=fast', 'expects a number'),
    ('data.nsp=maybe', 'expects true or false'),
    ('model=3', 'group of fields'),
    ('nothing.here=1', "unknown config key 'nothing.here'"),
    ('train.num_steps', 'needs a value'),
])
def test_bad_overrides_are_one_line_errors(override, message):
  c = configs.load_experiment('mlm_nsp_base')
  with pytest.raises(ConfigError, match=message) as e:
    configs.apply_overrides(c, [override])
  assert '\n' not in str(e.value)


def test_unknown_experiment():
  with pytest.raises(ConfigError, match="did you mean 'mlm_nsp_tiny'"):
    configs.load_experiment('mlm_nsp_tiyn')


def test_bad_model_values_are_config_errors():
  c = configs.load_experiment('mlm_nsp_base')
  for key, value in (('size', 'huge'), ('attention', 'sideways'), ('num_heads', 7)):
    bad = c.model.to_dict()
    bad[key] = value
    with pytest.raises(ConfigError):
      model_config(bad, 100)


def test_config_json_round_trip():
  c = configs.load_experiment('mlm_nsp_tiny:smoke')
  again = configs.from_json(configs.to_json(c))
  assert again.to_dict() == c.to_dict()
