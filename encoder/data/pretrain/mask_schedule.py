"""The training mask rate over steps: constant (BERT), linear, or a step per phase.

Why a schedule: mmBERT (Marone et al., 2025) masks 30% of tokens in pretraining, 15% in
mid-training and 5% in the decay, since a high rate gives more targets per step early and a low
one lets the late model read more context; MosaicBERT and others ramp it. The rate is a pure
function of the step, like the masks drawn with it, so a resumed run masks exactly as an
uninterrupted one. Held-out masks stay at `data.eval_mask_rate`, so curves compare across
rates and runs.

  data.mask_rate_schedule = constant | linear | steps
  linear: from data.mask_rate at step 0 to data.mask_rate_final at train.num_steps
  steps:  data.mask_rate until the first boundary of data.mask_rate_steps ('STEP:RATE,...',
          e.g. mmBERT's phases as '40000:0.15,45000:0.05'), then each RATE from its STEP on

A batch's masked_* fields keep one width for the whole run (the most predictions any step
needs), so the train step compiles once; steps at a lower rate pad them with zero weights.
"""

from __future__ import annotations

from encoder.errors import ConfigError

SCHEDULES = ('constant', 'linear', 'steps')


def schedule_name(d) -> str:
  # d may be the fixed masks' fields (preparation._mask_fields), which carry no schedule
  name = str(d.get('mask_rate_schedule', 'constant') or 'constant')
  if name not in SCHEDULES:
    raise ConfigError(f"data.mask_rate_schedule='{name}' is not one of {', '.join(SCHEDULES)}")
  return name


def is_scheduled(d) -> bool:
  return schedule_name(d) != 'constant'


def boundaries(d) -> list[tuple[int, float]]:
  """data.mask_rate_steps parsed: [(step, rate)], steps strictly increasing."""
  text = str(d.get('mask_rate_steps', '') or '')
  out = []
  for item in filter(None, (p.strip() for p in text.split(','))):
    step, sep, rate = item.partition(':')
    try:
      if not sep:
        raise ValueError
      out.append((int(step), float(rate)))
    except ValueError:
      raise ConfigError(f"data.mask_rate_steps='{text}': write STEP:RATE pairs, e.g. "
                        "'40000:0.15,45000:0.05'") from None
  steps = [s for s, _ in out]
  if steps != sorted(set(steps)) or any(s < 1 for s in steps):
    raise ConfigError(f"data.mask_rate_steps='{text}': steps must be positive and increasing")
  return out


def rates(d) -> list[float]:
  """Every rate the schedule takes (its extremes, for a linear one)."""
  name = schedule_name(d)
  if name == 'linear':
    final = d.get('mask_rate_final')
    if final is None:
      raise ConfigError('data.mask_rate_schedule=linear needs data.mask_rate_final')
    return [float(d.mask_rate), float(final)]
  if name == 'steps':
    steps = boundaries(d)
    if not steps:
      raise ConfigError("data.mask_rate_schedule=steps needs data.mask_rate_steps, e.g. "
                        "'40000:0.15,45000:0.05'")
    return [float(d.mask_rate), *(r for _, r in steps)]
  return [float(d.mask_rate)]


def check(d) -> None:
  """Refuses a schedule that cannot run: rates outside (0, 1), or with fixed masks."""
  for rate in rates(d):
    if not 0 < rate < 1:
      raise ConfigError(f'data.mask_rate schedule reaches {rate}: every rate must lie in (0, 1)')
  if is_scheduled(d) and not d.dynamic_masking:
    raise ConfigError('data.mask_rate_schedule needs data.dynamic_masking=true: fixed masks are '
                      'drawn once, before any step')


def peak_rate(d) -> float:
  """The highest rate of the schedule: it sets the width of the masked_* fields."""
  return max(rates(d))


def rate_at(d, num_steps: int, step: int) -> float:
  """The training mask rate of global batch `step` (0-based)."""
  name = schedule_name(d)
  if name == 'linear':
    progress = min(max(step / max(int(num_steps), 1), 0.0), 1.0)
    return float(d.mask_rate) + progress * (float(d.mask_rate_final) - float(d.mask_rate))
  rate = float(d.mask_rate)
  if name == 'steps':
    for start, value in boundaries(d):
      if step >= start:
        rate = value
  return rate
