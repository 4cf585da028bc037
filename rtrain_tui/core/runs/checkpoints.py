"""Which `checkpoint-N` directories of a run are complete: the one rule that resume,
retry and the fetch browser use. Pure: it judges what the host listed (the host side is
`host/checkpoints.sh`, read by `parse_listing` here), it does no I/O and never raises.

Why a rule at all: transformers' Trainer saves a checkpoint with plain writes, in this
order: config, weights, training args, optimizer, scheduler, each rank's RNG state, and
`trainer_state.json` last, by rank 0 only. A run killed mid-save leaves a
`checkpoint-N` with some of those files, and Trainer's own "newest checkpoint" (the
highest number) then picks it and crashes. So:

- **Candidates:** directories named `checkpoint-N` (N digits) at depth 1 to 3 under the
  run directory (`checkpoint-150`, `outputs/checkpoint-150`, `a/b/checkpoint-150`).
- **trainer_state.json** must be there (else: `no trainer_state.json: cut off mid-save`),
  parse as JSON (else `trainer_state.json truncated` when the text just stops, or `is not
  JSON`) and say `global_step` N as an integer (else `global_step 140 ≠ 150`).
  A big one is not sent whole (a long run's `log_history` makes it megabytes; the host
  sends at most `WHOLE_CAP` bytes): past the cap, the host sends its first `HEAD_BYTES`
  and last `TAIL_BYTES`, and the file is judged by the shape transformers writes
  (`json.dumps(indent=2, sort_keys=True)`): `"global_step": N` as a top-level line of
  the head (sorted keys put it before `log_history`), and the last line `}` in column 0,
  which with any indent only the top-level object's end can be; a plain write cut
  short never ends there. A big file not of that shape `cannot be checked`.
- **Weights** (non-empty): `model.safetensors`, `adapter_model.safetensors`,
  `pytorch_model.bin` or `adapter_model.bin` (older PEFT); or sharded: an index
  (`model.safetensors.index.json` / `pytorch_model.bin.index.json`, written after the
  shards) with every shard `model-0000K-of-0000M.safetensors` (`pytorch_model-…bin`),
  K = 1..M, beside it. Else `no weights` / `weights incomplete: …`.
- **Every rank's RNG state:** under torchrun each rank writes `rng_state_K.pth` and no
  barrier comes before rank 0's `trainer_state.json`, so rank 3 may still be writing
  when rank 0 is done. The world size W is the caller's when it knows it (`world_size`:
  the processes of the attempt that saved), else inferred: 1 + the highest K in any
  candidate of the run, as one run saves with the same number of ranks. A checkpoint
  with any `rng_state_K.pth` needs all of 0..W-1. One with only `rng_state.pth` was saved
  by a single process, and one with none has nothing to check (resume works without it).
  Known limit of the inference: a run resumed on fewer GPUs than it started with has its
  new checkpoints judged against the old world size; pass `world_size` there.

Not recognised as weights (so `no weights`): DeepSpeed's `global_stepN/` and FSDP's
sharded directories; add them here when a trainer we run writes them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

# What the host sends of each trainer_state.json (host/checkpoints.sh uses the same numbers).
WHOLE_CAP = 65536
HEAD_BYTES = 16384
TAIL_BYTES = 64

_NAME = re.compile(r"checkpoint-([0-9]{1,18})")  # 18 digits: any real step, and int() is cheap
_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")
_SINGLE_WEIGHTS = ("model.safetensors", "adapter_model.safetensors", "pytorch_model.bin",
                   "adapter_model.bin")
_SHARDED = (("model.safetensors.index.json", re.compile(r"model-([0-9]{5})-of-([0-9]{5})\.safetensors")),
            ("pytorch_model.bin.index.json", re.compile(r"pytorch_model-([0-9]{5})-of-([0-9]{5})\.bin")))
_RANK = re.compile(r"rng_state_([0-9]{1,4})\.pth")
_TOP_STEP = re.compile(r'^  "global_step": ([0-9]{1,18}),?[ \t]*$', re.M)


@dataclass(frozen=True)
class StateText:
    """What the host sent of a trainer_state.json: all of it (`whole`), or its head and tail."""
    size: int
    head: str
    tail: str = ""
    whole: bool = True


@dataclass(frozen=True)
class Listing:
    """One candidate directory as the host listed it."""
    path: str  # relative to the run directory, e.g. `outputs/checkpoint-150`
    files: Mapping[str, bool] = field(default_factory=dict)  # file name -> non-empty
    state: StateText | None = None  # its trainer_state.json, when there is one


@dataclass(frozen=True)
class Checkpoint:
    """A judged candidate: `why` says what is wrong ("" when complete)."""
    path: str
    step: int
    why: str = ""

    @property
    def complete(self) -> bool:
        return not self.why

    @property
    def line(self) -> str:
        """`outputs/checkpoint-150 ✓` or `outputs/checkpoint-200 incomplete: <why>`."""
        return f"{self.path} ✓" if self.complete else f"{self.path} incomplete: {self.why}"


@dataclass(frozen=True)
class Newest:
    """The newest complete checkpoint (None when there is none) and the newer ones skipped."""
    checkpoint: Checkpoint | None
    skipped: tuple[Checkpoint, ...] = ()

    @property
    def lines(self) -> list[str]:
        return [c.line for c in self.skipped]


def step_of(path: str) -> int | None:
    """N when `path` is a candidate (`checkpoint-N` at depth 1 to 3, safe names), else None."""
    parts = path.split("/")
    if not 1 <= len(parts) <= 3 or not all(_SEGMENT.fullmatch(p) for p in parts):
        return None
    if any(p in (".", "..") for p in parts):
        return None
    m = _NAME.fullmatch(parts[-1])
    return int(m[1]) if m else None


def judge(listings: Iterable[Listing], world_size: int | None = None) -> list[Checkpoint]:
    """Every candidate judged, newest (highest step) first; non-candidates left out."""
    found = [(step, one) for one in listings if (step := step_of(one.path)) is not None]
    ranks = world_size if world_size and world_size > 0 else _inferred_world_size(
        one for _, one in found)
    judged = [Checkpoint(one.path, step, _problem(one, step, ranks)) for step, one in found]
    return sorted(judged, key=lambda c: (-c.step, c.path.count("/"), c.path))


def newest_complete(checkpoints: Sequence[Checkpoint]) -> Newest:
    """The highest complete step among judged checkpoints, and the newer incomplete ones
    (their lines say why each was skipped)."""
    ordered = sorted(checkpoints, key=lambda c: (-c.step, c.path.count("/"), c.path))
    skipped: list[Checkpoint] = []
    for one in ordered:
        if one.complete:
            return Newest(one, tuple(skipped))
        skipped.append(one)
    return Newest(None, tuple(skipped))


def _inferred_world_size(listings: Iterable[Listing]) -> int:
    top = 0
    for one in listings:
        for name in one.files:
            if m := _RANK.fullmatch(name):
                top = max(top, int(m[1]) + 1)
    return top


def _problem(one: Listing, step: int, ranks: int) -> str:
    return (_state_problem(one.state, step) or _weights_problem(one.files)
            or _ranks_problem(one.files, ranks))


def _state_problem(state: StateText | None, step: int) -> str:
    if state is None:
        return "no trainer_state.json: cut off mid-save"
    if not state.whole:
        return _big_state_problem(state, step)
    text = state.head
    if not text.strip():
        return "trainer_state.json is empty: cut off mid-save"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        # A JSON object ends with `}`: text that stops anywhere else was cut short.
        if not text.rstrip().endswith("}"):
            return "trainer_state.json truncated"
        return f"trainer_state.json is not JSON (line {exc.lineno} column {exc.colno})"
    except (ValueError, RecursionError):  # nested past the parser's depth, or bad numbers
        return "trainer_state.json is not JSON"
    said = data.get("global_step") if isinstance(data, dict) else None
    if isinstance(said, bool) or not isinstance(said, int):
        return "trainer_state.json has no global_step"
    return "" if said == step else f"global_step {said} ≠ {step}"


def _big_state_problem(state: StateText, step: int) -> str:
    m = _TOP_STEP.search(state.head)
    ends = state.tail.rstrip(" \t\r\n")
    if not state.head.startswith("{") or m is None or not ends.endswith("\n}"):
        if state.head.startswith("{") and m is not None:
            return "trainer_state.json truncated"
        return f"trainer_state.json cannot be checked ({state.size} bytes, not as transformers writes it)"
    said = int(m[1])
    return "" if said == step else f"global_step {said} ≠ {step}"


def _weights_problem(files: Mapping[str, bool]) -> str:
    if any(files.get(name) for name in _SINGLE_WEIGHTS):
        return ""
    for index_name, shard in _SHARDED:
        if not files.get(index_name):
            continue
        have: dict[int, set[int]] = {}
        for name, full in files.items():
            if full and (m := shard.fullmatch(name)):
                have.setdefault(int(m[2]), set()).add(int(m[1]))
        if not have:
            return f"weights incomplete: no shard beside {index_name}"
        total = max(have)
        missing = next((k for k in range(1, total + 1) if k not in have[total]), None)
        if missing is not None:
            return f"weights incomplete: shard {missing} of {total} missing"
        return ""
    return "no weights"


def _ranks_problem(files: Mapping[str, bool], ranks: int) -> str:
    present = {int(m[1]) for name, full in files.items() if full and (m := _RANK.fullmatch(name))}
    if not present and not any(_RANK.fullmatch(name) for name in files):
        return ""  # one process (`rng_state.pth`) or no RNG state: nothing to check
    missing = next((k for k in range(ranks) if k not in present), None)
    if missing is None:
        return ""
    return f"rng_state_{missing}.pth missing ({ranks} ranks)"


def parse_listing(out: str, marker: str) -> list[Listing]:
    """What `host/checkpoints.sh` printed, as listings; lines it cannot read are ignored.

    The format: `ck<TAB>PATH`, then `f<TAB>NAME<TAB>1|0` per file (1: non-empty), then
    for a trainer_state.json `ts<TAB>SIZE<TAB>whole|head`, its text (all of it, or the
    head), a newline and `marker` on a line; for `head` the tail and `marker` again.
    `marker` is a nonce the caller chose, so no file's text can end a block early.
    """
    listings: list[Listing] = []
    path: str | None = None
    files: dict[str, bool] = {}
    state: StateText | None = None
    end = f"\n{marker}\n"

    def flush() -> None:
        if path is not None:
            listings.append(Listing(path, dict(files), state))

    rest = out
    while rest:
        line, nl, rest = rest.partition("\n")
        if not nl and not line:
            break
        kind, _, value = line.partition("\t")
        if kind == "ck":
            flush()
            path, files, state = value, {}, None
        elif kind == "f" and path is not None:
            name, _, full = value.partition("\t")
            files[name] = full == "1"
        elif kind == "ts" and path is not None:
            size_word, _, how = value.partition("\t")
            size = int(size_word) if size_word.isdigit() and len(size_word) < 19 else 0
            head, found, rest = rest.partition(end)
            tail = ""
            if found and how == "head":
                tail, found, rest = rest.partition(end)
            if not found:
                path = None  # the answer was cut short: judge nothing from half a file
                break
            state = StateText(size, head, tail, whole=how != "head")
    flush()
    return listings


def incomplete_note(checkpoints: Sequence[Checkpoint], path: str) -> str:
    """What to say before fetching `path` when it is an incomplete checkpoint ("" when it
    is not one): why, and which complete one to take instead."""
    mine = next((c for c in checkpoints if c.path == path.strip("/")), None)
    if mine is None or mine.complete:
        return ""
    newest = newest_complete(checkpoints).checkpoint
    instead = (f"the newest complete one is {newest.path}" if newest is not None
               else "the run has no complete checkpoint")
    return f"{mine.path} is incomplete ({mine.why}); {instead}"
