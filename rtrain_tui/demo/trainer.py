"""The demo trainer: a character bigram model, trained for real on the CPU.

Small enough to run anywhere, honest enough to show what a fine-tune looks like: it reads
the dataset (JSONL with a "text" field, or plain lines), learns next-character
probabilities by gradient descent, logs like a Hugging Face Trainer (its header, a tqdm
bar redrawn with `\\r` on stderr, `{'loss': ...}` dicts without a step on stdout every
`logging_steps`, an eval dict every `eval_steps`, the `train_runtime` summary), saves `checkpoint-N/` every `save_steps`, writes
`lora_model/` (adapter_config.json + adapter_model.safetensors) at the end, and on
SIGTERM saves a checkpoint and exits 143, as a real trainer's signal handler would.
A checkpoint holds the files a Trainer's holds, written in its order (`save_checkpoint`),
so the "newest complete checkpoint" rule (core/runs/checkpoints.py) judges it as it
would a real one.

Config (flat `key: value` lines in config.yaml): max_steps, step_seconds,
learning_rate, batch_size, save_steps, logging_steps, eval_steps, seed, and
resume_from_checkpoint (a checkpoint's path, as `rtrain-tui resume` writes it: its weights,
step and log history are taken up, and the bar goes on from its step).

The dataset is streamed, never loaded: its memory stays bounded whatever its size (a
300 MB JSONL read whole, as a list of character pairs, grew the process to 17 GB). The
vocabulary comes from its first `VOCAB_CHARS` characters (a character first seen later
shares one catch-all slot), and each batch is drawn at random from a shuffle buffer of
`BUFFER_PAIRS` pairs refilled from the file as it is read, cycling at its end, as a
streaming data loader does.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import signal
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def read_config(path: str) -> dict[str, str]:
    cfg = {}
    for line in Path(path).read_text().splitlines():
        key, sep, value = line.partition(":")
        if sep and not key.strip().startswith("#"):
            cfg[key.strip()] = value.strip().strip("'\"")
    return cfg


VOCAB_CHARS = 1 << 20  # characters read for the vocabulary
BUFFER_PAIRS = 1 << 15  # the shuffle buffer batches are drawn from
MAX_LINE = 1 << 16  # characters of a line read at once: a file without newlines is bounded too
HELD_OUT = 4096  # at most this many pairs for the eval loss
FALLBACK = "the quick brown fox jumps over the lazy dog"


def iter_texts(path: str | None) -> Iterator[str]:
    """The dataset's texts, one at a time: JSONL with a "text" field, or plain lines."""
    if path is None:
        yield FALLBACK
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        while line := f.readline(MAX_LINE):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                yield line
                continue
            yield str(record.get("text", record)) if isinstance(record, dict) else str(record)


def iter_chars(path: str | None) -> Iterator[str]:
    """The texts joined by newlines, a character at a time, as one corpus string was."""
    first = True
    for text in iter_texts(path):
        if not first:
            yield "\n"
        first = False
        yield from text


def count_examples(path: str | None) -> int:
    """Lines in the dataset, counted in 1 MiB blocks (the header's `Num examples`)."""
    if path is None:
        return 1
    lines = 0
    last = b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            lines += block.count(b"\n")
            last = block[-1:]
    return lines + (last != b"\n")


def vocabulary(path: str | None) -> tuple[list[str], int]:
    """The characters of the dataset's first VOCAB_CHARS, sorted, with a catch-all slot
    when the file goes on past them; and how many characters were read."""
    seen: set[str] = set()
    read = 0
    for read, ch in enumerate(iter_chars(path), 1):
        seen.add(ch)
        if read >= VOCAB_CHARS:
            seen.add("\ufffd")  # for a character first seen further on
            break
    return sorted(seen), read


def pair_stream(path: str | None, index: dict[str, int]) -> Iterator[tuple[int, int]]:
    """(character, next character) over the corpus, from its start again at its end."""
    unknown = index.get("\ufffd", 0)
    while True:
        prev = None
        for ch in iter_chars(path):
            i = index.get(ch, unknown)
            if prev is not None:
                yield prev, i
            prev = i
        if prev is None:
            return  # an empty dataset: nothing to cycle over


class ShuffleBuffer:
    """Random draws from a bounded window of a stream, each replaced by the stream's next."""

    def __init__(self, stream: Iterator[tuple[int, int]], size: int, rng: random.Random) -> None:
        self.stream, self.rng = stream, rng
        self.buffer = list(itertools.islice(stream, size))

    def draw(self) -> tuple[int, int]:
        j = self.rng.randrange(len(self.buffer))
        pair = self.buffer[j]
        self.buffer[j] = next(self.stream, pair)
        return pair


