"""The metrics parser, fed the text real trainers print (wording copied from real logs)."""

from __future__ import annotations

import json

import pytest

from rtrain_tui.core.metrics.metrics import (
    Downsampler,
    MetricsParser,
    downsample,
    format_eta,
    parse_text,
)
from rtrain_tui.core.metrics.metrics_format import for_state, summary_line

# transformers 4.x Trainer, stdout and stderr merged into train.log (not a TTY): the
# header, tqdm redraws on `\r`, dicts printed by ProgressCallback.on_log.
HF4_LOG = (
    "***** Running training *****\n"
    "  Num examples = 1,000\n"
    "  Num Epochs = 3\n"
    "  Instantaneous batch size per device = 8\n"
    "  Total train batch size (w. parallel, distributed & accumulation) = 8\n"
    "  Gradient Accumulation steps = 1\n"
    "  Total optimization steps = 375\n"
    "  Number of trainable parameters = 4,194,304\n"
    "\r  0%|          | 0/375 [00:00<?, ?it/s]"
    "\r  0%|          | 1/375 [00:02<14:05,  2.26s/it]"
    "\r  3%|▎         | 10/375 [00:21<12:41,  2.09s/it]"
    "{'loss': 2.4571, 'grad_norm': 1.2340953159332275, 'learning_rate': 1.9466666666666668e-05, 'epoch': 0.08}\n"
    "\r  3%|▎         | 11/375 [00:23<12:40,  2.09s/it]"
    "\r  5%|▌         | 20/375 [00:42<12:20,  2.09s/it]"
    "{'loss': 2.1034, 'grad_norm': 0.9876, 'learning_rate': 1.8933333333333334e-05, 'epoch': 0.16}\n"
)

# transformers 5: the numbers are quoted strings.
HF5_LINE = "{'loss': '3.395', 'grad_norm': '2.309', 'learning_rate': '1.8e-05', 'epoch': '0.01'}\n"

EVAL_LINE = ("{'eval_loss': 1.8765, 'eval_runtime': 12.3456, 'eval_samples_per_second': 81.0, "
             "'eval_steps_per_second': 10.125, 'epoch': 1.0}\n")

FINAL_LINE = ("{'train_runtime': 790.1234, 'train_samples_per_second': 3.797, "
              "'train_steps_per_second': 0.475, 'total_flos': 1.2345678901234e+16, "
              "'train_loss': 1.9876543, 'epoch': 3.0}\n")


def test_hf_dicts_take_their_step_from_the_training_bar() -> None:
    p = parse_text(HF4_LOG)
    assert p.losses == [(10, 2.4571), (20, 2.1034)]
    assert p.grad_norms == [(10, 1.2340953159332275), (20, 0.9876)]
    assert p.learning_rates[0] == (10, 1.9466666666666668e-05)
    s = p.summary()
    assert (s.step, s.total) == (20, 375)
    assert s.eta_seconds == 12 * 60 + 20
    assert s.steps_per_second == pytest.approx(1 / 2.09)
    assert s.fraction == pytest.approx(20 / 375)


def test_transformers_5_quoted_numbers_are_read() -> None:
    p = parse_text(HF5_LINE + HF5_LINE.replace("3.395", "3.1"))
    assert p.losses == [(1, 3.395), (2, 3.1)]  # no bar, no step: counted
    assert p.grad_norms[0] == (1, 2.309)
    assert p.learning_rates[0] == (1, 1.8e-05)


def test_eval_dict_is_eval_loss_at_the_current_step_and_does_not_advance() -> None:
    p = parse_text(HF4_LOG + EVAL_LINE)
    assert p.eval_losses == [(20, 1.8765)]
    assert p.losses[-1][0] == 20
    assert p.summary().eval_loss == 1.8765


def test_final_summary_marks_the_run_finished_at_its_total() -> None:
    p = parse_text(HF4_LOG + FINAL_LINE)
    s = p.summary()
    assert s.finished and (s.step, s.total) == (375, 375)
    assert s.eta_seconds == 0.0
    assert s.train_loss == 1.9876543 and s.runtime_seconds == 790.1234
    assert s.steps_per_second == 0.475
    assert len(p.losses) == 2  # the summary's train_loss is no point of the curve


