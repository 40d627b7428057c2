"""Experiments load, and overrides are typed and strict."""

import pytest

from encoder import configs
from encoder.errors import ConfigError
from encoder.modules.config import model_config


def test_every_experiment_loads_with_and_without_smoke():
  names = configs.list_experiments()
  assert {'mlm_nsp_base', 'mlm_nsp_large', 'mlm_nsp_tiny'} <= set(names)
  for name in names:
    assert configs.load_experiment(name).experiment == name
    smoke = configs.load_experiment(f'{name}:smoke')
    assert smoke.train.num_steps <= 10


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


def test_unknown_experiment_and_variant():
  with pytest.raises(ConfigError, match="did you mean 'mlm_nsp_tiny'"):
    configs.load_experiment('mlm_nsp_tiyn')
  with pytest.raises(ConfigError, match="unknown variant 'fast'"):
    configs.load_experiment('mlm_nsp_tiny:fast')


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
