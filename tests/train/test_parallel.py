"""Device layout helpers on 8 simulated devices."""

import jax
import numpy as np

from encoder.train import parallel


def test_replicated_and_sharded_inputs_have_pmaps_output_layout():
  # pmap recompiles when an input's sharding differs from the one it was traced with; the
  # train step feeds its own output back, so inputs must already have the output's layout.
  step = jax.pmap(lambda state, batch: state + batch.sum(), axis_name=parallel.AXIS)
  state = parallel.replicate(np.zeros(3, np.float32))
  batch = parallel.shard({'x': np.arange(16 * 3, dtype=np.float32).reshape(16, 3)})['x']
  out = step(state, batch)
  assert out.sharding == state.sharding == batch.sharding
  assert batch.shape == (8, 2, 3)
  np.testing.assert_array_equal(parallel.unreplicate(state), np.zeros(3))


def test_per_device_batch_size_needs_an_even_split():
  import pytest

  from encoder.errors import ConfigError
  assert parallel.per_device_batch_size(32) == 4
  with pytest.raises(ConfigError, match='not divisible by 8 devices x 3'):
    parallel.per_device_batch_size(32, 3)