def test_dict_glued_to_the_end_of_a_bar_line() -> None:
    text = (" 61%|██████    | 1840/3000 [1:17:44<48:58,  2.53s/it]"
            "{'loss': '1.234', 'grad_norm': '0.5', 'learning_rate': '1e-05', 'epoch': '1.22'}\n")
    p = parse_text(text)
    assert p.losses == [(1840, 1.234)]
    s = p.summary()
    assert (s.step, s.total) == (1840, 3000)
    assert s.eta_seconds == 48 * 60 + 58
    assert s.steps_per_second == pytest.approx(1 / 2.53)


def test_dicts_flushed_in_a_burst_behind_the_bar_keep_their_spacing() -> None:
    # stdout is block-buffered when not a TTY: three dicts arrive after the bar moved on.
    bars = "".join(f"\r{n * 100 // 300:3d}%|█         | {n}/300 [00:{n // 10:02d}<05:00,  1.00it/s]"
                   for n in range(1, 31))
    dicts = "".join(f"{{'loss': {3 - i / 10}, 'epoch': 0.1}}\n" for i in range(3))
    p = parse_text(bars[: bars.index(" 10/300") + 40] + "{'loss': 3.5, 'epoch': 0.0}\n" + bars + dicts)
    steps = [s for s, _ in p.losses]
    assert steps[0] == 10 and steps[1] == 30  # the second took the bar's latest count
    assert steps == sorted(steps) and len(set(steps)) == len(steps)


def test_a_counted_step_is_never_past_the_bars_total() -> None:
    """Issue 15 item 19: a buffered stdout flushed 200 dicts after the bar reached its end."""
    bars = "".join(f"\r{n // 10:3d}%|█         | {n}/1000 [00:{n // 100:02d}<00:10, 99.00it/s]"
                   for n in range(0, 1001, 50))
    dicts = "".join(f"{{'loss': {3 - i / 100}, 'epoch': {i / 200}}}\n" for i in range(200))
    p = parse_text("  Total optimization steps = 1,000\n" + bars + "\n" + dicts)
    steps = [s for s, _ in p.losses]
    assert max(steps) == 1000 and steps == sorted(steps)
    assert (p.summary().step, p.summary().total) == (1000, 1000)
    # without the header too: the bar's own total bounds the count
    p = parse_text(bars + "\n" + dicts)
    assert max(s for s, _ in p.losses) == 1000 and p.summary().step == 1000


def test_bare_cr_redraws_split_across_feeds() -> None:
    p = MetricsParser()
    chunks = [b"\r  1%|          | 3/300 [00:03<04:57, ",
              b" 1.00it/s]\r  1%|          | 4/3",
              b"00 [00:04<04:56,  1.00it/s]\r"]
    for c in chunks:
        p.feed(c)
    assert p.summary().step == 4
    p.feed(b"{'loss': 2.5, 'epoch': 0.01}\r")
    p.feed(b"\n")  # \r then \n in the next read: one line end, not two
    assert p.losses == [(4, 2.5)]
    assert p.lines == 4  # the empty line before the first \r counts, as LineSplitter counts it


def test_a_utf8_character_split_between_feeds_survives() -> None:
    data = "\r  5%|▌         | 15/300 [00:15<04:45,  1.00it/s]\n".encode()
    cut = data.index("▌".encode()) + 1
    p = MetricsParser()
    p.feed(data[:cut])
    p.feed(data[cut:])
    assert p.summary().step == 15


