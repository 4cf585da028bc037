"""Why a run ended badly, from its exit code and the tail of its log. Pure.

The reason is a short phrase shown beside the status word (`failed (exit 1)` · `CUDA out
of memory …`), never a new word: scripts keep parsing the word. The most specific
evidence wins: a message in the log (CUDA OOM, NCCL, a full disk, a missing module, a
missing file) before what the exit code alone suggests (SIGKILL: the OOM killer; another
signal: someone else's), before the last line of a Python traceback.
"""

from __future__ import annotations

import re
import signal

from rtrain_tui.core.metrics.metrics import TQDM_BAR
from rtrain_tui.core.safety.sanitize import safe_line

MAX_REASON = 200  # characters: a table cell and a toast, not a log

# torch.OutOfMemoryError / torch.cuda.OutOfMemoryError / RuntimeError: CUDA out of memory.
_CUDA_OOM = re.compile(r"CUDA out of memory\.?(?:\s*Tried to allocate ([\d.]+ [KMGT]i?B))?"
                       r"(?:\.?\s*GPU (\d+))?", re.IGNORECASE)
_CUDA_OOM_OTHER = re.compile(r"CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED")
# `Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, ...`
_NCCL_TIMEOUT = re.compile(r"collective operation timeout: WorkNCCL\(.*?OpType=(\w+)"
                           r"(?:.*?Timeout\(ms\)=(\d+))?")
# `torch.distributed.DistBackendError: NCCL error in: ...ProcessGroupNCCL.cpp:1970, unhandled system error (...)`
_NCCL_ERROR = re.compile(r"NCCL (?:error|Error)(?: in: \S+,)?\s*([^(\n]*)")
# torch.save on a full disk: `RuntimeError: [enforce fail at inline_container.cc:595] .
# unexpected pos 1600 vs 1494` (PyTorch's zip writer sees its short write as a bad offset).
_NO_SPACE = re.compile(r"No space left on device|\[Errno 28\]|"
                       r"enforce fail at inline_container\.cc:\d+\] \. unexpected pos")
FULL_KB = 1024  # less free space than this in the run dir: the disk is full
_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")
# `python -m MODULE` itself: `/usr/bin/python3: No module named praisonai_train` (runpy
# prints it without an exception name, and without quotes).
_RUN_MODULE = re.compile(r"^\S+: No module named ([\w.]+)\s*$", re.MULTILINE)
_IMPORT_NAME = re.compile(r"ImportError: cannot import name '(\w+)' from '([\w.]+)'")
# `FileNotFoundError: [Errno 2] No such file or directory: 'data/train.jsonl'`
_NO_FILE = re.compile(r"FileNotFoundError: (?:\[Errno 2\] No such file or directory: '([^']+)'|(.+))")
# datasets: `DatasetNotFoundError: Dataset 'org/name' doesn't exist on the Hub or cannot be accessed.`
_NO_DATASET = re.compile(r"DatasetNotFoundError: Dataset '([^']+)' doesn't exist")
# transformers: `OSError: org/name is not a local folder and is not a valid model identifier ...`
_NO_MODEL = re.compile(r"OSError: (\S+) is not a local folder and is not a valid model identifier")
# torchrun (torch.distributed.elastic) prefixes each worker's lines with its rank, and
# ends with a summary whose root cause names the failing rank and its exit code:
#   Root Cause (first observed failure):
#   [0]:
#     rank      : 1 (local_rank: 1)
#     exitcode  : -9 (pid: 208585)
_RANK_PREFIX = re.compile(r"^\[(?:default)?rank(\d+)\]:\s?")
_ROOT_CAUSE = "Root Cause (first observed failure):"
_SUMMARY_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_SUMMARY_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_LAUNCHER_ERROR = "ChildFailedError"  # torchrun's own wrapper exception: never the reason
_TRACEBACK = "Traceback (most recent call last)"
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b[^:]*):?\s?(.*)$")

