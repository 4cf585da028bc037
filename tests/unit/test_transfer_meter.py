"""A transfer's progress in words (core/transfers/meter.py): what the CLI's progress line
and the start form say while bytes move."""

from __future__ import annotations

from rtrain_tui.core.transfers.meter import Meter, Moving, describe, size_text


def test_the_line_says_bytes_ratio_rate_and_time_left() -> None:
    assert describe(412_000_000, 1_000_000_000, 108_000_000, 13.3) == \
        "412 MB of 1.0 GB · 3.8× compressed · 31 MB/s · 19 s left"


def test_raw_bytes_say_no_ratio_and_an_early_call_no_rate() -> None:
    assert describe(5_000_000, 50_000_000, 5_000_045, 2.0) == "5.0 MB of 50 MB · 2.5 MB/s · 18 s left"
    assert describe(5_000_000, 50_000_000, None, 0.1) == "5.0 MB of 50 MB"
    assert describe(0, 900, 0, 3.0) == "0 B of 900 B"


def test_a_long_wait_is_worded_in_minutes_and_the_end_has_no_time_left() -> None:
    assert describe(1_000_000, 1_000_000_000, None, 1.0).endswith("· 1.0 MB/s · 16m39s left")
    assert describe(7_000, 7_000, 1_000, 1.0) == "7.0 kB of 7.0 kB · 7.0× compressed · 7.0 kB/s"


def test_sizes_in_decimal_units() -> None:
    assert [size_text(n) for n in (0, 999, 1000, 12_345, 412e6, 1.04e9, 20e9)] == \
        ["0 B", "999 B", "1.0 kB", "12 kB", "412 MB", "1.0 GB", "20 GB"]


def test_a_moving_label_is_its_name_to_every_callback_and_the_meter_reads_its_wire() -> None:
    label = Moving("train.jsonl", 250)
    assert label == "train.jsonl" and {label: 1}["train.jsonl"] == 1
    clock = iter([100.0, 102.0])
    meter = Meter(clock=lambda: next(clock))
    assert meter.line(label, 0, 2000) == "0 B of 2.0 kB"
    assert meter.line(Moving("train.jsonl", 500), 1000, 2000) == \
        "1.0 kB of 2.0 kB · 2.0× compressed · 500 B/s · 2 s left"


def test_a_delta_says_what_it_sends_of_the_whole_file_once_in_one_line() -> None:
    assert describe(1_000_000, 2_100_000, 320_000, 0.032, of=1_000_000_000) == \
        "delta · 1.0 MB of 2.1 MB to send (of 1.0 GB) · 3.1× compressed"
    clock = iter([10.0, 11.0])
    meter = Meter(clock=lambda: next(clock))
    meter.line(Moving("train.jsonl", 0, 1_000_000_000), 0, 2_100_000)
    line = meter.line(Moving("train.jsonl", 320_000, 1_000_000_000), 1_000_000, 2_100_000)
    assert f"uploading train.jsonl: {line}" == (
        "uploading train.jsonl: delta · 1.0 MB of 2.1 MB to send (of 1.0 GB) · 3.1× compressed"
        " · 1.0 MB/s · 1 s left")


def test_how_a_dataset_went_is_one_line_for_each_way() -> None:
    from rtrain_tui.core.transfers.meter import shipped_words

    assert shipped_words("d.jsonl", 10**9, "linked", 0, 0.2, "gpu") == \
        "d.jsonl: already on gpu, nothing sent"
    assert shipped_words("d.jsonl", 105 * 10**6, "whole", 18 * 10**6, 3.14, "gpu") == \
        "d.jsonl: sent 105 MB as 18 MB (5.8× compressed) in 3.1 s"
    assert shipped_words("w.bin", 512 * 10**6, "whole", 512 * 10**6 + 8192, 2.0, "gpu") == \
        "w.bin: sent 512 MB in 2.0 s (256 MB/s)"
    assert shipped_words("w.bin", 10**6, "whole", 10**6, 0.1, "gpu") == \
        "w.bin: sent 1.0 MB in 0.1 s"  # no rate from so short a time
    assert shipped_words("d.jsonl", 256 * 10**6, "delta", 1_400_000, 1.5, "gpu") == \
        "d.jsonl: sent as a delta: 1.4 MB for its 256 MB, the rest was on gpu already, in 1.5 s"
    assert shipped_words("d.jsonl", 10**8, "whole", 20_000, 1.0, "gpu").endswith(
        "(5000× compressed) in 1.0 s")