@pytest.mark.parametrize("other_bar", [
    # transformers 5 saving the model: this must never read as the run's progress (1/1)
    "Writing model shards: 100%|██████████| 1/1 [00:02<00:00,  2.05s/it]",
    "Loading checkpoint shards: 100%|██████████| 2/2 [00:03<00:00,  1.62s/it]",
    "Map: 100%|██████████| 1000/1000 [00:00<00:00, 12345.67 examples/s]",
    "Generating train split: 1000 examples [00:00, 98765.43 examples/s]",
    "model.safetensors: 100%|██████████| 988M/988M [00:09<00:00, 105MB/s]",
    "Downloading data: 100%|██████████| 1.23M/1.23M [00:00<00:00, 4.56MB/s]",
    "Unsloth: Tokenizing [\"text\"] (num_proc=2): 100%|██████████| 5000/5000 [00:01<00:00, 2934.15 examples/s]",
])
def test_other_bars_are_never_the_runs_progress(other_bar: str) -> None:
    p = parse_text(HF4_LOG + other_bar + "\n")
    assert (p.summary().step, p.summary().total) == (20, 375)
    alone = parse_text(other_bar + "\n").summary()
    assert (alone.step, alone.total) == (None, None)


def test_eval_bar_without_description_is_not_progress_once_the_total_is_known() -> None:
    eval_bar = "\r 54%|█████▍    | 68/125 [00:05<00:04, 13.21it/s]\n"
    p = parse_text(HF4_LOG + eval_bar)
    assert (p.summary().step, p.summary().total) == (20, 375)


def test_without_a_header_the_longest_bar_is_the_training_bar() -> None:
    text = ("\r 10%|█         | 30/300 [00:30<04:30,  1.00it/s]\n"
            "\r 50%|█████     | 5/10 [00:01<00:01,  5.00it/s]\n")
    s = parse_text(text).summary()
    assert (s.step, s.total) == (30, 300)


def test_unsloth_banner_total_steps() -> None:
    text = ("==((====))==  Unsloth - 2x faster free finetuning | Num GPUs used = 1\n"
            "   \\\\   /|    Num examples = 51,760 | Num Epochs = 1 | Total steps = 60\n"
            "O^O/ \\_/ \\    Batch size per device = 2 | Gradient accumulation steps = 4\n"
            "\r 50%|█████     | 30/60 [01:00<01:00,  2.00s/it]\n"
            "\r 50%|█████     | 8/16 [00:01<00:01,  5.00it/s]\n")
    s = parse_text(text).summary()
    assert (s.step, s.total) == (30, 60)


def test_json_lines_with_their_own_step() -> None:
    text = "".join(json.dumps({"step": s, "loss": 3 / s, "lr": 1e-4, "grad_norm": 0.5}) + "\n"
                   for s in (50, 100))
    p = parse_text(text)
    assert p.losses == [(50, 3 / 50), (100, 3 / 100)]
    assert p.learning_rates == [(50, 1e-4), (100, 1e-4)]


def test_key_value_lines_and_lightning_bar_postfix() -> None:
    text = ("step=10 loss=2.3456 lr=0.0001 grad_norm=0.75\n"
            "step=20 loss=2.1 lr=9e-05\n"
            "Epoch 0:  45%|████▌     | 450/1000 [00:30<00:37, 14.80it/s, v_num=0, train_loss=2.310]\n"
            "env RTRAIN_TEST_ENV=two words\n")
    p = parse_text(text)
    assert p.losses[:2] == [(10, 2.3456), (20, 2.1)]
    assert p.learning_rates == [(10, 0.0001), (20, 9e-05)]
    assert p.losses[2][1] == 2.31
    # One epoch's bar, and how many epochs is not said: no total, no ETA (issue 15 item 20).
    assert (p.summary().step, p.summary().total, p.summary().eta_seconds) == (450, None, None)


def test_a_lightning_epoch_bar_is_one_epoch_of_the_run() -> None:
    """Issue 15 item 20: in epoch 1 of 3 the run is not done, nor is its ETA 0 s."""
    end_of_first = "Epoch 0/2: 100%|██████████| 100/100 [00:10<00:00, 10.00it/s, v_num=0, train_loss=2.100]\n"
    p = parse_text(end_of_first)
    s = p.summary()
    assert (s.step, s.total, s.eta_seconds) == (100, 300, 20.0)
    p.feed("Epoch 1/2:  45%|████▌     | 45/100 [00:04<00:05, 10.00it/s, v_num=0, train_loss=1.900]\n".encode())
    s = p.summary()
    assert (s.step, s.total) == (145, 300) and s.fraction == pytest.approx(145 / 300)
    assert s.eta_seconds == 5 + 10.0  # this epoch's 5 s, then one more epoch of 100 steps
    assert p.losses[-1] == (145, 1.9)
    last = parse_text("Epoch 2/2: 100%|██████████| 100/100 [00:10<00:00, 10.00it/s, v_num=0]\n").summary()
    assert (last.step, last.total, last.eta_seconds) == (300, 300, 0.0)


