"""Folding tqdm redraws: a log reads as a terminal shows it, one live bar under the lines."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from rtrain_tui.core.logs.logstream import LineSplitter
from rtrain_tui.core.logs.progress_fold import ProgressFolder
from rtrain_tui.demo.server import SAMPLES
from rtrain_tui.log_view import CLEAR_LINE, LogWriter


def bar(n: int, total: int, desc: str = "", unit: str = "it/s") -> str:
    pct = n * 100 // total
    filled = n * 10 // total
    return f"{desc}{pct:3d}%|{'█' * filled}{' ' * (10 - filled)}| {n}/{total} [00:01<00:02, 3.10{unit}]"


def demo_log(tmp_path: Path, steps: int) -> bytes:
    config = tmp_path / "config.yaml"
    config.write_text(f"max_steps: {steps}\nstep_seconds: 0\nlogging_steps: 5\neval_steps: 40\n")
    log = tmp_path / "train.log"
    with log.open("wb") as out:  # stdout and stderr merged, as the wrapper does
        subprocess.run([sys.executable, "-m", "rtrain_tui.demo.trainer", "llm",
                        str(SAMPLES / "pirate_chat.jsonl"), "--config", str(config)],
                       stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, timeout=60, check=True)
    return log.read_bytes()


def test_a_hugging_face_style_log_folds_to_its_printed_lines_and_one_bar(tmp_path: Path) -> None:
    splitter = LineSplitter()
    lines = splitter.feed(demo_log(tmp_path, 120)) + splitter.flush()
    folder = ProgressFolder()
    history = folder.fold(lines)
    losses = [line for line in lines if "'loss'" in line]
    assert len(losses) == 24
    # every loss dict once, in order, on its own line (they were glued to bar redraws)
    assert [h for h in history if "'loss'" in h] == [loss[loss.index("{"):] for loss in losses]
    bars = [h for h in history if "%|" in h]
    assert bars == [bar_line for bar_line in bars if "120/120" in bar_line] and len(bars) == 1
    assert len(lines) >= 150 and len(history) <= 45  # ~4 redraws per loss line, gone
    assert "" not in history[:history.index(losses[0][losses[0].index("{"):])]  # no \n\r blanks
    assert folder.bar is None  # the bar finished: it stays where it ended, like tqdm's


def test_the_live_bar_is_the_last_redraw_and_never_enters_the_history() -> None:
    folder = ProgressFolder()
    history = folder.fold(["starting", bar(0, 120), bar(1, 120), bar(2, 120)])
    assert history == ["starting"]
    assert folder.bar == bar(2, 120)
    assert folder.fold([bar(3, 120) + "{'loss': 2.5, 'epoch': 0.1}", "", bar(4, 120)]) \
        == ["{'loss': 2.5, 'epoch': 0.1}"]
    assert folder.bar == bar(4, 120)
    assert folder.finish() == [bar(4, 120)]  # the stream ended mid-bar: keep where it got
    assert folder.bar is None


def test_another_bar_moves_the_old_one_into_the_history_in_its_last_state() -> None:
    folder = ProgressFolder()
    history = folder.fold([bar(3, 10, "Map: ", " examples/s"), bar(7, 10, "Map: ", " examples/s"),
                           bar(5, 120), bar(6, 120), bar(2, 13), bar(6, 120)])
    assert history == [bar(7, 10, "Map: ", " examples/s"), bar(6, 120), bar(2, 13)]
    assert folder.bar == bar(6, 120)


def test_a_finished_bar_is_kept_once() -> None:
    folder = ProgressFolder()
    history = folder.fold([bar(9, 10), bar(10, 10), bar(10, 10), "done"])
    assert history == [bar(10, 10), "done"]
    assert folder.bar is None


def test_blank_lines_the_program_printed_stay() -> None:
    folder = ProgressFolder()
    assert folder.fold(["a", "", "", "b", ""]) == ["a", "", "", "b"]
    assert folder.fold([""]) == [""]  # the held blank was real: no bar followed it
    assert folder.finish() == [""]


def test_lines_that_only_look_like_bars_are_left_alone() -> None:
    text = ["accuracy 95%|ok", "|  5/10 [", "50% done | 5/10", "loss=2.3 | 40%|x"]
    assert ProgressFolder().fold(text) == text


@given(st.lists(st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30),
    st.builds(bar, st.integers(0, 50), st.just(50), st.sampled_from(["", "Map: ", "train: "])))))
def test_no_printed_line_is_lost_or_reordered(lines: list[str]) -> None:
    folder = ProgressFolder()
    mid = len(lines) // 2
    history = folder.fold(lines[:mid]) + folder.fold(lines[mid:]) + folder.finish()
    # (a line of spaces only may be a bar's erase: dropped, and shown as nothing anyway)
    printed = [line for line in lines if "%|" not in line and line.strip(" ")]
    assert [h for h in history if "%|" not in h and h.strip(" ")] == printed


# What a transformers Trainer writes into train.log (PYTHONUNBUFFERED=1): tqdm's bar on
# stderr and each log dict through `tqdm.write`, which first erases the bar with
# `\r<spaces>\r` and redraws it after the line (bytes as tqdm 4.70 writes them).
TQDM_WRITE_LOG = (
    b"\r  0%|          | 0/10 [00:00<?, ?it/s]\r                                      \r"
    b"{'loss': 2.5, 'grad_norm': 1.0, 'learning_rate': 0.0001, 'epoch': 0.2}\n"
    b"\r 20%|\xe2\x96\x88\xe2\x96\x88        | 2/10 [00:00<00:00, 30840.47it/s]"
    b"\r                                                 \r"
    b"{'loss': 2.4, 'grad_norm': 1.0, 'learning_rate': 0.0001, 'epoch': 0.4}\n"
    b"\r 40%|\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88      | 4/10 [00:00<00:00, 28102.54it/s]"
    b"\r                                                 \r"
    b"{'loss': 2.3, 'grad_norm': 1.0, 'learning_rate': 0.0001, 'epoch': 0.6}\n"
    b"\r100%|\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88"
    b"\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88| 10/10 [00:00<00:00, 31447.45it/s]"
    b"\r                                                 \r"
    b"{'train_runtime': 0.01, 'train_loss': 2.4, 'epoch': 1.0}\n"
    b"\r100%|\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88"
    b"\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88| 10/10 [00:00<00:00, 31447.45it/s]\n")


def test_tqdm_write_dicts_fold_with_no_blank_line_between_them() -> None:
    """Issue 15 item 36: the bar's erase before each dict was a blank line in the pane and in tail."""
    splitter = LineSplitter()
    lines = splitter.feed(TQDM_WRITE_LOG) + splitter.flush()
    folder = ProgressFolder()
    history = folder.fold(lines) + folder.finish()
    assert [h for h in history if not h.strip()] == []
    assert [h[:9] for h in history] == ["{'loss': "] * 3 + ["100%|████"] + ["{'train_r"]


def test_tail_on_a_terminal_prints_no_blank_line_between_tqdm_write_dicts() -> None:
    out = _Terminal()
    writer = LogWriter(out)
    splitter = LineSplitter()
    writer.write(splitter.feed(TQDM_WRITE_LOG) + splitter.flush())
    writer.close()
    shown = out.getvalue().replace(CLEAR_LINE, "").split("\n")
    assert [line for line in shown[:-1] if not line.strip()] == []
    assert sum("'loss'" in line for line in shown) == 3


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True