class Bigram:
    def __init__(self, vocab: list[str]) -> None:
        self.vocab = vocab
        self.index = {c: i for i, c in enumerate(vocab)}
        n = len(vocab)
        self.logits = [[0.0] * n for _ in range(n)]

    def probs(self, row: int) -> list[float]:
        logits = self.logits[row]
        top = max(logits)
        exps = [math.exp(x - top) for x in logits]
        total = sum(exps)
        return [e / total for e in exps]

    def step(self, pairs: list[tuple[int, int]], lr: float) -> tuple[float, float]:
        """One SGD step of cross-entropy; returns (loss, gradient norm)."""
        loss = 0.0
        grads: dict[int, list[float]] = {}
        for a, b in pairs:
            p = self.probs(a)
            loss -= math.log(max(p[b], 1e-12))
            g = grads.setdefault(a, [0.0] * len(p))
            for j, pj in enumerate(p):
                g[j] += pj - (1.0 if j == b else 0.0)
        norm = math.sqrt(sum(x * x for g in grads.values() for x in g)) / len(pairs)
        for a, g in grads.items():
            row = self.logits[a]
            for j, gj in enumerate(g):
                row[j] -= lr * gj / len(pairs)
        return loss / len(pairs), norm

    def sample(self, start: str, length: int, rng: random.Random) -> str:
        out = start
        row = self.index.get(start, 0)
        for _ in range(length):
            row = rng.choices(range(len(self.vocab)), weights=self.probs(row))[0]
            out += self.vocab[row]
        return out

    def load(self, directory: Path) -> None:
        """The logits `save` wrote (a checkpoint of the same dataset: the same vocabulary)."""
        raw = (directory / "adapter_model.safetensors").read_bytes()
        size = struct.unpack("<Q", raw[:8])[0]
        n = len(self.vocab)
        values = struct.unpack(f"<{n * n}f", raw[8 + size:8 + size + 4 * n * n])
        self.logits = [list(values[i * n:(i + 1) * n]) for i in range(n)]

    def save(self, directory: Path, meta: dict[str, object]) -> None:
        """adapter_model.safetensors (one float32 tensor) + adapter_config.json."""
        directory.mkdir(parents=True, exist_ok=True)
        n = len(self.vocab)
        data = struct.pack(f"<{n * n}f", *(x for row in self.logits for x in row))
        header = json.dumps({"bigram.logits": {"dtype": "F32", "shape": [n, n],
                                               "data_offsets": [0, len(data)]}}).encode()
        with open(directory / "adapter_model.safetensors", "wb") as f:
            f.write(struct.pack("<Q", len(header)) + header + data)
        (directory / "adapter_config.json").write_text(
            json.dumps({"peft_type": "DEMO_BIGRAM", "vocab": "".join(self.vocab), **meta}, indent=2) + "\n")


def save_checkpoint(directory: Path, model: Bigram, step: int, state: dict[str, object],
                    args: dict[str, str]) -> None:
    """`checkpoint-N/` in the order transformers' Trainer writes one: the model (weights,
    its config), training args, optimizer, scheduler, RNG state, and `trainer_state.json`
    last (with `global_step`, as `json.dumps(indent=2, sort_keys=True)`), so a save cut
    short lacks it. The optimizer and RNG files are stand-ins (plain SGD keeps no state)."""
    model.save(directory, {"step": step})
    for name, body in (("training_args.bin", args), ("optimizer.pt", {"sgd": True}),
                       ("scheduler.pt", {"last_step": step}), ("rng_state.pth", {"python": step})):
        (directory / name).write_text(json.dumps(body) + "\n")
    (directory / "trainer_state.json").write_text(
        json.dumps({**state, "global_step": step}, indent=2, sort_keys=True) + "\n")


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


def progress_bar(step: int, total: int, began: float, first: int = 0) -> str:
    """A tqdm bar as tqdm draws it (`\\r` first, no newline): ` 37%|███▋      | 45/120 [...]`.
    `first`: the step this attempt began at (a resumed run's bar starts there)."""
    frac = step / total
    filled = int(frac * 10)
    elapsed = time.monotonic() - began
    rate = (step - first) / elapsed if elapsed and step > first else 0.0
    if step == first:
        return (f"\r{int(frac * 100):3d}%|{'█' * filled}{' ' * (10 - filled)}| {step}/{total} "
                "[00:00<?, ?it/s]")
    left = (total - step) / rate if rate else 0.0
    speed = f"{rate:.2f}it/s" if rate >= 1 else f"{1 / rate:.2f}s/it"
    return (f"\r{int(frac * 100):3d}%|{'█' * filled}{' ' * (10 - filled)}| {step}/{total} "
            f"[{_clock(elapsed)}<{_clock(left)}, {speed}]")