def test_val_loss_key_value_is_eval() -> None:
    p = parse_text("step=100 loss=1.5\nstep=100 val_loss=1.7\n")
    assert p.eval_losses == [(100, 1.7)]


def test_plain_text_and_tracebacks_give_no_points() -> None:
    text = ("Traceback (most recent call last):\n"
            '  File "train.py", line 3, in <module>\n'
            "    d = {'a': 1}\n"
            "RuntimeError: loss is nan\n"
            "argv=['llm', '--config', 'config.yaml']\n")
    p = parse_text(text)
    assert p.losses == [] and p.summary().step is None


def test_a_line_that_never_ends_does_not_grow_memory() -> None:
    p = MetricsParser()
    for _ in range(100):
        p.feed(b"x" * 100_000)
    assert len(p.to_state()["pending"]) <= 1 << 16  # type: ignore[arg-type]
    p.feed(b"\n{'loss': 1.0}\n")
    assert p.losses == [(1, 1.0)]


def test_state_round_trip_resumes_mid_line() -> None:
    data = (HF4_LOG + EVAL_LINE + HF5_LINE + FINAL_LINE).encode()
    whole = MetricsParser()
    whole.feed(data)
    for cut in (1, 500, len(HF4_LOG.encode()) - 7, len(data) - 3):
        first = MetricsParser()
        first.feed(data[:cut])
        resumed = MetricsParser.from_state(json.loads(json.dumps(first.to_state())))
        resumed.feed(data[cut:])
        assert resumed.losses == whole.losses
        assert resumed.eval_losses == whole.eval_losses
        assert resumed.summary() == whole.summary()


def test_state_from_another_version_is_refused() -> None:
    state = MetricsParser().to_state()
    state["version"] = 0
    with pytest.raises(ValueError):
        MetricsParser.from_state(state)


def test_downsample_keeps_width_and_shape() -> None:
    series = [(i, float(1000 - i)) for i in range(1000)]
    small = downsample(series, 50)
    assert len(small) == 50
    values = [v for _, v in small]
    assert values == sorted(values, reverse=True)
    assert small[-1][0] == 999
    assert downsample(series[:10], 50) == series[:10]


def test_format_eta() -> None:
    assert [format_eta(x) for x in (None, 9, 252, 3900)] == ["", "9s", "4m12s", "1h05m"]


def test_downsampler_follows_a_growing_series_like_a_fresh_one() -> None:
    series = [(i, float((i * 7919) % 13)) for i in range(1, 5001)]
    sampler = Downsampler()
    for end in (10, 999, 1000, 3333, 5000):
        sampler.update(series[:end])
        assert sampler.points(80) == pytest.approx(downsample(series[:end], 80)) if end > 80 \
            else sampler.points(80) == series[:end]
    sampler.update(series[:5])  # a shorter series is another series: start over
    assert sampler.points(80) == series[:5]


def test_downsample_of_an_uneven_split_keeps_the_newest_point() -> None:
    series = [(i, float(i)) for i in range(10)]
    assert downsample(series, 3) == [(3, 1.5), (7, 5.5), (9, 8.5)]


