"""What a log line says about progress: `step 45 · loss 2.4722`, or the line itself.

Trainers print Hugging Face style dicts (`{'loss': 2.47, ..., 'step': 45}`), tqdm bars
(` 37%|███▋  | 45/120 [...]`) or plain text. Pure functions, unit-tested.
"""

from __future__ import annotations

import re

# A whole number only (`--`, `.`, `1.2.3` are not one): float() must never fail on a
# match, or one odd line raises on every refresh and freezes a host's rows.
_LOSS = re.compile(r"""['"]?(?:train_)?loss['"]?\s*[:=]\s*['"]?"""
                   r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)")
_STEP = re.compile(r"""['"]?(?:global_)?step['"]?\s*[:=]\s*(\d+)""")
_BAR = re.compile(r"\|\s*(\d+)/(\d+)\s*\[")


def progress_of(lines: list[str], width: int = 60) -> str:
    """Summarise the newest lines: step and loss when they show, else the last line."""
    step = loss = None
    for line in reversed(lines):
        if loss is None and (m := _LOSS.search(line)):
            loss = m.group(1)
            if step is None and (s := _STEP.search(line)):
                step = s.group(1)
        if step is None and (b := _BAR.search(line)):
            step = f"{b.group(1)}/{b.group(2)}"
        if step is not None and loss is not None:
            break
    if step is not None or loss is not None:
        parts = ([f"step {step}"] if step else []) + ([f"loss {float(loss):.4f}"] if loss else [])
        return " · ".join(parts)
    for line in reversed(lines):
        if line.strip():
            text = line.strip()
            return text if len(text) <= width else text[: width - 1] + "…"
    return ""
