"""The modern recipe's experiments and the ladder: what each run is configured to be, the
mask-rate schedule's arithmetic, and mlm_modern_base at its real size (counted, one step)."""

import ml_collections
import pytest

from encoder import configs
from encoder.data.pretrain import mask_schedule
from encoder.errors import ConfigError
from encoder.modules.config import model_config
from encoder.sweep import parse_sweep
from encoder.sweep.grid import run_configs


def ladder_runs():
  config = configs.load_experiment('mlm_modern_tiny')
  axes = parse_sweep('ladder', config, configs.experiment_module('mlm_modern_tiny'))
  return config, [(name, run) for name, _, run in run_configs(config, axes)]


def test_the_ladder_climbs_from_bert_without_nsp_to_mlm_modern_tiny_one_step_at_a_time():
  experiment, runs = ladder_runs()
  names = [n for n, _ in runs]
  assert names == ['0-bert', '1-packing', '2-pre_ln', '3-no_bias', '4-geglu', '5-rope',
                   '6-local_global', '7-mask_30', '8-wsd', '9-stable_adamw']
  assert configs.to_json(runs[-1][1]) == configs.to_json(experiment)  # the top is the recipe
  bert = runs[0][1]
  m = model_config(bert.model, vocab_size=1024)
  assert (m.norm, m.use_bias, m.activation, m.position_embedding, m.local_window,
          m.type_vocab_size, m.pooler, m.intermediate_size, m.init) == (
      'post', True, 'gelu', 'learned', 0, 2, 'tanh', 512, 'bert')
  assert (bert.data.packing, bert.data.mask_rate, bert.data.nsp, bert.train.schedule,
          bert.train.optimizer, bert.train.b2, bert.train.clip_norm) == (
      'none', 0.15, False, 'linear', 'adamw', 0.999, 1.0)
  # One budget for every run: steps, rows, tokens per row, peak lr and the held-out masks.
  budget = {(r.train.num_steps, r.train.batch_size, r.data.max_seq_length,
             r.train.learning_rate, r.train.warmup_steps, r.data.eval_mask_rate, r.train.seed)
            for _, r in runs}
  assert budget == {(4500, 32, 64, 1.5e-3, 200, 0.15, 0)}
  # Each run differs from the one below it in the fields of its own step only.
  from experiments.mlm_modern_tiny import LADDER_STEPS
  keys = configs.flatten_keys(experiment)
  for k in range(1, len(runs)):
    below, above = runs[k - 1][1].to_dict(), runs[k][1].to_dict()
    changed = {key for key in keys if configs.nested_get(below, key.split('.')) !=
               configs.nested_get(above, key.split('.'))}
    own = {o.partition('=')[0] for o in LADDER_STEPS[k - 1][1]}
    assert changed and changed <= own, (runs[k][0], changed - own)
  assert {o.partition('=')[0] for o in LADDER_STEPS[4][1]} == {'model.position_embedding'}


def test_ladder_gated_mlp_matches_bert_tinys_mlp_parameter_count():
  _, runs = ladder_runs()
  gelu = model_config(runs[3][1].model, vocab_size=1024)
  geglu = model_config(runs[4][1].model, vocab_size=1024)
  gelu_weights = 2 * gelu.hidden_size * gelu.intermediate_size
  geglu_weights = 3 * geglu.hidden_size * geglu.intermediate_size
  assert abs(geglu_weights - gelu_weights) / gelu_weights < 0.01


def test_the_ladder_dry_run_lists_every_arm(capsys, tmp_path):
  from encoder import launch
  assert launch.run(['--exp', 'mlm_modern_tiny', '--sweep', 'ladder', '--dry_run',
                      '--workdir', str(tmp_path)]) == 0
  lines = capsys.readouterr().out.strip().splitlines()
  assert len(lines) == 10 and lines[-1].strip().endswith('9-stable_adamw')
  assert '--config.data.packing=none' in lines[0] and not (tmp_path / '0-bert').exists()


