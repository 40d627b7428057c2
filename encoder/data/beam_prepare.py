"""`python -m encoder.data.beam_prepare ...`, the command earlier docs give: the Beam
preparation now lives in `encoder.data.pretrain.beam_pipeline`; this forwards to it."""

import sys

from encoder.data.pretrain.beam_pipeline import main

if __name__ == '__main__':
  main(sys.argv[1:])
