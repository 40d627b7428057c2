"""Exception types for user errors.

`launch.py` catches `EncoderError` and prints one line, `error: <message>`, with exit status 2.
Anything else is a bug and keeps its traceback (exit status 1).
"""


class EncoderError(Exception):
  """Base class of every error caused by the user's input rather than by our code."""


class ConfigError(EncoderError):
  """An unknown experiment, a mistyped or wrongly typed override, an inconsistent config."""


class DataError(EncoderError):
  """A missing, empty, unreadable or malformed dataset, corpus or tokenizer."""


class CheckpointError(EncoderError):
  """A missing, unreadable or mismatched checkpoint or workdir."""


class OutOfMemoryError(EncoderError):
  """A step that does not fit its devices' memory, said by a target's compiler (--compile_for)
  or by a failed allocation during a run: the run's sizes, not a bug."""