def test_mlm_modern_base_states_modernberts_recipe_and_size():
  c = configs.load_experiment('mlm_modern_base')
  m = model_config(c.model, vocab_size=c.data.vocab_size)
  assert (m.num_layers, m.hidden_size, m.intermediate_size, m.local_window, m.global_every,
          m.activation, m.use_bias, m.rope_theta) == (22, 768, 1152, 128, 3, 'geglu', False,
                                                      10_000.0)
  assert (c.data.nsp, c.data.packing, c.data.mask_rate, c.data.eval_mask_rate,
          c.data.max_seq_length) == (False, 'documents', 0.3, 0.15, 1024)
  assert (c.train.optimizer, c.train.schedule, c.train.decay_steps, c.train.learning_rate,
          c.train.batch_size) == ('stable_adamw', 'wsd', 0, 8e-4, 4608)
  assert c.train.weight_decay == pytest.approx(0.0125)
  long = configs.load_experiment('mlm_modern_base:context')
  assert (long.data.max_seq_length, long.model.rope_theta, long.train.learning_rate,
          long.train.batch_size * 8192) == (8192, 160_000.0, 3e-4, 4608 * 1024)
  assert long.train.num_steps > c.train.num_steps > long.train.decay_steps > 0


def test_mlm_modern_base_describe_counts_modernbert_base_and_states_the_recipe(capsys):
  from encoder import launch
  assert launch.run(['--exp', 'mlm_modern_base', '--describe']) == 0
  text = capsys.readouterr().out
  assert 'Encoder parameters: 149,014,272' in text  # transformers' ModernBertModel, base
  assert 'MLM only, rows documents, mask 0.3 (held-out 0.15), sequence 1024, batch 4608' in text
  assert 'stable_adamw lr 0.0008 (b1 0.9, b2 0.98' in text and 'wsd, warmup 636' in text


def test_mlm_modern_base_smoke_trains_a_step(tmp_path, corpus, cache_dir):
  from tests.train.test_trainer import train
  metrics = train(tmp_path / 'w', corpus, cache_dir, 'train.num_steps=1', 'train.eval_every=1',
                  'train.decay_steps=0', 'train.warmup_steps=0', exp='mlm_modern_base:smoke')
  assert 0 <= metrics['mlm_accuracy'] <= 1 and metrics['mlm_loss'] > 0


def data(**fields):
  base = dict(mask_rate=0.3, dynamic_masking=True, mask_rate_schedule='constant',
              mask_rate_final=None, mask_rate_steps='')
  return ml_collections.ConfigDict({**base, **fields})


def test_mask_rate_schedules_give_each_steps_rate():
  assert [mask_schedule.rate_at(data(), 100, s) for s in (0, 99)] == [0.3, 0.3]
  linear = data(mask_rate_schedule='linear', mask_rate_final=0.1)
  assert mask_schedule.rate_at(linear, 100, 50) == pytest.approx(0.2)
  assert mask_schedule.rate_at(linear, 100, 100) == pytest.approx(0.1)
  phases = data(mask_rate_schedule='steps', mask_rate_steps='40:0.15,45:0.05')  # mmBERT's
  assert [mask_schedule.rate_at(phases, 50, s) for s in (0, 39, 40, 44, 45, 49)] == [
      0.3, 0.3, 0.15, 0.15, 0.05, 0.05]
  assert mask_schedule.peak_rate(phases) == 0.3
  assert mask_schedule.peak_rate(data(mask_rate=0.1, mask_rate_schedule='linear',
                                      mask_rate_final=0.4)) == 0.4


@pytest.mark.parametrize('fields, message', [
    (dict(mask_rate_schedule='cosine'), 'not one of constant, linear, steps'),
    (dict(mask_rate_schedule='linear'), 'needs data.mask_rate_final'),
    (dict(mask_rate_schedule='steps'), 'needs data.mask_rate_steps'),
    (dict(mask_rate_schedule='steps', mask_rate_steps='40=0.15'), 'STEP:RATE'),
    (dict(mask_rate_schedule='steps', mask_rate_steps='40:0.1,20:0.2'), 'increasing'),
    (dict(mask_rate_schedule='steps', mask_rate_steps='40:1.5'), 'reaches 1.5'),
    (dict(mask_rate_schedule='linear', mask_rate_final=0.1, dynamic_masking=False),
     'dynamic_masking'),
])
def test_bad_mask_rate_schedules_are_refused(fields, message):
  with pytest.raises(ConfigError, match=message):
    mask_schedule.check(data(**fields))
