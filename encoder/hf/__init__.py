"""Hugging Face BERT directories <-> our workdirs: convert.py (the command line, configs,
tokenizers, checkpoint files) and mapping.py (parameter names and layouts, pure numpy).

The command is `python -m encoder.convert`, a stable name that runs convert.main.
"""