def trainer_dict(values: dict[str, float]) -> str:
    """A Trainer log dict as transformers prints it: no `step` key (it lives in the bar)."""
    return "{" + ", ".join(f"'{k}': {v}" for k, v in values.items()) + "}"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "llm" or "--config" not in args:
        print("usage: python -m praisonai_train llm [DATASET] --config CONFIG", file=sys.stderr)
        return 2
    i = args.index("--config")
    cfg = read_config(args[i + 1])
    positional = args[1:i]
    dataset = positional[0] if positional else None
    max_steps = int(cfg.get("max_steps", 120))
    pause = float(cfg.get("step_seconds", 0.25))
    lr = float(cfg.get("learning_rate", 10.0))
    batch = int(cfg.get("batch_size", 32))
    save_steps = int(cfg.get("save_steps", 50))
    rng = random.Random(int(cfg.get("seed", 0)))

    vocab, prefix_chars = vocabulary(dataset)
    model = Bigram(vocab)
    # A held-out tenth (of what the vocabulary was read from) for the eval loss, as a
    # real run's eval split; an epoch is about one pass over the file's characters.
    held_out = list(itertools.islice(pair_stream(dataset, model.index),
                                     max(1, min(HELD_OUT, (prefix_chars - 1) // 10))))
    corpus_pairs = max(os.path.getsize(dataset) if dataset else len(FALLBACK), 1)
    batches = ShuffleBuffer(pair_stream(dataset, model.index), BUFFER_PAIRS, rng)
    logging_steps = int(cfg.get("logging_steps", 5))
    eval_steps = int(cfg.get("eval_steps", 20))
    # What transformers' Trainer prints before training (stdout).
    print(f"***** Running training *****\n  Num examples = {count_examples(dataset):,}\n  Num Epochs = 1\n"
          f"  Instantaneous batch size per device = {batch}\n"
          f"  Total optimization steps = {max_steps:,}\n"
          f"  Number of trainable parameters = {len(vocab) ** 2:,}", flush=True)

    step = 0
    stopping = False
    history: list[dict[str, float]] = []  # trainer_state.json's log_history
    if resume := cfg.get("resume_from_checkpoint"):
        saved = json.loads((Path(resume) / "trainer_state.json").read_text())
        model.load(Path(resume))
        step, history = int(saved["global_step"]), list(saved.get("log_history", []))
        # What transformers' Trainer says when it resumes.
        print("  Continuing training from checkpoint, will skip to saved global_step\n"
              f"  Continuing training from global step {step}", flush=True)

    def on_term(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)

    def trainer_state() -> dict[str, object]:
        return {"epoch": round(step * batch / corpus_pairs, 2), "log_history": list(history),
                "logging_steps": logging_steps, "max_steps": max_steps, "save_steps": save_steps,
                "train_batch_size": batch}
    began = time.monotonic()
    first = step  # the bar's rate counts this attempt's steps only
    losses = []
    # tqdm draws on stderr; the dicts go to stdout. The log merges both, so a dict
    # lands glued to the end of the bar line, as in a real run's train.log.
    sys.stderr.write(progress_bar(step, max_steps, began, first))
    sys.stderr.flush()
    while step < max_steps and not stopping:
        step += 1
        # a linear decay of the learning rate, as the Trainer's default scheduler
        step_lr = lr * (1 - (step - 1) / max_steps)
        loss, grad_norm = model.step([batches.draw() for _ in range(batch)], step_lr)
        losses.append(loss)
        sys.stderr.write(progress_bar(step, max_steps, began, first))
        sys.stderr.flush()
        epoch = round(step * batch / corpus_pairs, 2)
        if step % logging_steps == 0 or step == max_steps:
            logged = {"loss": round(loss, 4), "grad_norm": round(grad_norm, 4),
                      "learning_rate": round(step_lr, 6), "epoch": epoch}
            history.append({**logged, "step": step})
            print(trainer_dict(logged), flush=True)
        if step % eval_steps == 0 or step == max_steps:
            eval_loss = sum(-math.log(max(model.probs(a)[b], 1e-12)) for a, b in held_out) / len(held_out)
            print(trainer_dict({"eval_loss": round(eval_loss, 4), "eval_runtime": 0.01,
                                "eval_samples_per_second": 100.0, "eval_steps_per_second": 12.5,
                                "epoch": epoch}), flush=True)
        if step % save_steps == 0:
            save_checkpoint(Path(f"checkpoint-{step}"), model, step, trainer_state(), cfg)
            print(f"Saving model checkpoint to checkpoint-{step}", flush=True)
        time.sleep(pause)
    if stopping:
        save_checkpoint(Path(f"checkpoint-{step}"), model, step, trainer_state(), cfg)
        print(f"\nReceived SIGTERM: saved checkpoint-{step}, exiting.", flush=True)
        return 128 + signal.SIGTERM
    runtime = time.monotonic() - began
    sys.stderr.write("\n")
    print(trainer_dict({"train_runtime": round(runtime, 4),
                        "train_samples_per_second": round((step - first) * batch / runtime, 3),
                        "train_steps_per_second": round((step - first) / runtime, 3),
                        "train_loss": round(sum(losses) / max(len(losses), 1), 4),
                        "epoch": round(step * batch / corpus_pairs, 2)}), flush=True)
    model.save(Path("lora_model"), {"steps": step, "final_loss": round(losses[-1], 4) if losses else None})
    print(f"Sample: {model.sample(vocab[0] if vocab[0] != chr(10) else 't', 60, rng)!r}", flush=True)
    print("Saved adapter to lora_model/", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
