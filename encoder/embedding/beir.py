"""The BEIR folder reader lives in `encoder.data.beir` (contrastive training reads it too)."""

from encoder.data.beir import Beir, read

__all__ = ['Beir', 'read']