# Import name → pip name, where they differ (the ones fine-tuning stacks hit).
PIP_NAMES = {
    "yaml": "pyyaml", "sklearn": "scikit-learn", "PIL": "pillow", "cv2": "opencv-python",
    "google.protobuf": "protobuf", "flash_attn": "flash-attn", "bitsandbytes": "bitsandbytes",
    "sentencepiece": "sentencepiece", "dotenv": "python-dotenv", "unsloth_zoo": "unsloth_zoo",
}


def _pip_name(module: str) -> str:
    top = module.split(".")[0]
    return PIP_NAMES.get(module) or PIP_NAMES.get(top) or top


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _from_log(lines: list[str], host: str) -> str:
    """The most specific message in the log's tail, or ''."""
    text = "\n".join(lines)
    if m := _CUDA_OOM.search(text):
        detail = f": tried to allocate {m.group(1)}" if m.group(1) else ""
        gpu = f" on GPU {m.group(2)}" if m.group(2) else ""
        return f"CUDA out of memory{detail}{gpu} (lower the batch size or sequence length)"
    if _CUDA_OOM_OTHER.search(text):
        return "CUDA out of memory (lower the batch size or sequence length)"
    if m := _NCCL_TIMEOUT.search(text):
        after = f" after {int(m.group(2)) // 1000} s" if m.group(2) else ""
        return f"NCCL timeout: {m.group(1)} collective did not finish{after}"
    if m := _NCCL_ERROR.search(text):
        detail = m.group(1).strip().rstrip(",")
        return f"NCCL error: {detail}" if detail else "NCCL error"
    if _NO_SPACE.search(text):
        return f"no space left on device on {host}" if host else "no space left on device"
    if m := _MODULE.search(text) or _RUN_MODULE.search(text):
        where = f" on {host}" if host else " on the host"
        return f"missing Python module {m.group(1)}: pip install {_pip_name(m.group(1))}{where}"
    if m := _IMPORT_NAME.search(text):
        return (f"cannot import {m.group(1)} from {m.group(2)}: upgrade "
                f"{_pip_name(m.group(2))} on {host or 'the host'}")
    if m := _NO_DATASET.search(text):
        return f"dataset not found: {m.group(1)}"
    if m := _NO_MODEL.search(text):
        return f"model not found: {m.group(1)}"
    if m := _NO_FILE.search(text):
        return f"file not found: {(m.group(1) or m.group(2)).strip()}"
    return ""


def _unglued(line: str) -> str:
    """The line without a tqdm bar in front: a traceback written to stderr before the
    first newline lands glued to the end of the bar's last redraw."""
    if "%|" in line and (m := TQDM_BAR.match(line)):
        return line[m.end():]
    return line


def _last_traceback_line(lines: list[str]) -> str:
    """The exception line that ends the last `Traceback (most recent call last):`,
    skipping torchrun's own (it only says that a worker failed).

    One pass from the end, each line read once: scanning on from every `Traceback`
    line read a tail of 963 of them ~460,000 times (0.6 s on the app's event loop).
    """
    first = next((i for i, line in enumerate(lines) if _TRACEBACK in line), None)
    if first is None:
        return ""
    after = ""  # the first exception line below the line at hand
    for i in range(len(lines) - 1, first - 1, -1):
        if _TRACEBACK in lines[i] and after and _LAUNCHER_ERROR not in after.split(":")[0]:
            return after
        line = _unglued(lines[i])
        if line[:1] not in (" ", "\t", "") and _EXCEPTION_LINE.match(line):
            after = line.strip()
    return ""


