"""A small train state for checkpoint tests: the parameters given, a step, and stand-ins for
the optimizer state and the dropout key (the Checkpointer saves whatever trees they hold)."""

import numpy as np

from encoder.train.steps import TrainState


def toy_state(params: dict, step: int = 0) -> TrainState:
  return TrainState(step=np.asarray(step, np.int32), params=params,
                    opt_state={'count': np.full((2,), step, np.int32)},
                    rng=np.zeros((2,), np.uint32))
