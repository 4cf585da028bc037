"""metrics.jsonl: its records, its hostile lines, and how it combines with the log."""

from __future__ import annotations

import json
import math

import pytest

from rtrain_tui.core.metrics.metrics import MetricsParser, parse_text
from rtrain_tui.core.metrics.metrics_jsonl import MAX_LINE, JsonlMetrics, parse_record

LOG = ("  Total optimization steps = 100\n"
       "\r 10%|#  | 10/100 [00:10<01:30,  1.00it/s]{'loss': 2.5, 'grad_norm': 0.7, 'learning_rate': 1e-05, 'epoch': 0.1}\n"
       "\r 20%|## | 20/100 [00:20<01:20,  1.00it/s]{'loss': 2.25, 'grad_norm': 0.6, 'learning_rate': 9e-06, 'epoch': 0.2}\n"
       "{'eval_loss': 2.4, 'epoch': 0.2}\n")


def lines(*records: object) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def test_parse_record_keeps_numbers_only() -> None:
    rec = parse_record(b'{"step": 10, "loss": "2.5", "lr": 1e-4, "ok": true, "name": "x", '
                       b'"nested": {"a": 1}, "list": [1], "big": 1' + b"0" * 400 + b', "n": null}')
    assert rec == {"step": 10.0, "loss": 2.5, "lr": 1e-4}


@pytest.mark.parametrize("line", [
    b"", b"not json", b"[1, 2]", b"42", b'"text"', b"null", b"{'loss': 1.0}",
    b"\xff\xfe{}", b"[" * 100_000, b"[" * 60_000, b'{"loss": 1.0',
])
def test_parse_record_of_a_non_object_is_none(line: bytes) -> None:
    assert parse_record(line) is None


def test_nan_and_infinity_are_kept_as_values_as_the_log_parser_keeps_them() -> None:
    rec = parse_record(b'{"step": 1, "loss": NaN, "grad_norm": Infinity, "lr": "-inf", "eval_loss": "nan"}')
    assert rec is not None and math.isnan(rec["loss"]) and math.isnan(rec["eval_loss"])
    assert rec["grad_norm"] == math.inf and rec["lr"] == -math.inf
    assert math.isnan(parse_text("{'loss': nan}\n").losses[0][1])  # the log's way


@pytest.mark.parametrize("step", ["NaN", "Infinity", "-1", "1e30", '"ten"', "true"])
def test_a_record_whose_step_cannot_be_a_step_gives_no_point(step: str) -> None:
    j = JsonlMetrics()
    j.feed(b'{"step": %s, "loss": 1.0}\n' % step.encode())
    assert j.series["losses"] == [] and j.last_step is None
    j.to_state()  # nothing in it that the cache's 64-bit columns cannot hold


def test_feed_takes_complete_lines_and_says_how_far() -> None:
    j = JsonlMetrics()
    data = lines({"step": 10, "loss": 2.0, "learning_rate": 1e-4, "grad_norm": 0.9, "epoch": 0.1},
                 {"step": 10, "eval_loss": 2.2}, {"max_steps": 50}) + b'{"step": 20, "lo'
    used = j.feed(data)
    assert used == data.rindex(b"\n") + 1
    assert j.series == {"losses": [(10, 2.0)], "eval_losses": [(10, 2.2)],
                        "learning_rates": [(10, 1e-4)], "grad_norms": [(10, 0.9)]}
    assert (j.total, j.last_step) == (50, 10)
    assert j.feed(data[used:] + b'ss": 1.5}\n') == len(data) - used + 10
    assert j.series["losses"] == [(10, 2.0), (20, 1.5)]


def test_an_overlong_line_is_skipped_through_its_newline_across_feeds() -> None:
    j = JsonlMetrics()
    head = b'{"step": 1, "loss": 1.0, "pad": "' + b"x" * MAX_LINE
    assert j.feed(head) == len(head) and j.skipping  # too long already: not kept, not reread
    more = b"x" * 1000
    assert j.feed(more) == len(more)
    tail = b'"}\n' + lines({"step": 2, "loss": 0.5})
    assert j.feed(tail) == len(tail) and not j.skipping
    assert j.series["losses"] == [(2, 0.5)]
    whole = JsonlMetrics()  # and whole, in one block
    whole.feed(lines({"step": 1, "loss": 1.0, "pad": "x" * MAX_LINE}, {"step": 2, "loss": 0.5}))
    assert whole.series["losses"] == [(2, 0.5)]


def test_junk_lines_are_skipped() -> None:
    j = JsonlMetrics()
    j.feed(b"garbage\n[1]\n\n{\"step\": 5, \"loss\": \"high\"}\n" + lines({"step": 6, "loss": 1.0}))
    assert j.series["losses"] == [(6, 1.0)]


