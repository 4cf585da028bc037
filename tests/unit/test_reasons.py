"""Why a run died, from the exact wording PyTorch, NCCL, Python and HF libraries print."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rtrain_tui.core.logs import reasons
from rtrain_tui.core.logs.reasons import why_it_ended

TB = "Traceback (most recent call last):"
FRAME = ['  File "/opt/venv/lib/python3.11/site-packages/transformers/trainer.py", line 2241, in train',
         "    return inner_training_loop("]

CUDA_OOM_TORCH2 = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
                   "total capacity of 79.19 GiB of which 1.06 GiB is free. Including non-PyTorch memory, "
                   "this process has 78.12 GiB memory in use.")
CUDA_OOM_OLD = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB "
                "(GPU 0; 14.75 GiB total capacity; 13.58 GiB already allocated; 10.81 MiB free; "
                "13.85 GiB reserved in total by PyTorch)")
NCCL_TIMEOUT = ("[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=1325, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                "Timeout(ms)=600000) ran for 600038 milliseconds before timing out.")
NCCL_ERROR = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
              "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), "
              "NCCL version 2.19.3")


def reason(lines: list[str], state: str = "failed (exit 1)", code: int | None = 1,
           stop: bool = False, host: str = "gpu") -> str:
    return why_it_ended(state, code, stop, lines, host)


@pytest.mark.parametrize("line,allocate", [(CUDA_OOM_TORCH2, "2.00 GiB"), (CUDA_OOM_OLD, "20.00 MiB")])
def test_cuda_out_of_memory(line: str, allocate: str) -> None:
    got = reason([TB, *FRAME, line])
    assert got.startswith(f"CUDA out of memory: tried to allocate {allocate}")
    assert "batch size" in got


def test_cuda_oom_as_runtime_error_from_cuda() -> None:
    got = reason([TB, *FRAME, "RuntimeError: CUDA error: out of memory",
                  "CUDA kernel errors might be asynchronously reported at some other API call"])
    assert got.startswith("CUDA out of memory")


def test_oom_killer_is_exit_137_without_our_stop() -> None:
    assert "OOM killer" in reason(["{'loss': 1.2}"], "failed (exit 137)", 137)


def test_our_own_stop_is_not_blamed_on_the_oom_killer() -> None:
    assert reason(["{'loss': 1.2}"], "failed (exit 137)", 137, stop=True) == ""


def test_someone_elses_sigterm() -> None:
    assert reason(["step 3"], "failed (exit 143)", 143) == "terminated by SIGTERM from outside rtrain-tui"
    assert reason(["step 3"], "failed (exit 129)", 129) == "terminated by SIGHUP from outside rtrain-tui"


def test_nccl_timeout_and_error() -> None:
    assert reason([NCCL_TIMEOUT]) == "NCCL timeout: ALLREDUCE collective did not finish after 600 s"
    assert reason([TB, *FRAME, NCCL_ERROR]) == "NCCL error: unhandled system error"


def test_no_space_left_on_device() -> None:
    got = reason([TB, '  File "torch/serialization.py", line 652, in save',
                  "OSError: [Errno 28] No space left on device"])
    assert got == "no space left on device on gpu"
    assert reason(["RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 64 vs 0",
                   "write: No space left on device"]) == "no space left on device on gpu"


def test_missing_module_names_it_and_the_pip_command() -> None:
    got = reason([TB, '  File "<frozen runpy>", line 198, in _run_module_as_main',
                  "ModuleNotFoundError: No module named 'peft'"])
    assert got == "missing Python module peft: pip install peft on gpu"
    assert reason(["ModuleNotFoundError: No module named 'yaml'"]) == \
        "missing Python module yaml: pip install pyyaml on gpu"
    assert reason(["ModuleNotFoundError: No module named 'flash_attn.flash_attn_interface'"]).endswith(
        "pip install flash-attn on gpu")


def test_python_dash_m_of_a_missing_module_names_the_pip_command() -> None:
    """What the real interpreter prints for `python -m MODULE` (issue 15 item 28)."""
    said = subprocess.run([sys.executable, "-m", "no_such_trainer_mod", "llm"],
                          capture_output=True, text=True).stderr.splitlines()
    assert said[-1].endswith(": No module named no_such_trainer_mod")
    assert reason(said) == "missing Python module no_such_trainer_mod: pip install no_such_trainer_mod on gpu"
    said = subprocess.run([sys.executable, "-m", "yaml_nope.sub"], capture_output=True, text=True).stderr
    assert reason(said.splitlines()) == "missing Python module yaml_nope: pip install yaml_nope on gpu"


def test_dataset_config_and_model_not_found() -> None:
    assert reason([TB, "FileNotFoundError: [Errno 2] No such file or directory: 'config.yaml'"]) == \
        "file not found: config.yaml"
    assert reason([TB, "FileNotFoundError: Unable to find '/home/u/data/train.jsonl'"]) == \
        "file not found: Unable to find '/home/u/data/train.jsonl'"
    assert reason([TB, "datasets.exceptions.DatasetNotFoundError: Dataset 'org/pirate-chat' doesn't "
                   "exist on the Hub or cannot be accessed."]) == "dataset not found: org/pirate-chat"
    assert reason([TB, "OSError: unsloth/llama-9-8b is not a local folder and is not a valid model "
                   "identifier listed on 'https://huggingface.co/models'"]) == \
        "model not found: unsloth/llama-9-8b"


def test_otherwise_the_last_line_of_the_last_traceback() -> None:
    lines = [TB, *FRAME, "KeyError: 'text'", "",
             "During handling of the above exception, another exception occurred:", "",
             TB, *FRAME, "ValueError: Unable to create tensor, you should probably activate truncation"]
    assert reason(lines) == "ValueError: Unable to create tensor, you should probably activate truncation"
    assert reason([TB, *FRAME, "AssertionError", "done"]) == "AssertionError"


def test_a_failure_with_nothing_to_tell_has_no_reason() -> None:
    assert reason(["training done, exit 3"], "failed (exit 3)", 3) == ""


def test_only_failed_and_lost_runs_have_reasons() -> None:
    for state in ("completed", "running", "stopped", "unknown"):
        assert why_it_ended(state, 0, False, [CUDA_OOM_TORCH2]) == ""
    assert why_it_ended("lost", None, False, []).startswith("its processes vanished")
    assert why_it_ended("lost", None, False, [CUDA_OOM_TORCH2]).startswith("CUDA out of memory")


def test_host_text_in_a_reason_is_made_inert() -> None:
    got = reason([TB, "ValueError: bad \x1b]0;PWNED\x07 title \x1b[2J"])
    assert "\x1b" not in got and "\x07" not in got
    assert len(reason([TB, "ValueError: " + "x" * 5000])) <= 200


def _stand_in_crashes() -> dict[str, tuple[int, list[str]]]:
    """The stand-in trainer's real-world failure texts (tests/remote/py/praisonai_train)."""
    path = Path(__file__).parent.parent / "remote" / "py" / "praisonai_train" / "hf_style.py"
    spec = importlib.util.spec_from_file_location("hf_style_crashes", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CRASHES


def _log_lines(text_lines: list[str]) -> list[str]:
    """As the log reader splits them: `\\r` ends a line too."""
    return "\n".join(text_lines).replace("\r", "\n").split("\n")


def test_torchrun_failure_names_the_failing_ranks_exception() -> None:
    """Issue 15 item 31: never the launcher's `ChildFailedError:` line."""
    lines = _log_lines(_stand_in_crashes()["torchrun_index"][1])
    assert reason(lines) == "[rank1]: IndexError: list index out of range"
    # An older torch does not prefix the workers' lines with their rank.
    unprefixed = [re.sub(r"^\[rank\d\]: ", "", line) for line in lines]
    assert reason(unprefixed) == "[rank1]: IndexError: list index out of range"
    # The rank that failed first is the cause, not the peer that broke after it.
    cut = lines.index(next(line for line in lines if "closing signal SIGTERM" in line))
    collateral = lines[:cut] + [NCCL_ERROR.replace("torch.", "[rank0]: torch.", 1)] + lines[cut:]
    assert reason(collateral) == "[rank1]: IndexError: list index out of range"


def test_torchrun_worker_killed_by_sigkill_is_the_oom_killer() -> None:
    lines = _log_lines(_stand_in_crashes()["torchrun_sigkill"][1])
    assert reason(lines) == ("[rank1]: killed by SIGKILL, most likely the kernel's OOM killer "
                             "(the host ran out of memory)")
    assert reason([NCCL_ERROR.replace("torch.", "[rank0]: torch.", 1), *lines]) == reason(lines)
    # a known message in the failing rank's own lines is named as such
    oom = ["[rank1]: Traceback (most recent call last):", f"[rank1]: {CUDA_OOM_TORCH2}"]
    index = _log_lines(_stand_in_crashes()["torchrun_index"][1])
    assert reason(oom + index).startswith("[rank1]: CUDA out of memory: tried to allocate 2.00 GiB")


def test_a_traceback_glued_to_a_progress_bar_still_gives_its_reason() -> None:
    """Issue 15 item 33: raised before the first log line, after tqdm's first redraw."""
    lines = _log_lines(_stand_in_crashes()["glued_traceback"][1])
    assert reason(lines).startswith("ValueError: Asking to pad but the tokenizer does not have a padding token.")


def test_torch_save_on_a_full_disk_is_no_space_left() -> None:
    """Issue 15 item 32: the zip writer's enforce failure alone, as torch.save raises it."""
    assert reason([TB, '  File "/opt/venv/lib/python3.11/site-packages/torch/serialization.py", line 652, in save',
                   "    with _open_zipfile_writer(f) as opened_zipfile:",
                   "RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 1600 vs 1494"]) \
        == "no space left on device on gpu"


def test_an_exit_code_the_disk_could_not_hold_is_failed_for_want_of_space() -> None:
    """The probe measured the run dir's free space because status.tmp was left empty."""
    cut = ["{'loss': 2.3141, 'grad_norm': 1.25, 'learn"]
    assert why_it_ended("failed", None, False, cut, "gpu", disk_free_kb=0) == "no space left on device on gpu"
    assert why_it_ended("failed", None, False, cut, "gpu", disk_free_kb=50 << 20).startswith(
        "its exit code could not be written")


def test_a_tail_of_many_tracebacks_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """963 `Traceback` lines and no exception (a 32 KiB tail): each line used to be read
    again from every traceback above it, ~460,000 lines (0.6 s on the app's event loop)."""
    lines = ["Traceback (most recent call last):", '  File "t.py", line 1, in <module>'] * 963
    lines[5] = "ValueError: the first one"
    read = []
    unglued = reasons._unglued
    monkeypatch.setattr(reasons, "_unglued", lambda line: read.append(line) or unglued(line))
    assert reason(lines) == "ValueError: the first one"
    assert len(read) <= len(lines)
