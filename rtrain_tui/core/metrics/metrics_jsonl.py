"""Metrics from a run's `metrics.jsonl`: one JSON object per line, each with its step.

Some trainers write, beside their log, `{"step": 10, "loss": 2.31, "learning_rate": 1e-4,
"grad_norm": 0.9, "epoch": 0.1}` per logging step and `{"step": 50, "eval_loss": 2.0}`
per eval (Hugging Face's `log_history`, one record a line). Unlike the log, every point
says its own step, so these are the run's authoritative series; how they combine with the
log's is `MetricsParser`'s rule (metrics.py).

Pure: `JsonlMetrics.feed` takes the file's bytes from the cached offset and says how many
it used: through the last newline, so a line the trainer is still writing is read again,
whole, once it ends. Its state is plain JSON for the metrics cache.

A resumed or retried run's trainer goes on appending to the same file from its checkpoint,
so the attempt before's points past it are followed by the new attempt's for the same
steps. A point whose step is before the newest one seen, or a series' step again, is the
new attempt's: the points from that step on (of every series, for a step back) are the
attempt before's, and are dropped, as the log's are at its `=== attempt` line.

Hostile input is skipped, never an error: a line that is not a JSON object, a line longer
than `MAX_LINE`, a value that is not a number, a step that is not a finite non-negative
integer that fits the cache's 64-bit columns. NaN and infinity (JSON `NaN`, `Infinity`,
or as strings) are kept as values, as the log parser keeps `nan` and `inf`.
"""

from __future__ import annotations

import base64
import json
import math
import re
from array import array
from operator import itemgetter

MAX_LINE = 1 << 16  # a longer line is skipped whole: no record is that long
MAX_STEP = (1 << 63) - 1  # the cache packs steps as signed 64-bit
# A number written as a string (transformers 5 quotes them): nothing `float()` would
# take beyond that (`1_000`, ` 1 `, `infinity`).
_NUMBER = re.compile(r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)", re.IGNORECASE)

# The series a record can carry, and the keys that name each (first present wins).
SERIES: dict[str, tuple[str, ...]] = {
    "losses": ("loss", "train_loss"),
    "eval_losses": ("eval_loss", "val_loss"),
    "learning_rates": ("learning_rate", "lr"),
    "grad_norms": ("grad_norm",),
}


def parse_record(line: bytes) -> dict[str, float] | None:
    """One line → its numeric fields; None when the line is not a JSON object.

    Booleans, nested values, and strings that are not numbers are left out; so is an
    integer too big for a float.
    """
    if len(line) > MAX_LINE:
        return None
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if not isinstance(obj, dict):
        return None
    out: dict[str, float] = {}
    for key, value in obj.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, str):
            if not _NUMBER.fullmatch(value.strip()):
                continue
            value = value.strip()
        elif not isinstance(value, (int, float)):
            continue
        try:
            out[key] = float(value)
        except OverflowError:  # an integer of hundreds of digits
            continue
    return out


def usable_step(value: float | None) -> int | None:
    """A step as an int, or None when it is not finite, negative or too big to store."""
    if value is None or not math.isfinite(value) or not 0 <= value <= MAX_STEP:
        return None
    return int(value)