def _torchrun_reason(lines: list[str], host: str) -> str:
    """The failing rank's own reason from torchrun's summary, or ''.

    A negative exit code is a signal (`-9`: SIGKILL, most likely the OOM killer); else
    what that rank's own `[rankN]:` lines say (a known message, else its last exception),
    before the others': when one rank dies, the others often fail after it with an NCCL
    or connection error that is not the cause. From an older torch that does not prefix
    the lines: the whole log's message, else its last traceback that is not the
    launcher's."""
    start = max((i for i, line in enumerate(lines) if _ROOT_CAUSE in line), default=None)
    if start is None:
        return ""
    rank = code = None
    for line in lines[start + 1:start + 12]:
        if rank is None and (m := _SUMMARY_RANK.match(line)):
            rank = m.group(1)
        elif code is None and (m := _SUMMARY_EXIT.match(line)):
            code = int(m.group(1))
    if rank is None or code is None:
        return ""
    if code < 0:
        return f"[rank{rank}]: " + _killed_by(-code)
    own = [_RANK_PREFIX.sub("", line) for line in lines
           if (m := _RANK_PREFIX.match(line)) and m.group(1) == rank]
    found = (_from_log(own, host) or _last_traceback_line(own) or _from_log(lines, host)
             or _last_traceback_line([line for line in lines if not _RANK_PREFIX.match(line)]))
    return f"[rank{rank}]: {found}" if found else ""


def _killed_by(number: int) -> str:
    """What a signal from outside says: SIGKILL is most often the kernel's OOM killer."""
    if number == signal.SIGKILL:
        return ("killed by SIGKILL, most likely the kernel's OOM killer (the host ran "
                "out of memory)")
    return f"terminated by {_signal_name(number)} from outside rtrain-tui"


def why_it_ended(state: str, exit_code: int | None, stop_requested: bool,
                 log_tail: list[str], host: str = "", disk_free_kb: int | None = None) -> str:
    """A short reason for a run that failed or was lost; '' for any other run.

    `exit_code` is what the wrapper recorded (`128+N` for signal N); `stop_requested`
    says a stop of ours was issued, so a SIGTERM/SIGKILL was ours, not someone else's.
    `disk_free_kb`, when the probe measured it (the exit code could not be written), is
    the run dir's free space: a full disk is the reason even when the log, cut short by
    that same full disk, says nothing.
    """
    if not (state.startswith("failed") or state == "lost"):
        return ""
    lines = [safe_line(line) for line in log_tail]  # host text: no escapes in a reason
    # torchrun's summary first: it names the rank that failed first, and why.
    reason = _torchrun_reason(lines, host) or _from_log(lines, host)
    if not reason and disk_free_kb is not None and disk_free_kb < FULL_KB:
        reason = f"no space left on device on {host}" if host else "no space left on device"
    if not reason and exit_code is not None and exit_code > 128 and not stop_requested:
        reason = _killed_by(exit_code - 128)
    if not reason:
        reason = _last_traceback_line(lines)
    if not reason and state == "failed":
        reason = "its exit code could not be written (an empty status.tmp is left in its directory)"
    if not reason and state == "lost":
        reason = ("its processes vanished without an exit code: the OOM killer, a reboot, "
                  "or a kill of the wrapper")
    return reason[:MAX_REASON]


# What `why_it_ended` says of a failure that ends the same way however often it runs.
_DETERMINISTIC = ("missing Python module", "cannot import", "file not found", "dataset not found",
                  "model not found")
_OOM = "CUDA out of memory"


def repeat_cannot_fix(reason: str, exit_code: int | None, previous_reason: str = "",
                      step: int | None = None, previous_step: int | None = None) -> str:
    """Why trying the attempt again cannot help ('' when it can): a missing module, file,
    dataset or model, a usage error (exit 2), or CUDA out of memory at the same step as
    the attempt before. `reason` is `why_it_ended`'s; the step is the last one logged.
    What retry decides on the host (logs/retry_rule.py) asks this, so the rule is one."""
    bare = re.sub(r"^\[rank\d+\]: ", "", reason)  # torchrun's failing rank, named first
    if bare.startswith(_DETERMINISTIC):
        return "repeating cannot fix it"
    if exit_code == 2:
        return "a usage error (exit 2)"
    if (bare.startswith(_OOM) and previous_reason and _OOM in previous_reason
            and step is not None and step == previous_step):
        return f"out of memory again at step {step}"
    return ""
