"""Command line: train, describe, inspect or sweep an experiment (see README.md).

  python launch.py --exp mlm_nsp_tiny
  python launch.py --list | --exp NAME --print_config | --describe | --inspect_data N

The door users and docs know, at the top of the repository; the command itself is
`encoder/launch.py` (installed as `encoder-train`, or `python -m encoder.launch`).
"""

from encoder.launch import main

if __name__ == '__main__':
  main()
