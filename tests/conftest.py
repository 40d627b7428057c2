"""Test setup: eight simulated CPU devices, so pmap paths run as on a real host.

The flag must be set before JAX is first imported, hence here at collection time.
"""

import os
import sys

os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
