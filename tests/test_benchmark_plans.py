"""Model FLOPs counted from the model's own parameter shapes, and tpu_plan's arithmetic: the
affine line of need against batch and depth, and the walk of full-depth compiles to the
largest batch that fits (a fake compiler; the real one runs in benchmarks/tpu_plan.py)."""

import types

import pytest


def fake_plan(path, need, hbm: int):
  """A tpu_plan.Plan (its file `path`) whose compiler is arithmetic: a compile needs
  `need(per_chip_batch, layers)` bytes (layers None: the full depth) and fits under `hbm`."""
  from benchmarks import tpu_plan

  class FakePlan(tpu_plan.Plan):
    def target(self, name):
      return types.SimpleNamespace(hbm_bytes=hbm)

    def compile(self, exp, seq, remat, topology, layers, per_chip_batch):
      key = self.key(exp, seq, remat, topology, layers, per_chip_batch)
      if key not in self.records:
        self.made += 1
        n = need(per_chip_batch, layers)
        self.records[key] = {'exp': exp, 'seq': seq, 'remat': remat, 'dtype': self.dtype,
                             'topology': topology, 'layers': layers or 0,
                             'per_chip_batch': per_chip_batch, 'need_bytes': n,
                             'fits': n <= hbm}
      return self.records[key]

  return FakePlan(str(path), 'bfloat16', 100)


@pytest.mark.parametrize('size', ['mini', 'modern_mini'])
def test_model_flops_count_the_models_own_kernels_and_the_local_band(size):
  """6 N B T with N counted from the model's parameter shapes (the encoder's kernels, bar the
  embedding tables; the pooler's once a row); the attention term over the band a local layer
  sees."""
  import flax.linen as nn
  import jax
  import numpy as np

  from benchmarks.common.step_timing import keys_per_query, model_flops
  from encoder.modules.config import model_config
  from encoder.modules.transformer import Encoder
  cfg = model_config({'size': size, 'vocab_size': 1000})
  shapes = jax.eval_shape(lambda: nn.unbox(Encoder(cfg).init(
      jax.random.key(0), np.zeros((1, 4), np.int32)))['params'])
  leaves = [(jax.tree_util.keystr(path), int(np.prod(leaf.shape))) for path, leaf in
            jax.tree_util.tree_flatten_with_path(shapes)[0] if path[-1].key == 'kernel']
  kernels = sum(size for name, size in leaves if 'pooler' not in name)
  pooler = sum(size for name, size in leaves if 'pooler' in name)  # on one position a row
  batch, seq = 2, 128
  attention = model_flops(cfg, batch, seq, 0) - 6 * kernels * batch * seq - 6 * pooler * batch
  local = [cfg.is_local(i) for i in range(cfg.num_layers)]
  assert any(local) == (size == 'modern_mini')
  want = sum(12 * cfg.hidden_size * batch * seq * (keys_per_query(seq, cfg.local_window)
                                                   if is_local else seq) for is_local in local)
  assert attention == pytest.approx(want)
  # A band as wide as the row is the whole row; a narrower one averages fewer keys.
  assert keys_per_query(seq, 2 * seq) == seq and keys_per_query(seq, 64) < 65


def test_tpu_plan_reads_need_as_affine_in_batch_and_depth():
  """tpu_plan's line: four compiles at two batches and two depths give a + b L + (c + d L) B
  exactly, so the full depth's need at any batch follows."""
  from benchmarks.tpu_plan import bilinear

  def need(batch, layers):
    return 1000 + 70 * layers + (5 + 3 * layers) * batch
  points = {(b, layers): need(b, layers) for b in (2, 8) for layers in (2, 4)}
  a, b, c, d = bilinear(points)
  assert (a + b * 12 + (c + d * 12) * 40) == pytest.approx(need(40, 12))


