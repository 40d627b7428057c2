"""`python -m encoder.convert --from-hf DIR --out WORKDIR` / `--to-hf WORKDIR --out DIR`.

The command's stable name; the converter itself lives in encoder/hf/ (convert.py, mapping.py).
"""

import sys

from encoder.hf.convert import main

if __name__ == '__main__':
  sys.exit(main())