class JsonlMetrics:
    """The series read from a run's metrics.jsonl so far."""

    def __init__(self) -> None:
        self.series: dict[str, list[tuple[int, float]]] = {name: [] for name in SERIES}
        self.total: int | None = None  # `total_steps` / `max_steps`
        self.last_step: int | None = None
        self.final: dict[str, float] = {}  # a record with `train_runtime`
        self.records = 0  # lines taken as records
        self.skipping = False  # inside an overlong line: drop bytes through its newline

    def feed(self, data: bytes) -> int:
        """Take the complete lines at the start of `data`, the file's bytes from the
        offset; returns how many bytes were used, so the offset moves by that much.

        The unfinished last line is left for a later call, unless it is already longer
        than MAX_LINE: then it is skipped through its newline, however many calls that
        takes (so a line that never ends is not read again on every sync).
        """
        used = 0
        if self.skipping:
            nl = data.find(b"\n")
            if nl < 0:
                return len(data)
            self.skipping = False
            used = nl + 1
        cut = data.rfind(b"\n", used)
        if cut >= 0:
            self.feed_lines(data[used:cut + 1])
            used = cut + 1
        if len(data) - used > MAX_LINE:
            self.skipping = True
            return len(data)
        return used

    def feed_lines(self, block: bytes) -> None:
        """Take a block of complete lines (it ends with a newline or is empty)."""
        for line in block.split(b"\n"):
            if line.strip():
                self.add(parse_record(line))

    def add(self, rec: dict[str, float] | None) -> None:
        if not rec:
            return
        self.records += 1
        for key in ("total_steps", "max_steps"):
            if (total := usable_step(rec.get(key))) is not None and total > 0:
                self.total = total
                break
        step = usable_step(rec.get("step", rec.get("global_step")))
        back = False  # a step before the newest: a new attempt goes on from a checkpoint
        if "train_runtime" in rec:
            self.final = rec  # the trainer's closing summary, not a point of a curve
        elif step is None:
            return  # a point without its step cannot be placed on a curve
        else:
            back = self.last_step is not None and step < self.last_step
            if back:
                for name in SERIES:
                    self._drop_from(name, step)
                self.final = {}
            for name, keys in SERIES.items():
                for key in keys:
                    if key in rec:
                        self._drop_from(name, step)  # this series' step again, if it is
                        self.series[name].append((step, rec[key]))
                        break
        if step is not None:
            self.last_step = step if self.last_step is None or back else max(self.last_step, step)

    def _drop_from(self, name: str, step: int) -> None:
        """Drop the points of series `name` at `step` and after (the attempt before's)."""
        points = self.series[name]
        if points and points[-1][0] >= step:
            points[:] = [p for p in points if p[0] < step]

    # -- the cache's view of it ----------------------------------------------------
    def to_state(self) -> dict[str, object]:
        return {
            "series": {name: pack_series(points) for name, points in self.series.items()},
            "total": self.total, "last_step": self.last_step, "final": self.final,
            "records": self.records, "skipping": self.skipping,
        }

    @classmethod
    def from_state(cls, state: object) -> JsonlMetrics:
        """The inverse of `to_state`; raises ValueError (or KeyError, TypeError) on junk."""
        if not isinstance(state, dict):
            raise ValueError("jsonl: not a table")
        j = cls()
        series = state["series"]
        if not isinstance(series, dict):
            raise ValueError("jsonl series: not a table")
        j.series = {name: unpack_series(f"jsonl {name}", series[name]) for name in SERIES}
        j.total = None if state["total"] is None else int(state["total"])
        j.last_step = None if state["last_step"] is None else int(state["last_step"])
        final = state["final"]
        if not isinstance(final, dict):
            raise ValueError("jsonl final: not a table")
        j.final = {str(k): float(v) for k, v in final.items()}
        j.records = int(state["records"])
        j.skipping = bool(state["skipping"])
        return j


def pack_series(series: list[tuple[int, float]]) -> list[str]:
    """Packed 64-bit columns, base64: a million points load in milliseconds, where JSON
    numbers take a second. The log's series are cached the same way (metrics.py)."""
    steps = array("q", map(itemgetter(0), series)).tobytes()
    values = array("d", map(itemgetter(1), series)).tobytes()
    return [base64.b64encode(steps).decode(), base64.b64encode(values).decode()]


def unpack_series(name: str, packed: object) -> list[tuple[int, float]]:
    """The inverse of `pack_series`; ValueError (or TypeError) on junk."""
    packed_steps: str
    packed_values: str
    packed_steps, packed_values = packed  # type: ignore[misc]  # junk raises here or below
    steps, values = array("q"), array("d")
    steps.frombytes(base64.b64decode(packed_steps, validate=True))
    values.frombytes(base64.b64decode(packed_values, validate=True))
    if len(steps) != len(values):
        raise ValueError(f"{name}: columns differ in length")
    return list(zip(steps, values))