def test_tpu_plan_walks_full_depth_compiles_to_the_boundary_and_resumes(tmp_path):
  """A remat cell's line from full-depth compiles (twice the batch the plain run fits, then
  that need scaled to the HBM), its walk to a refused batch one row above a fitting one, and a
  second run of the plan making no compile again. The compiler here is a need that is affine
  in the batch with a bend near the HBM (the TPU compiler rematerializes on its own there)."""
  from benchmarks import tpu_plan
  gib = 2 ** 30
  hbm = int(15.75 * gib)

  def need(batch, layers=None):
    bend = 0.2 * gib if batch > 150 else 0
    return int(1.4 * gib + 0.023 * gib * batch + bend)

  def answer(plan):
    plan.compile('m', 512, False, 'v5e:2x2', None, 47)  # the plain run's largest batch
    fixed, per_row = tpu_plan.remat_line(plan, 'm', 512, 'v5e:2x2', may_compile=True)
    cell = {'exp': 'm', 'seq': 512, 'remat': True, 'topology': 'v5e:2x2'}
    predicted = int((hbm - fixed) / per_row)
    return tpu_plan.confirm_at_full_depth(plan, cell, predicted, per_row, hbm, True)[0]

  plan = fake_plan(tmp_path / 'none.jsonl', need, hbm)
  batch, record, next_refused = answer(plan)
  truth = max(b for b in range(1, 1000) if need(b) <= hbm)
  assert (batch, next_refused) == (truth, True) and record['need_bytes'] == need(truth)
  remat_batches = sorted(r['per_chip_batch'] for r in plan.records.values() if r['remat'])
  assert remat_batches[0] == 94 and len(remat_batches) <= 2 + tpu_plan.FULL_COMPILES
  made = plan.made
  assert answer(plan)[0] == truth and plan.made == made  # resumed: nothing compiled again

  # A file holding only refused remat compiles near the HBM (an earlier plan's) still gets
  # the line's low point: refused answers alone do not draw the line.
  plan = fake_plan(tmp_path / 'none.jsonl', need, hbm)
  for refused in (640, 660):
    assert not plan.compile('m', 512, True, 'v5e:2x2', None, refused)['fits']
  batch, record, next_refused = answer(plan)
  assert (batch, next_refused) == (truth, True)
  assert 94 in [r['per_chip_batch'] for r in plan.records.values() if r['remat']]


def test_tpu_plan_walk_to_the_boundary_where_the_compiler_bends_the_need(tmp_path):
  """BERT-large at 512 tokens on v5e as the compiler answered it (docs/scaling/
  tpu_plan_compiles.jsonl): 16-24 rows fit at needs it held to 14.5-15.3 GiB, rematerializing
  on its own, and 112 rows were refused at 66.5 GiB (here 67.2, 0.578 GiB a row). Past 24 rows
  this fake goes on at 0.09 GiB a row to a boundary at 28. From the file as it stood (16-20
  and 112 compiled), a line through two fits would jump past 100 rows and one to the refusal
  crawls a row a compile (21, 22, ... 29: nine compiles); the walk takes the fits' slope
  where it reaches further, short of the refusal, and closes the bracket in two runs of the
  plan (a run makes four compiles a cell, a second resumes from the file)."""
  from benchmarks import tpu_plan
  gib = 2 ** 30
  hbm = int(15.75 * gib)
  compiled = {16: 14.94, 17: 14.52, 18: 14.82, 19: 14.83, 20: 14.97, 21: 14.96, 22: 15.13,
              23: 15.21, 24: 15.30}  # GiB, the compiler's

  def need(batch, layers=None):
    if batch in compiled:
      return int(compiled[batch] * gib)
    if batch <= 28:
      return int((15.30 + 0.09 * (batch - 24)) * gib)
    return int((2.5 + 0.578 * batch) * gib)

  plan = fake_plan(tmp_path / 'none.jsonl', need, hbm)
  for batch in (16, 17, 18, 19, 20, 112):
    plan.compile('m', 512, False, 'v5e:2x2', None, batch)
  plan.made = 0
  cell = {'exp': 'm', 'seq': 512, 'remat': False, 'topology': 'v5e:2x2'}
  answers = [tpu_plan.confirm_at_full_depth(plan, cell, 16, 0.66 * gib, hbm, True)
             for _ in range(2)]
  (batch, _, next_refused), refused = answers[-1]
  assert (batch, next_refused, refused) == (28, True, 29)
  assert plan.made <= 6


def test_tpu_plan_compiles_one_row_where_its_line_fits_none(tmp_path):
  """ModernBERT-large at 8,192 tokens on v5e: the small compiles' line needs 17 GiB a row at
  full depth, so it predicts 0 rows; the compiler is asked about one row and its refusal is
  the table's row (not a prediction)."""
  from benchmarks import tpu_plan
  gib = 2 ** 30
  hbm = int(15.75 * gib)

  depth = tpu_plan.config_of('mlm_modern_large', 8192, False, 'bfloat16', None,
                             1).model.num_layers

  def need(batch, layers):
    layers = layers or depth
    return int((1.0 + 0.3 * layers + (0.5 + 0.6 * layers) * batch) * gib)
  plan = fake_plan(tmp_path / 'none.jsonl', need, hbm)
  cell = tpu_plan.plan_cell(plan, 'mlm_modern_large', 8192, False, 'v5e:2x2', 'boundary',
                            'v5e:2x2')
  assert cell['predicted_batch'] == 0 and cell['refused_at'] == 1
  full = [r['per_chip_batch'] for r in plan.records.values() if not r['layers']]
  assert full == [1]  # one full-depth compile, refused
  row = tpu_plan.markdown([cell]).splitlines()[-1]
  assert '| 0 | 0 |' in row and f"{need(1, cell['layers']) / gib:.2f} / 15.75" in row
  assert row.endswith('compiled: one row refused |')
