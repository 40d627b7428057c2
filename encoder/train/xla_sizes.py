"""Sizes as XLA's messages print them ('15.75G', '1.50GiB', '205.00 G', '512B'), read back
into bytes: the compiler's and the runtime's memory errors name what they needed and had this
way. JAX-free, so `targets` (which launch.py imports to refuse a name before JAX starts) can
read them too."""

SIZE = r'([\d.]+)\s*([KMGT]i?B?|B)?'
_UNITS = {'': 1, 'K': 2 ** 10, 'M': 2 ** 20, 'G': 2 ** 30, 'T': 2 ** 40}


def parse_size(number: str, unit: str | None) -> int:
  """'15.75', 'G' -> bytes (XLA's human-readable sizes count in powers of 1024)."""
  return int(float(number) * _UNITS[(unit or '').rstrip('iB')[:1]])
