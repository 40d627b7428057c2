"""Hugging Face model families, one file each (bert.py, modernbert.py), every one implementing
family.Family: recognise a config.json, map it to our model fields (refusing what we cannot
express), map the weights both ways in pure numpy, read and write the tokenizer. heads.py holds
what they share of fine-tuned task heads (the task of a class, the labels of config.json).

The command is `python -m encoder.convert`; encoder/convert.py holds the list of families and
does what they share (safetensors, checkpoints, config.json).
"""
