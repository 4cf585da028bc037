"""Training metrics from a trainer's log: loss curves, progress, ETA. Pure and incremental.

Feed it the log's bytes as they arrive (`MetricsParser.feed`); it keeps a partial last
line and never needs to see a byte twice, so a cache of its state (`to_state`) plus the
byte offset resumes a week-old run without re-reading it.

What it understands, as real trainers print it:
- Hugging Face Trainer dicts: `{'loss': 3.39, 'grad_norm': 2.3, 'learning_rate': 2e-05,
  'epoch': 0.01}`; transformers 5 quotes the numbers (`{'loss': '3.395', ...}`). Real
  ones carry no `step`: it comes from the training bar, or from counting. Eval dicts
  (`eval_loss`) and the final summary (`train_runtime`, `train_loss`).
- tqdm bars (` 61%|███  | 1840/3000 [1:17:44<48:58, 2.53s/it]`), split by `\\r` or `\\n`,
  with a stdout dict glued to the end (tqdm writes stderr unbuffered, the dict sits in
  stdout's buffer, and the merged log shows them on one line, often out of order).
- JSON lines (`{"step": 10, "loss": 2.3}`) and `key=value` lines (`step=10 loss=2.31`).

The training bar is told apart from the others: a bar with a description ("Map",
"Writing model shards", "Loading checkpoint shards") or a data unit (`examples/s`,
`B/s`) is never the run's progress, and once the trainer's header has said
`Total optimization steps = 3,000`, only a bar with that total is (an eval bar is not).

A run may also have a `metrics.jsonl` beside its log (metrics_jsonl.py), fed with
`feed_jsonl`. How the two combine, so that no point is counted twice:

- **Per series, one source.** A series (loss, eval loss, learning rate, grad norm) that
  the jsonl carries at all is taken from the jsonl alone; the log's points for it are
  kept (`log_losses`, ...) but not shown. A series the jsonl lacks comes from the log.
  Merging the two by step would be finer, but the log's steps are often inferred (from
  the bar, or counted) and need not match the jsonl's, so a step-by-step merge could
  still draw one logging step twice; whole series from one source cannot.
- **Progress from both.** The step is the newest either source has reached; the total is
  the log's header, else the jsonl's `total_steps`/`max_steps`, else the training bar's;
  rate and ETA come from the bar (the jsonl has neither); the final summary is the log's,
  else the jsonl's `train_runtime` record.
- A replaced jsonl (`reset_jsonl`) drops only the jsonl's side: the log's series show
  again until the new file carries them.

A resumed run's log goes on after a separator line (`=== attempt 2: resuming from
outputs/checkpoint-150 ===`, or `... restarting from the start ===`, written by
`rtrain-tui resume`): the attempt before may have got past its checkpoint before it died,
and the new attempt trains those steps again, so the log's points after step 150 (none,
on a restart) are dropped there and the curves go on from the checkpoint. metrics.jsonl
has no such line: there a step that goes back is the new attempt's, and the points from it
on are dropped the same way (metrics_jsonl.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import accumulate
from operator import itemgetter

from rtrain_tui.core.metrics.metrics_jsonl import (
    MAX_STEP,
    JsonlMetrics,
    pack_series,
    unpack_series,
    usable_step,
)

MAX_PENDING = 1 << 16  # bytes kept of a line that never ends; the rest of it is dropped
STATE_VERSION = 2

# `'loss': 3.39`, `"loss": "3.395"`, `'learning_rate': 2e-05`: a quoted key, a number
# that may itself be quoted (transformers 5).
_PAIR = re.compile(
    r"""['"]([A-Za-z_][\w/.-]*)['"]\s*:\s*['"]?([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)['"]?""")
# `desc:  61%|███▋      | 1840/3000 [1:17:44<48:58,  2.53s/it, postfix]`
TQDM_BAR = re.compile(
    r"(?P<desc>[^|]*?)\s*(?P<pct>\d+)%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)\s*"
    r"\[(?P<elapsed>[\d:]+)<(?P<left>[\d:?]+),\s*(?P<rate>[\d.?]+)(?P<unit>[^\s,\]]*)(?P<post>[^\]]*)\]")
_KV = re.compile(
    r"(?<![\w.])(step|global_step|loss|train_loss|eval_loss|val_loss|lr|learning_rate|grad_norm)"
    r"\s*[=:]\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")
# HF Trainer: `Total optimization steps = 3,000`; Unsloth's banner: `Total steps = 60`.
_TOTAL = re.compile(r"Total (?:optimization )?steps\s*=\s*(\d[\d,]*)")
# Descriptions a training bar may carry (Lightning: `Epoch 3:`); others are data bars.
_TRAIN_DESC = re.compile(r"^(?:train(?:ing)?|epoch\b.*|steps?)$", re.IGNORECASE)
_STEP_UNITS = ("it/s", "s/it")
# Lightning's bar counts one epoch: `Epoch 1:` (old) or `Epoch 1/2:` (0-based, of 3).
_EPOCH_DESC = re.compile(r"^epoch\s+(\d+)(?:\s*/\s*(\d+))?", re.IGNORECASE)
# core/resume.py's separator: the step the new attempt goes on from (none: from the start).
_ATTEMPT = re.compile(r"=== attempt \d+: (?:resuming from \S*?checkpoint-(\d{1,18})|restarting "
                      r"from the start) ===\s*")



def _seconds(clock: str) -> float | None:
    """`1:17:44` or `48:58` → seconds; `?` → None."""
    if "?" in clock:
        return None
    total = 0
    for part in clock.split(":"):
        if not part.isdigit():
            return None
        total = total * 60 + int(part)
    return float(total)


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class Summary:
    """The latest of everything, for a table cell or a header line."""

    step: int | None = None
    total: int | None = None
    loss: float | None = None
    eval_loss: float | None = None
    learning_rate: float | None = None
    grad_norm: float | None = None
    steps_per_second: float | None = None
    eta_seconds: float | None = None
    finished: bool = False  # the trainer printed its final summary (`train_runtime`)
    train_loss: float | None = None  # the summary's mean training loss
    runtime_seconds: float | None = None

    @property
    def fraction(self) -> float | None:
        if self.step is None or not self.total:
            return None
        return min(1.0, self.step / self.total)


class MetricsParser:
    """Bytes of a log in, series out. See the module docstring for the formats."""

    def __init__(self) -> None:
        self.log_losses: list[tuple[int, float]] = []
        self.log_eval_losses: list[tuple[int, float]] = []
        self.log_learning_rates: list[tuple[int, float]] = []
        self.log_grad_norms: list[tuple[int, float]] = []
        self.lines = 0  # complete lines seen
        self._pending = b""
        self._header_total: int | None = None  # `Total optimization steps = N`
        self._bar_step: int | None = None  # the training bar's latest count
        self._bar_total: int | None = None
        self._bar_used = True  # the bar's count already gave a dict its step
        self._epochs_left: int | None = 0  # whole epochs after the bar's (None: unknown)
        self._epoch_len = 0  # steps in one epoch, when the bar counts an epoch
        self._left: str | None = None  # the bar's time left, `48:58`
        self._rate_text = ""  # the bar's rate and its unit, `2.53` `s/it`
        self._unit = ""
        self._last_step = 0  # step of the latest training dict
        self._interval = 1  # steps between training dicts, learned from the bar
        self._final: dict[str, float] = {}
        self.jsonl = JsonlMetrics()

    # -- the series shown: the jsonl's where it has them (module docstring) ----------
    @property
    def losses(self) -> list[tuple[int, float]]:
        return self.jsonl.series["losses"] or self.log_losses

    @property
    def eval_losses(self) -> list[tuple[int, float]]:
        return self.jsonl.series["eval_losses"] or self.log_eval_losses

    @property
    def learning_rates(self) -> list[tuple[int, float]]:
        return self.jsonl.series["learning_rates"] or self.log_learning_rates

    @property
    def grad_norms(self) -> list[tuple[int, float]]:
        return self.jsonl.series["grad_norms"] or self.log_grad_norms

    # -- input -------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        """Parse the complete lines in `pending + data`; keep the unfinished last one."""
        data = self._pending + data
        # A trailing \r may be half of \r\n: wait for the next byte to tell.
        cut = max(data.rfind(b"\n"), data.rfind(b"\r", 0, len(data) - 1))
        if cut < 0:
            self._pending = data[:MAX_PENDING]
            self._peek_pending()
            return
        block, self._pending = data[: cut + 1], data[cut + 1:]
        if len(self._pending) > MAX_PENDING:
            self._pending = self._pending[:MAX_PENDING]
        # Line ends are ASCII, so a block of whole lines never splits a UTF-8 character.
        text = block.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
        lines = text.split("\n")
        lines.pop()  # the empty string after the final line end
        self.lines += len(lines)
        # Of a run of bar redraws only the newest accepted one matters: parsing just
        # that one is what makes 300,000 lines/s (tqdm writes ~4 redraws per dict).
        bars: list[str] = []
        for line in lines:
            if line.startswith("=== attempt ") and (m := _ATTEMPT.fullmatch(line)):
                if bars:
                    bars = self._newest_bar(bars)
                self._new_attempt(int(m.group(1) or 0))
            elif "{" in line:
                brace = line.find("{")
                if brace and "%|" in line[:brace] and self._bar(line[:brace]):
                    bars = []  # the bar glued before the dict is newer than the run's
                elif bars:
                    bars = self._newest_bar(bars)
                self._dict_line(line, brace)
            elif "%|" in line:
                bars.append(line)
            elif "loss" in line and ("=" in line or ":" in line):
                if bars:
                    bars = self._newest_bar(bars)
                self._kv_line(line)
            elif "Total" in line and (m := _TOTAL.search(line)):
                if bars:
                    bars = self._newest_bar(bars)
                total = int(m.group(1).replace(",", ""))
                if 0 < total <= MAX_STEP:  # `= 0` or 30 digits: not a run's length
                    self._header_total = total
        if bars:
            self._newest_bar(bars)
        self._peek_pending()

    def _new_attempt(self, step: int) -> None:
        """A new attempt goes on from `step`: the points after it are the crashed attempt's."""
        for series in (self.log_losses, self.log_eval_losses, self.log_learning_rates,
                       self.log_grad_norms):
            series[:] = [p for p in series if p[0] <= step]
        self._last_step = step
        self._bar_step, self._bar_used = None, True
        self._final = {}

    def _newest_bar(self, bars: list[str]) -> list[str]:
        """Take the newest of these redraws that is the training bar; returns an empty run."""
        if self._header_total is None and self._bar_total is None:
            for line in bars:  # no training bar known yet: the longest wins, in order
                self._bar(line)
            return []
        for line in reversed(bars):
            if self._bar(line):
                break
        return []

    def _peek_pending(self) -> None:
        """tqdm redraws with a leading `\\r`, so its live bar is always the unfinished
        last line: read the progress from it now (reading it again when it completes
        changes nothing). Only the bar: a loss in it is counted once, when it completes."""
        if b"%|" in self._pending and b"{" not in self._pending:
            self._bar(self._pending.decode("utf-8", "replace"), postfix=False)

    def feed_jsonl(self, data: bytes) -> int:
        """Bytes of metrics.jsonl from its offset; returns how many were used (through
        the last complete line). See `JsonlMetrics.feed`."""
        return self.jsonl.feed(data)

    def reset_jsonl(self) -> None:
        """The jsonl was replaced: forget what it said; the log's side stays."""
        self.jsonl = JsonlMetrics()

    def flush(self) -> None:
        """The log is complete: its unfinished last line counts as a line."""
        if self._pending:
            self.feed(b"\n")

    # -- one line ------------------------------------------------------------------
    def _bar(self, line: str, postfix: bool = True) -> bool:
        """Take a bar line; False when it is not the training bar."""
        # Anchored first (fast); a prefix holding a `|` of its own needs the search.
        m = TQDM_BAR.match(line) or TQDM_BAR.search(line)
        if m is None:
            return False
        desc, n_text, total_text, left, rate, unit, post = m.group(
            "desc", "n", "total", "left", "rate", "unit", "post")
        if desc and (desc := desc.strip().rstrip(":").strip()) and not _TRAIN_DESC.match(desc):
            return False  # "Map", "Writing model shards", "Loading checkpoint shards"
        if unit and unit not in _STEP_UNITS:
            return False  # examples/s, B/s: a data bar
        n, total = int(n_text), int(total_text)
        epochs_left: int | None = 0
        whole: int | None = total  # the run's steps, as far as the bar tells
        if desc and (e := _EPOCH_DESC.match(desc)):
            # One epoch's bar (Lightning) is not the whole run: count from the run's
            # start, and the run's total only when the bar says how many epochs.
            epoch, last = int(e.group(1)), e.group(2)
            n += epoch * total
            epochs_left = int(last) - epoch if last is not None and int(last) >= epoch else None
            whole = total * (int(last) + 1) if epochs_left is not None else None
        if (whole or n) > MAX_STEP:
            return False  # no run has that many steps; the cache could not store it
        if self._header_total is not None:
            if whole != self._header_total:
                return False  # an eval or prediction bar
        elif self._bar_total is not None and (whole or 0) < self._bar_total:
            return False  # without the header, the longest bar is the training one
        if n != self._bar_step:
            self._bar_used = False
        self._bar_step, self._bar_total = n, whole
        self._epochs_left, self._epoch_len = epochs_left, total
        # Kept as text: turned into numbers only when asked (most redraws never are).
        self._left, self._rate_text, self._unit = left, rate, unit
        if postfix and post and "loss" in post:
            self._kv_line(post)  # Lightning: `..., 14.8it/s, v_num=0, train_loss=2.31]`
        return True

    def _dict_line(self, line: str, brace: int) -> None:
        pairs = _PAIR.findall(line, brace)
        if pairs:
            # Kept as text: only the few values used become floats (the pattern admits
            # only numbers, so float() cannot fail). This is the parser's hot path.
            self._record(dict(pairs))

    def _kv_line(self, line: str) -> None:
        values = dict(_KV.findall(line))
        if "loss" in values or "train_loss" in values or "eval_loss" in values or "val_loss" in values:
            self._record(values)

    def _record(self, values: dict[str, str]) -> None:
        if "train_runtime" in values:
            self._final = {k: float(v) for k, v in values.items()}
            return
        eval_text = values.get("eval_loss") or values.get("val_loss")
        loss_text = values.get("loss") or values.get("train_loss")
        if loss_text is None:
            if eval_text is not None:
                # An eval happens at the current training step; it does not advance it.
                self.log_eval_losses.append((self._explicit_step(values) or self._last_step,
                                         float(eval_text)))
            return
        step = self._next_step(values)
        self.log_losses.append((step, float(loss_text)))
        if (lr := values.get("learning_rate") or values.get("lr")) is not None:
            self.log_learning_rates.append((step, float(lr)))
        if (gn := values.get("grad_norm")) is not None:
            self.log_grad_norms.append((step, float(gn)))
        if eval_text is not None:
            self.log_eval_losses.append((step, float(eval_text)))

    @staticmethod
    def _explicit_step(values: dict[str, str]) -> int | None:
        step = values.get("step") or values.get("global_step")
        # inf, nan, -5, 1e30: not a step (the point is placed as a dict without one is)
        return usable_step(float(step)) if step is not None else None

    def _next_step(self, values: dict[str, str]) -> int:
        """The step a training dict belongs to.

        Its own `step` when it has one; else the training bar's count if the bar moved
        since the last dict; else (dicts flushed in a burst from stdout's buffer, behind
        the bar) the last step plus the usual interval between dicts.
        """
        step = self._explicit_step(values)
        if step is None:
            if not self._bar_used and self._bar_step is not None and self._bar_step > self._last_step:
                step = self._bar_step
                self._bar_used = True
            else:
                step = self._last_step + self._interval
                total = self._header_total or self._bar_total
                if total is not None and step > total:
                    # Counting never runs past the bar's end: a buffered stdout can flush
                    # hundreds of dicts after the bar finished (a real run read 35338/1000).
                    step = max(total, self._last_step)
        if step > self._last_step and self.log_losses:
            self._interval = step - self._last_step
        self._last_step = max(self._last_step, step)
        return step

    # -- output --------------------------------------------------------------------
    def summary(self) -> Summary:
        j = self.jsonl
        total = self._header_total or j.total or self._bar_total
        step = self._bar_step
        if self._last_step and (step is None or self._last_step > step):
            step = self._last_step
        if j.last_step is not None and (step is None or j.last_step > step):
            step = j.last_step
        final = self._final or j.final
        finished = bool(final)
        eta = _seconds(self._left) if self._left else None
        rate = _num(self._rate_text) if self._rate_text else None
        if rate is not None:
            rate = (1.0 / rate if self._unit == "s/it" else rate) if rate > 0 else None
        if eta is not None and self._epochs_left != 0:
            # The bar's time left is its epoch's: add the epochs after it at its rate.
            eta = (eta + self._epochs_left * self._epoch_len / rate
                   if self._epochs_left is not None and rate else None)
        if finished:
            step = total if total is not None else step
            eta = 0.0
        if finished and "train_steps_per_second" in final:
            rate = final["train_steps_per_second"]
        return Summary(
            step=step, total=total,
            loss=self.losses[-1][1] if self.losses else None,
            eval_loss=self.eval_losses[-1][1] if self.eval_losses else None,
            learning_rate=self.learning_rates[-1][1] if self.learning_rates else None,
            grad_norm=self.grad_norms[-1][1] if self.grad_norms else None,
            steps_per_second=rate, eta_seconds=eta, finished=finished,
            train_loss=final.get("train_loss"),
            runtime_seconds=final.get("train_runtime"),
        )

    # -- the cache's view of it ----------------------------------------------------
    def to_state(self) -> dict[str, object]:
        """Everything needed to resume: plain JSON types only."""
        return {
            "version": STATE_VERSION, "lines": self.lines,
            "pending": self._pending.decode("latin-1"),
            "losses": pack_series(self.log_losses), "eval_losses": pack_series(self.log_eval_losses),
            "learning_rates": pack_series(self.log_learning_rates),
            "grad_norms": pack_series(self.log_grad_norms),
            "header_total": self._header_total, "bar_step": self._bar_step,
            "bar_total": self._bar_total, "bar_used": self._bar_used, "left": self._left,
            "rate": self._rate_text, "unit": self._unit, "last_step": self._last_step, "interval": self._interval,
            "epochs_left": self._epochs_left, "epoch_len": self._epoch_len,
            "final": self._final, "jsonl": self.jsonl.to_state(),
        }

    @classmethod
    def from_state(cls, state: dict[str, object]) -> MetricsParser:
        """The inverse of `to_state`; raises ValueError (or KeyError, TypeError) on junk."""
        if state.get("version") != STATE_VERSION:
            raise ValueError("cache from another version")
        p = cls()

        def series(name: str) -> list[tuple[int, float]]:
            return unpack_series(name, state[name])

        p.log_losses, p.log_eval_losses = series("losses"), series("eval_losses")
        p.log_learning_rates, p.log_grad_norms = series("learning_rates"), series("grad_norms")
        p.lines = int(state["lines"])  # type: ignore[call-overload]
        p._pending = str(state["pending"]).encode("latin-1")
        p._header_total = _opt_int(state["header_total"])
        p._bar_step = _opt_int(state["bar_step"])
        p._bar_total = _opt_int(state["bar_total"])
        p._bar_used = bool(state["bar_used"])
        p._left = None if state["left"] is None else str(state["left"])
        p._rate_text, p._unit = str(state["rate"]), str(state["unit"])
        p._last_step = int(state["last_step"])  # type: ignore[call-overload]
        p._interval = int(state["interval"])  # type: ignore[call-overload]
        # A cache from before epoch bars were told apart has neither: the next bar sets them.
        p._epochs_left = _opt_int(state.get("epochs_left", 0))
        p._epoch_len = int(state.get("epoch_len", 0))  # type: ignore[call-overload]
        final = state["final"]
        if not isinstance(final, dict):
            raise ValueError("final: not a table")
        p._final = {str(k): float(v) for k, v in final.items()}
        # A cache from before metrics.jsonl was read has no "jsonl": nothing read of it yet.
        if "jsonl" in state:
            p.jsonl = JsonlMetrics.from_state(state["jsonl"])
        return p


def _opt_int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


def _opt_float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def parse_text(text: str) -> MetricsParser:
    """A whole log at once (tests, small files)."""
    parser = MetricsParser()
    parser.feed(text.encode())
    parser.flush()
    return parser


class Downsampler:
    """One series shrunk to a plot's width, kept up to date as the series grows.

    It keeps running sums, so a bucket's mean is one subtraction: after the first call
    a redraw costs the new points plus the width, not the whole series (a live run's
    curve is redrawn on every poll; its series only ever grows at the end).
    """

    def __init__(self) -> None:
        self._steps: list[int] = []
        self._sums: list[float] = [0.0]  # _sums[i]: the sum of the first i values
        self._ends: tuple[tuple[int, float], tuple[int, float]] | None = None  # first, last seen

    def update(self, series: list[tuple[int, float]]) -> None:
        done = len(self._steps)
        if done and (len(series) < done or self._ends != (series[0], series[done - 1])):
            # Not the same series any more (a new log, or a metrics.jsonl that took the
            # series over from the log): start over.
            self.__init__()  # type: ignore[misc]
            done = 0
        new = series[done:]
        if new:
            self._ends = (series[0], series[-1])
            self._steps.extend(map(itemgetter(0), new))
            self._sums.extend(accumulate(map(itemgetter(1), new), initial=self._sums[-1]))
            del self._sums[done + 1]  # the repeated `initial`

    def points(self, width: int) -> list[tuple[int, float]]:
        n = len(self._steps)
        if n == 0:
            return []
        k = max(1, -(-n // max(width, 1)))  # points per bucket
        sums, steps = self._sums, self._steps
        out = [(steps[min(i + k, n) - 1], (sums[min(i + k, n)] - sums[i]) / (min(i + k, n) - i))
               for i in range(0, n, k)]
        return out


def downsample(series: list[tuple[int, float]], width: int) -> list[tuple[int, float]]:
    """At most `width` points: the mean of each bucket at its last step, so a curve keeps
    its shape (noise averages out instead of aliasing)."""
    if width <= 0 or len(series) <= width:
        return list(series)
    sampler = Downsampler()
    sampler.update(series)
    return sampler.points(width)


def format_eta(seconds: float | None) -> str:
    """`1h05m`, `4m12s`, `9s`; empty when unknown."""
    if seconds is None:
        return ""
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"
