"""The runs table's progress column and the log stream's line splitting."""

from rtrain_tui.core.logs.logparse import progress_of
from rtrain_tui.core.logs.logstream import LineSplitter


def test_hf_dict_lines_give_step_and_loss() -> None:
    lines = ["{'loss': 2.4722, 'grad_norm': 0.14, 'learning_rate': 2.0, 'epoch': 2.89, 'step': 120}"]
    assert progress_of(lines) == "step 120 · loss 2.4722"


def test_tqdm_bar_gives_the_step_and_an_earlier_line_the_loss() -> None:
    lines = ["{'loss': 3.1, 'epoch': 0.5}", " 37%|███▋      | 45/120 [00:10<00:17, 4.4it/s]"]
    assert progress_of(lines) == "step 45/120 · loss 3.1000"


def test_plain_text_falls_back_to_the_last_line_truncated() -> None:
    assert progress_of(["loading model", "", "x" * 100], width=20) == "x" * 19 + "…"
    assert progress_of([]) == ""


def test_splitter_handles_crlf_split_across_reads_and_bad_bytes() -> None:
    s = LineSplitter()
    assert s.feed(b"a\r") == []
    assert s.feed(b"\nb\rc\xe2\x82") == ["a", "b"]
    assert s.feed(b"\xac\xff\n") == ["c€\ufffd"]
    assert s.feed(b"tail") == [] and s.flush() == ["tail"]