def test_final_record_finishes_the_run() -> None:
    p = MetricsParser()
    p.feed_jsonl(lines({"step": 10, "loss": 1.0, "total_steps": 10},
                       {"step": 10, "train_runtime": 12.5, "train_loss": 1.2, "train_steps_per_second": 0.8}))
    s = p.summary()
    assert s.finished and (s.step, s.total) == (10, 10) and s.eta_seconds == 0.0
    assert (s.train_loss, s.runtime_seconds, s.steps_per_second) == (1.2, 12.5, 0.8)
    assert p.losses == [(10, 1.0)]


def test_series_the_jsonl_carries_come_from_it_alone_the_rest_from_the_log() -> None:
    p = parse_text(LOG)
    p.feed_jsonl(lines({"step": 10, "loss": 2.51, "learning_rate": 1e-05},
                       {"step": 20, "loss": 2.26, "learning_rate": 9e-06},
                       {"step": 20, "eval_loss": 2.41}))
    assert p.losses == [(10, 2.51), (20, 2.26)]  # the same steps: each once, the jsonl's
    assert p.eval_losses == [(20, 2.41)]
    assert p.learning_rates == [(10, 1e-05), (20, 9e-06)]
    assert p.grad_norms == [(10, 0.7), (20, 0.6)]  # the jsonl has none: the log's
    assert p.log_losses == [(10, 2.5), (20, 2.25)]  # kept, not shown
    s = p.summary()
    assert (s.step, s.total, s.loss, s.eval_loss) == (20, 100, 2.26, 2.41)
    assert s.eta_seconds == 80  # ETA and rate from the log's bar
    p.reset_jsonl()
    assert p.losses == [(10, 2.5), (20, 2.25)] and p.eval_losses == [(20, 2.4)]


def test_progress_is_the_newest_step_of_either_source() -> None:
    p = parse_text(LOG)
    p.feed_jsonl(lines({"step": 30, "loss": 2.0}))
    assert (p.summary().step, p.summary().total) == (30, 100)
    bare = MetricsParser()
    bare.feed_jsonl(lines({"step": 3, "loss": 2.0, "max_steps": 9}))
    assert (bare.summary().step, bare.summary().total) == (3, 9)


def test_state_round_trip_keeps_the_jsonl_side() -> None:
    p = parse_text(LOG)
    p.feed_jsonl(lines({"step": 10, "loss": 2.51, "total_steps": 100}) + b'{"step": 2' + b"x" * MAX_LINE)
    back = MetricsParser.from_state(json.loads(json.dumps(p.to_state())))
    assert back.losses == [(10, 2.51)] and back.log_losses == p.log_losses
    assert back.jsonl.skipping and back.jsonl.total == 100
    assert back.summary() == p.summary()


def test_state_without_a_jsonl_side_is_an_old_cache_not_junk() -> None:
    state = parse_text(LOG).to_state()
    del state["jsonl"]
    back = MetricsParser.from_state(state)
    assert back.losses == [(10, 2.5), (20, 2.25)] and back.jsonl.records == 0


def test_a_resumed_attempts_steps_from_its_checkpoint_replace_the_crashed_ones() -> None:
    """Attempt 1 logged steps 10-40 and evaluated at 30, then died; attempt 2 resumed from
    checkpoint-20 and appends to the same file: its 30 and 40 replace attempt 1's."""
    p = MetricsParser()
    p.feed_jsonl(lines({"step": 10, "loss": 2.0}, {"step": 20, "loss": 1.8},
                       {"step": 30, "loss": 1.6}, {"step": 30, "eval_loss": 1.9},
                       {"step": 40, "loss": 1.5}))
    p.feed_jsonl(lines({"step": 30, "loss": 1.62}))  # a separate sync: the state carries it
    assert p.losses == [(10, 2.0), (20, 1.8), (30, 1.62)]
    assert p.eval_losses == []  # attempt 1's eval at step 30 was past the checkpoint
    assert p.summary().step == 30
    p.feed_jsonl(lines({"step": 30, "eval_loss": 1.85}, {"step": 40, "loss": 1.45}))
    assert p.losses == [(10, 2.0), (20, 1.8), (30, 1.62), (40, 1.45)]
    assert p.eval_losses == [(30, 1.85)]


def test_a_series_step_logged_again_is_the_new_attempts_and_a_restart_starts_over() -> None:
    # Attempt 1 died right after logging step 30; attempt 2 from checkpoint-20 logs 30 again.
    p = MetricsParser()
    p.feed_jsonl(lines({"step": 20, "loss": 1.8}, {"step": 30, "loss": 1.6}, {"step": 30, "loss": 1.61}))
    assert p.losses == [(20, 1.8), (30, 1.61)]
    # `resume --restart`: from the start, the whole curve is the new attempt's.
    p.feed_jsonl(lines({"step": 1, "loss": 3.0}))
    assert p.losses == [(1, 3.0)] and p.summary().step == 1
