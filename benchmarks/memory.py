"""Prints the per-device memory of a train step under pmap and under the FSDP mesh, from XLA.

  python -m benchmarks.memory [--exp mlm_nsp_large] [--devices 8] [--batch_size 256] [--seq 128]

Nothing is allocated: the state is abstract (`jax.eval_shape`), the steps are lowered and
compiled for simulated CPU devices, and the numbers come from each executable's
`memory_analysis()` (per device): arguments (the train state and the batch shard), outputs,
aliased bytes (the donated state reused for the new one), temporaries (activations, gradients,
optimizer intermediates) and their peak, arguments + outputs - aliased + temporaries.
"""

import argparse
import os

MiB = 2 ** 20


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--exp', default='mlm_nsp_large')
  parser.add_argument('--devices', type=int, default=8)
  parser.add_argument('--batch_size', type=int, default=256, help='global batch')
  parser.add_argument('--seq', type=int, default=128)
  return parser.parse_args(argv)


def setup(args):
  import jax

  from encoder import configs
  from encoder.tasks import get_task
  from encoder.train.optim import make_optimizer
  from encoder.train.resolve import resolve_config
  config = configs.load_experiment(args.exp)
  config.data.max_seq_length = args.seq
  config.train.batch_size = args.batch_size
  config = resolve_config(config)
  config.model.vocab_size = config.data.vocab_size
  task = get_task(config.task)
  model, tx = task.build_model(config), make_optimizer(config.train)
  batch = jax.eval_shape(lambda: task.dummy_batch(config, args.batch_size))
  return config, task, model, tx, task.dummy_batch(config), batch


def report(name: str, compiled) -> None:
  m = compiled.memory_analysis()
  peak = (m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
          + m.temp_size_in_bytes)
  print(f'{name:<22} arguments {m.argument_size_in_bytes / MiB:9.1f}  outputs '
        f'{m.output_size_in_bytes / MiB:9.1f}  aliased {m.alias_size_in_bytes / MiB:9.1f}  '
        f'temporaries {m.temp_size_in_bytes / MiB:9.1f}  peak {peak / MiB:9.1f} MiB per device')


def main(argv=None) -> None:
  args = parse_args(argv)
  # XLA reads the device count once, when its backend starts: set before JAX is imported.
  os.environ['XLA_FLAGS'] = f'--xla_force_host_platform_device_count={args.devices}'
  os.environ.setdefault('JAX_PLATFORMS', 'cpu')
  import jax
  import numpy as np

  from encoder.train.sharding import bytes_per_device
  from encoder.train.strategy import MeshStrategy, PmapStrategy, abstract_state
  config, task, model, tx, dummy, batch = setup(args)
  n = args.devices
  state = abstract_state(model, tx, dummy)  # shapes only: nothing is allocated
  params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state.params))
  whole = sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(state))
  print(f'{args.exp}: {params:,} parameters; train state (params + Adam moments) '
        f'{whole / MiB:.1f} MiB; global batch {args.batch_size} x seq {args.seq} over {n} '
        f'devices')

  per_device = lambda x: jax.ShapeDtypeStruct((n, *x.shape), x.dtype)  # noqa: E731
  local = lambda x: jax.ShapeDtypeStruct((n, x.shape[0] // n, *x.shape[1:]), x.dtype)  # noqa: E731
  pmapped, _ = PmapStrategy().steps(model, task, tx, 1)
  compiled = pmapped.lower(jax.tree.map(per_device, state), jax.tree.map(local, batch)).compile()
  print(f'{"pmap (replicated)":<22} train state per device {whole / MiB:.1f} MiB')
  report('pmap (replicated)', compiled)

  for name, shape in (('mesh data=8', {'data': -1, 'fsdp': 1, 'tensor': 1}),
                      (f'mesh fsdp={n}', {'data': 1, 'fsdp': -1, 'tensor': 1})):
    config.parallel.mesh_shape.update(shape)
    strategy = MeshStrategy(config.parallel)
    strategy.lay_out(model, tx, dummy)
    train, _ = strategy.steps(model, task, tx, 1)
    compiled = train.lower(state, batch).compile()
    mine = bytes_per_device(state, strategy.state_shardings)
    print(f'{name:<22} train state per device {mine / MiB:.1f} MiB')
    report(name, compiled)


if __name__ == '__main__':
  main()
