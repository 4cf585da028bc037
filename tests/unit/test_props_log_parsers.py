"""Property tests: no log text can make a parser raise (issue 15 item 17).

A trainer's log is host text: anything at all may be in it. Every entry point that reads
it — the runs table's `progress_of`, the metrics parser (bytes in, summary and cache
state out), the jsonl reader, the bar folder, the line splitter and the failure reasons —
must take any line and answer, never raise: one raise froze a host's rows on every
refresh (`train loss: --` made `float('--')` fail).

One strategy builds lines from the pieces real logs are made of (keys, separators,
numbers and near-numbers, bar fragments, braces, quotes, `\\r`) mixed with arbitrary text,
so the examples land on the parsers' patterns instead of only on random noise.
"""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rtrain_tui.core.logs.logparse import progress_of
from rtrain_tui.core.logs.logstream import LineSplitter
from rtrain_tui.core.logs.progress_fold import ProgressFolder
from rtrain_tui.core.logs.reasons import why_it_ended
from rtrain_tui.core.metrics.metrics import MetricsParser, parse_text
from rtrain_tui.core.metrics.metrics_format import progress_cell, summary_line, to_json
from rtrain_tui.core.metrics.metrics_jsonl import JsonlMetrics

PROPS = settings(max_examples=300, deadline=None, database=None,
                 suppress_health_check=list(HealthCheck))

KEYS = ["loss", "train loss", "train_loss", "'loss'", '"loss"', "eval_loss", "step", "global_step",
        "'step'", "lr", "learning_rate", "grad_norm", "train_runtime", "'train_runtime'",
        "epoch", "Total optimization steps", "Total steps", "v_num", "Epoch 0", "Map"]
SEPS = [": ", ":", "=", " = ", " ", "", ", "]
NUMBERS = ["--", "-", "+", ".", "e", "1e", "-.e", "1.2.3", "nan", "inf", "-inf", "1e999", "3,000",
           "0", "2.47", "'3.39'", "99999999999999999999999999", "-5", "1_000", "?", "", "∞"]
PIECES = ["{", "}", "'", '"', "|", "%|", "███▋", " 45/100 ", "[00:10<00:17, 4.4it/s]",
          "[1:17:44<48:58,  2.53s/it, loss=2.3]", "[00:01<?, ?it/s]", "45%", "100%", "/",
          "\r", "\n", "\r\n", "\t", " ", "\x1b[31m", "\x00", "Traceback (most recent call last):",
          "  File \"x.py\", line 1", "ValueError: x", "No module named", "[rank1]: ", "é", "\ufffd"]
ATOM = st.one_of(st.sampled_from(KEYS), st.sampled_from(SEPS), st.sampled_from(NUMBERS),
                 st.sampled_from(PIECES), st.text(max_size=6))
LINE = st.lists(ATOM, max_size=12).map("".join)
LINES = st.lists(LINE, max_size=12)

REAL = ["train loss: --", "{'loss': --, 'step': 3}", "step=-- loss=--",
        " 45%|████▌     | 45/100 [00:10<00:12, 4.4it/s, loss=--]",
        "{'train_runtime': --, 'train_loss': 2.0}", "Total optimization steps = ,"]


# One generated log goes through every reader: the examples cost more to make than to
# read (a log is up to 144 drawn pieces), so five tests of 300 examples each spent ~8 s
# of the fast lane making logs. Each reader still sees 300 generated logs plus REAL,
# drawn by the same strategy, and keeps its own assertions.
def the_runs_table_progress_never_raises_on_any_line(lines: list[str]) -> None:
    assert isinstance(progress_of(lines), str)


def the_metrics_parser_never_raises_on_any_log(lines: list[str], chunk: int) -> None:
    """Fed in arbitrary chunks, summarised, worded and cached: every step answers."""
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    parser = MetricsParser()
    for i in range(0, len(data), chunk):
        parser.feed(data[i:i + chunk])
        summary_line(parser.summary())
    parser.flush()
    s = parser.summary()
    assert isinstance(summary_line(s), str) and isinstance(progress_cell(s, running=True), str)
    assert set(to_json(parser)) == {"summary", "series"}
    again = MetricsParser.from_state(parser.to_state())
    assert again.summary() == s
    assert isinstance(parse_text("\n".join(lines).encode("utf-8", "surrogatepass")
                                 .decode("utf-8", "replace")).summary(), type(s))


def the_jsonl_reader_and_the_line_splitter_never_raise(lines: list[str]) -> None:
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    jsonl = JsonlMetrics()
    assert 0 <= jsonl.feed(data) <= len(data)
    splitter = LineSplitter()
    assert all(isinstance(line, str) for line in splitter.feed(data) + splitter.flush())


def the_bar_folder_never_raises_on_any_line(lines: list[str]) -> None:
    folder = ProgressFolder()
    split = [part for line in lines for part in line.replace("\r", "\n").split("\n")]
    assert all(isinstance(line, str) for line in folder.fold(split) + folder.finish())


def the_failure_reason_never_raises_on_any_log(lines: list[str], state: str,
                                               code: int | None, ours: bool) -> None:
    reason = why_it_ended(state, code, ours, lines, "gpu1")
    assert isinstance(reason, str) and len(reason) <= 200


@PROPS
@given(LINES, st.integers(min_value=1, max_value=7),
       st.sampled_from(["failed (exit 1)", "lost", "running"]),
       st.one_of(st.none(), st.integers(min_value=-300, max_value=300)), st.booleans())
@example(REAL, 3, "failed (exit 1)", 1, False)
def test_no_log_text_makes_a_reader_raise(lines: list[str], chunk: int, state: str,
                                          code: int | None, ours: bool) -> None:
    """The runs table's progress, the metrics parser, the jsonl reader and the line
    splitter, the bar folder and the failure reason, each on the same log."""
    the_runs_table_progress_never_raises_on_any_line(lines)
    the_metrics_parser_never_raises_on_any_log(lines, chunk)
    the_jsonl_reader_and_the_line_splitter_never_raise(lines)
    the_bar_folder_never_raises_on_any_line(lines)
    the_failure_reason_never_raises_on_any_log(lines, state, code, ours)
