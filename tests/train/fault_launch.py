"""`python fault_launch.py KIND:STEP[:term] ARGS...`: launch.py ARGS, SIGKILLed at one point of
the run (with `:term`, sent SIGTERM there instead, once, and left to go on: a preemption notice
landing in that phase, which the run must answer with a committed checkpoint and exit 0).

The kill points are the moments a real crash can hit that a timer would rarely land on:
  dispatched:N  right after step N is dispatched, its computation still running (inside a step)
  stepped:N     after step N's result is ready, before anything is logged (between steps)
  none:0        no kill (the test kills it from outside at a random time)
  metrics:N     halfway through writing step N's first metrics.jsonl line
  eval:N        during the evaluation at step N
  writing:N     inside the asynchronous checkpoint write of step N (arrays half written)
  commit:N      checkpoint N fully written to its temporary directory, not yet renamed
  committed:N   right after checkpoint N's rename, before Orbax's bookkeeping and cleanup
  deleting:N    while old step N is removed (keep_checkpoints), some of its files gone
  upload:N      inside the upload of metrics.jsonl holding step N's first record (bucket workdir)
Test code only: the patches wrap internals of the trainer and of Orbax 0.12.
"""

import asyncio
import json
import os
import signal
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def die() -> None:
  sys.stderr.flush()
  os.kill(os.getpid(), signal.SIGKILL)


def install(kind: str, at: int, action: str = 'kill') -> None:
  """Patches the kill point `kind` at step `at`; `action` 'term' signals there instead."""
  if action not in ('kill', 'term'):
    raise SystemExit(f'fault_launch: unknown action {action!r} (kill or term)')
  sent = []

  def act() -> None:  # SIGKILL, or one SIGTERM (a point may be met again) and go on
    if action == 'kill':
      die()
    elif not sent:
      sent.append(1)
      os.kill(os.getpid(), signal.SIGTERM)

  _install(kind, at, act, action == 'kill')


def _install(kind: str, at: int, act, killing: bool) -> None:
  """`act` is the point's action; `killing`: also leave what a kill there leaves (a cut line,
  a half-removed step), which a signalled run, going on, must not find."""
  import jax
  from orbax.checkpoint._src.path import atomicity
  from orbax.checkpoint._src.serialization import type_handlers

  from encoder.train import checkpoint, metric_writer, strategy, train_loop

  saving = {'step': None}
  original_save = checkpoint.Checkpointer.save

  def save(self, step, *args, **kwargs):
    saving['step'] = step
    return original_save(self, step, *args, **kwargs)

  checkpoint.Checkpointer.save = save

  count = {'n': 0}  # the global step: the resumed step, then one per train step
  original_progress = train_loop.Progress.__init__

  def progress(self, start, *args, **kwargs):
    count['n'] = start
    return original_progress(self, start, *args, **kwargs)

  train_loop.Progress.__init__ = progress
  original_steps = strategy.PmapStrategy.steps

  def steps(self, *args, **kwargs):
    train, evaluate = original_steps(self, *args, **kwargs)

    def step(state, batch):
      out = train(state, batch)
      count['n'] += 1
      if count['n'] == at and kind == 'dispatched':
        act()
      if count['n'] == at and kind == 'stepped':
        jax.block_until_ready(out)
        act()
      return out
    return step, evaluate

  strategy.PmapStrategy.steps = steps

  original_write = metric_writer.MetricWriter.write

  def write(self, step, split, metrics):
    if kind == 'metrics' and step == at:
      if killing:
        with open(self.path, 'a') as f:
          f.write(json.dumps({'step': step, 'split': split, 'loss': 1.0})[:24])
      act()
    return original_write(self, step, split, metrics)

  metric_writer.MetricWriter.write = write

  original_eval = train_loop.Evaluator.__call__

  def evaluate(self, rstate, step):
    if kind == 'eval' and step == at:
      jax.block_until_ready(self.eval_step(rstate.params, self.batches[0]))
      act()
    return original_eval(self, rstate, step)

  train_loop.Evaluator.__call__ = evaluate

  from encoder import storage
  original_write_atomic = storage.write_atomic

  def write_atomic(path, data):
    raw = data.encode('utf-8') if isinstance(data, str) else data
    last = raw.rstrip(b'\n').rsplit(b'\n', 1)[-1]
    if kind == 'upload' and storage.is_remote(path) and path.endswith('metrics.jsonl') and \
       last.startswith(b'{"step": %d, ' % at):
      act()
    return original_write_atomic(path, data)

  storage.write_atomic = write_atomic

  original_array_write = type_handlers.NumpyHandler._open_and_write

  async def array_write(self, *args, **kwargs):
    if kind == 'writing' and saving['step'] == at:
      await asyncio.sleep(0.01)
      act()
    return await original_array_write(self, *args, **kwargs)

  type_handlers.NumpyHandler._open_and_write = array_write

  original_rename = atomicity.async_path.rename

  async def rename(src, dst, *args, **kwargs):
    final = os.path.basename(str(dst)) == str(at)
    if final and kind == 'commit':
      act()
    result = await original_rename(src, dst, *args, **kwargs)
    if final and kind == 'committed':
      act()
    return result

  atomicity.async_path.rename = rename

  from orbax.checkpoint._src.path import deleter
  original_delete = deleter.StandardCheckpointDeleter.delete

  def delete(self, step):
    result = original_delete(self, step)
    if kind == 'deleting' and step == at:  # moved out of the way, now half removed
      for root, _, names in os.walk(os.path.join(str(self._directory), checkpoint.TRASH)):
        for name in names[:1] if killing else []:
          os.remove(os.path.join(root, name))
      act()
    return result

  deleter.StandardCheckpointDeleter.delete = delete


def main() -> None:
  kind, at, *action = sys.argv[1].split(':')
  sys.path.insert(0, ROOT)
  sys.argv = [os.path.join(ROOT, 'launch.py'), *sys.argv[2:]]
  install(kind, int(at), *action)
  from encoder import launch
  launch.main()


if __name__ == '__main__':
  main()