@pytest.mark.parametrize("step", ["inf", "nan", "1e30", "-5", "9223372036854775808"])
def test_a_log_line_with_an_impossible_step_counts_its_own_step_and_the_cache_saves(
        step: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A trainer (or a hostile log) printing `'step': inf` crashed the parser
    (OverflowError), and `'step': 1e30` broke the cache's save; such a step is ignored
    and the point is placed as a dict without a step is."""
    from rtrain_tui.core.metrics import metrics_cache
    from rtrain_tui.core.metrics.metrics_cache import CachedMetrics

    p = parse_text("{'loss': 2.0}\n" + f"{{'loss': 1.5, 'step': {step}}}\n" + "{'loss': 1.0}\n")
    assert [v for _, v in p.losses] == [2.0, 1.5, 1.0]
    assert all(0 <= s < 1 << 63 for s, _ in p.losses)
    path = tmp_path / "cache.json"
    metrics_cache.save(path, CachedMetrics(10, p))
    loaded = metrics_cache.load(path)
    assert loaded is not None and loaded.parser.losses == p.losses


def test_a_downsampler_starts_over_when_its_series_is_replaced_by_one_as_long() -> None:
    """A metrics.jsonl that takes the loss series over from the log can be as long as
    the log's series: the curve must show the new points, not the old ones."""
    sampler = Downsampler()
    sampler.update([(1, 3.0), (2, 2.0)])
    sampler.update([(10, 1.0), (20, 0.5), (30, 0.25)])
    assert sampler.points(10) == [(10, 1.0), (20, 0.5), (30, 0.25)]
    sampler.update([(10, 1.0), (20, 0.5), (30, 0.25), (40, 0.2)])  # it grew: kept, extended
    assert sampler.points(10)[-1] == (40, pytest.approx(0.2))


@pytest.mark.parametrize("state", ["stopped", "failed (exit 1)", "lost", "queued", "unknown"])
def test_only_a_running_run_has_a_live_eta_and_rate(state: str) -> None:
    """Issue 15 item 21: the one function every view words a summary through."""
    live = parse_text(HF4_LOG).summary()
    assert for_state(live, "running") == live and live.eta_seconds and live.steps_per_second
    ended = for_state(live, state)
    assert (ended.eta_seconds, ended.steps_per_second) == (None, None)
    assert (ended.step, ended.total, ended.loss) == (live.step, live.total, live.loss)
    assert "ETA" not in summary_line(ended) and "steps/s" not in summary_line(ended)
    done = parse_text(HF4_LOG + FINAL_LINE).summary()
    assert for_state(done, state) == done  # the trainer's own final figures are a record


def test_a_resumed_attempt_replaces_the_steps_past_its_checkpoint() -> None:
    """Attempt 1 logged steps 1-5 and died; attempt 2 goes on from checkpoint-4, so the
    crashed attempt's step 5 is dropped and the new one's 5 and 6 follow."""
    log = "".join(f"{{'loss': {10 - s}.0, 'step': {s}}}\n" for s in range(1, 6))
    log += "=== attempt 2: resuming from outputs/checkpoint-4 ===\n"
    log += "  Continuing training from global step 4\n"
    log += "".join(f"{{'loss': {s}.5, 'learning_rate': 0.1, 'step': {s}}}\n" for s in (5, 6))
    parser = MetricsParser()
    for i in range(0, len(log), 7):  # fed in pieces, as a follower reads it
        parser.feed(log[i:i + 7].encode())
    assert parser.losses == [(1, 9.0), (2, 8.0), (3, 7.0), (4, 6.0), (5, 5.5), (6, 6.5)]
    assert parser.learning_rates == [(5, 0.1), (6, 0.1)]


def test_a_restarted_attempt_starts_the_curves_over_and_counts_from_zero() -> None:
    log = ("{'loss': 3.0}\n{'loss': 2.0}\n" + FINAL_LINE
           + "=== attempt 3: restarting from the start ===\n{'loss': 4.0}\n")
    parser = parse_text(log)
    assert parser.losses == [(1, 4.0)]
    assert parser.summary().finished is False


def test_a_log_line_that_only_looks_like_a_separator_changes_nothing() -> None:
    log = "{'loss': 3.0}\n{'loss': 2.0}\nsay === attempt 2: restarting from the start ===\n"
    log += "=== attempt 2: resuming from outputs/checkpoint-x ===\n"
    assert parse_text(log).losses == [(1, 3.0), (2, 2.0)]
