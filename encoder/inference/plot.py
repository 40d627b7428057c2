"""Attention heatmaps as matplotlib Figures.

We build a `matplotlib.figure.Figure` directly rather than through pyplot: it needs no display
or backend (it renders with Agg when saved), and in a notebook the returned Figure is shown once
instead of once by pyplot's auto-display and again as the cell's value.
"""

from __future__ import annotations

import numpy as np


def attention_figure(tokens: list[str], weights: np.ndarray, title: str):
  """A [query, key] heatmap with the tokens on both axes, sized so ~30 tokens stay readable."""
  from matplotlib.figure import Figure

  n = len(tokens)
  side = min(max(4.0, 0.28 * n + 1.5), 16.0)
  fig = Figure(figsize=(side + 1.0, side))
  ax = fig.add_subplot()
  image = ax.imshow(weights, cmap='viridis', vmin=0.0, vmax=max(float(weights.max()), 1e-6))
  fontsize = 9 if n <= 30 else max(4, int(9 * 30 / n))
  ax.set_xticks(range(n), tokens, rotation=90, fontsize=fontsize)
  ax.set_yticks(range(n), tokens, fontsize=fontsize)
  ax.set_xlabel('attended to (key)')
  ax.set_ylabel('attending (query)')
  ax.set_title(title)
  fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
  fig.tight_layout()
  return fig
