"""The demo trainer: a character bigram model, trained for real on the CPU.

Small enough to run anywhere, honest enough to show what a fine-tune looks like: it reads
the dataset (JSONL with a "text" field, or plain lines), learns next-character
probabilities by gradient descent, logs like a Hugging Face trainer (a `\\r` progress bar
and `{'loss': ...}` lines), saves `checkpoint-N/` every `save_steps`, writes
`lora_model/` (adapter_config.json + adapter_model.safetensors) at the end, and on
SIGTERM saves a checkpoint and exits 143, as a real trainer's signal handler would.

Config (flat `key: value` lines in config.yaml): max_steps, step_seconds,
learning_rate, batch_size, save_steps, seed.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import struct
import sys
import time
from pathlib import Path


def read_config(path: str) -> dict[str, str]:
    cfg = {}
    for line in Path(path).read_text().splitlines():
        key, sep, value = line.partition(":")
        if sep and not key.strip().startswith("#"):
            cfg[key.strip()] = value.strip().strip("'\"")
    return cfg


def read_texts(path: str | None) -> list[str]:
    if path is None:
        return ["the quick brown fox jumps over the lazy dog"]
    texts = []
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
            texts.append(str(record.get("text", record)) if isinstance(record, dict) else str(record))
        except json.JSONDecodeError:
            texts.append(line)
    return texts


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


def progress_bar(step: int, total: int, began: float) -> str:
    frac = step / total
    filled = int(frac * 20)
    elapsed = time.monotonic() - began
    rate = step / elapsed if elapsed else 0.0
    left = (total - step) / rate if rate else 0.0
    return (f"{int(frac * 100):3d}%|{'█' * filled}{' ' * (20 - filled)}| {step}/{total} "
            f"[{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}<{int(left) // 60:02d}:{int(left) % 60:02d}, "
            f"{rate:.2f}it/s]")


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

    texts = read_texts(dataset)
    corpus = "\n".join(texts)
    vocab = sorted(set(corpus))
    model = Bigram(vocab)
    pairs = [(model.index[a], model.index[b]) for a, b in zip(corpus, corpus[1:])]
    print(f"***** Running training (demo bigram, CPU) *****\n  Num examples = {len(texts)}\n"
          f"  Vocabulary = {len(vocab)} characters\n  Total optimization steps = {max_steps}", flush=True)

    step = 0
    stopping = False

    def on_term(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    began = time.monotonic()
    losses = []
    while step < max_steps and not stopping:
        step += 1
        loss, grad_norm = model.step([rng.choice(pairs) for _ in range(batch)], lr)
        losses.append(loss)
        sys.stdout.write(progress_bar(step, max_steps, began) + "\r")
        if step % 5 == 0 or step == max_steps:
            print(f"{{'loss': {loss:.4f}, 'grad_norm': {grad_norm:.4f}, 'learning_rate': {lr}, "
                  f"'epoch': {step * batch / max(len(pairs), 1):.2f}, 'step': {step}}}", flush=True)
        if step % save_steps == 0:
            model.save(Path(f"checkpoint-{step}"), {"step": step})
            print(f"Saving model checkpoint to checkpoint-{step}", flush=True)
        time.sleep(pause)
    if stopping:
        model.save(Path(f"checkpoint-{step}"), {"step": step})
        print(f"\nReceived SIGTERM: saved checkpoint-{step}, exiting.", flush=True)
        return 128 + signal.SIGTERM
    runtime = time.monotonic() - began
    print(f"\n{{'train_runtime': {runtime:.1f}, 'train_loss': {sum(losses) / len(losses):.4f}, "
          f"'epoch': {step * batch / max(len(pairs), 1):.2f}}}", flush=True)
    model.save(Path("lora_model"), {"steps": step, "final_loss": round(losses[-1], 4)})
    print(f"Sample: {model.sample(vocab[0] if vocab[0] != chr(10) else 't', 60, rng)!r}", flush=True)
    print("Saved adapter to lora_model/", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
