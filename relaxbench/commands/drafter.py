"""``relaxbench drafter train eagle3|mtp``: train a small draft head for a target on text the package ships.

The data: every string of the offline JSONL files under ``tasks/`` (and ``tests/data/`` in a source checkout) —
prompts, questions, reference answers — tokenized with the target's tokenizer, plus, when ``--self-distill-tokens``
is above zero and time allows, each of them continued by the target's own greedy text (EAGLE's regenerated data). The
training itself is ``decoding.drafters.head_training``; the head is saved in speculators' layout with a
``card.json`` (data, steps, loss, held-out acceptance), ready for ``--draft eagle3|mtp --drafter-knob head=OUT``;
without ``--out`` it is cached for the target (``$RELAXBENCH_CACHE/heads/TARGET/KIND``), where ``head=trained`` — the
``drafters`` suite's heads — finds it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from relaxbench.commands.args import add_runtime_args, count, finite_float, positive_int, runtime_from_args

def register(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser("drafter", help="draft heads: train an EAGLE-3 or MTP head for a target")
    dsub = d.add_subparsers(dest="drafter_command", required=True, parser_class=type(d))
    t = dsub.add_parser("train", help="train a small EAGLE-3 or MTP head (speculators' layout) for a target")
    t.add_argument("kind", choices=("eagle3", "mtp"), help="the head to train")
    t.add_argument("--target", required=True, help="local dir, packaged alias or hub id")
    t.add_argument("--out", default=None,
                   help="folder for config.json, model.safetensors and card.json (default: the model cache, where "
                        "--drafter-knob head=trained finds it)")
    t.add_argument("--steps", type=positive_int, default=200,
                   help="optimizer steps, each on whole sequences packed up to --batch-tokens pairs "
                        "(default: %(default)s)")
    t.add_argument("--batch-tokens", type=positive_int, default=512,
                   help="pairs per optimizer step (default: %(default)s)")
    t.add_argument("--unroll", type=positive_int, default=1,
                   help="chained steps trained per pair: EAGLE-3's training-time test, the head fed its own outputs "
                        "as at drafting (1: teacher-forced only; default: %(default)s)")
    t.add_argument("--no-warm-start", dest="warm_start", action="store_false",
                   help="eagle3: initialise the head's lm_head and norm at random instead of from the target's "
                        "output rows and final norm")
    t.add_argument("--max-minutes", type=finite_float, default=None,
                   help="the whole command's minutes: self-distillation (at most half), the target's features, then "
                        "training for what is left (at least one step) but the held-out evaluation's share")
    t.add_argument("--lr", type=finite_float, default=3e-4, help="AdamW learning rate (default: %(default)s)")
    t.add_argument("--seed", type=count, default=0)
    t.add_argument("--draft-vocab", type=positive_int, default=32000,
                   help="eagle3: size of the draft vocabulary, the data's most frequent tokens (default: %(default)s)")
    t.add_argument("--self-distill-tokens", type=count, default=64,
                   help="greedy tokens of the target's own continuation appended to each text (0: none; "
                        "default: %(default)s)")
    t.add_argument("--text", action="append", default=[], metavar="PATH",
                   help="more training text, not self-distilled: a file or folder (.jsonl rows' strings; .py, .txt, "
                        ".md, .rst in pieces of about 2,000 characters), or 'stdlib' for this Python's standard "
                        "library source (repeatable)")
    t.add_argument("--text-limit", type=positive_int, default=None,
                   help="at most N pieces of --text, drawn at random (default: all)")
    t.add_argument("--max-sequence-tokens", type=positive_int, default=512,
                   help="cut each training sequence to N tokens (default: %(default)s)")
    add_runtime_args(t)
    t.set_defaults(handler=run_train)


def shipped_texts() -> list[str]:
    """Every string field of the shipped offline JSONL files."""
    from relaxbench.validation import PROJECT_ROOT, builtin_dir

    folders = [builtin_dir("tasks"), PROJECT_ROOT / "tests" / "data"]
    return [text for folder in folders for file in (sorted(folder.rglob("*.jsonl")) if folder.is_dir() else [])
            for text in jsonl_strings(file)]


def jsonl_strings(file: Path) -> list[str]:
    """Every string field (and string in a list field) of a JSONL file's rows; lines that are no JSON object are
    skipped."""
    texts: list[str] = []
    for line in file.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            for value in row.values():
                for text in value if isinstance(value, list) else [value]:
                    if isinstance(text, str) and len(text.strip()) > 1:
                        texts.append(text)
    return texts


TEXT_SUFFIXES = (".jsonl", ".py", ".txt", ".md", ".rst")
CHUNK_CHARS = 2000  # a --text file is cut at line ends into pieces of about this size (~500 tokens)


STDLIB = "stdlib"  # --text stdlib: this Python's standard library source (./stdlib for a folder of that name)


def stdlib_sources() -> list[Path]:
    """The ``.py`` files of the running Python's standard library, without its tests and installed packages: code
    every Python ships, in-domain text for a code target."""
    import sysconfig

    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "dist-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__"}
    return sorted(f for f in root.rglob("*.py") if not skip & set(f.relative_to(root).parts[:-1]))


def extra_texts(paths: list[str], limit: int | None, seed: int) -> list[str]:
    """The ``--text`` training text: files and folders (their files ending in ``TEXT_SUFFIXES``, recursively, or
    ``stdlib``: ``stdlib_sources``); a
    JSONL file gives its rows' strings, any other file its text in pieces of about ``CHUNK_CHARS`` cut at line ends.
    With ``limit``, that many pieces drawn at random (``seed``) from all of them."""
    import random

    from relaxbench.errors import ConfigError

    files: list[Path] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if raw == STDLIB:
            files.extend(stdlib_sources())
        elif path.is_dir():
            files.extend(sorted(f for f in path.rglob("*") if f.is_file() and f.suffix in TEXT_SUFFIXES))
        elif path.is_file():
            files.append(path)
        else:
            raise ConfigError(f"--text {raw}: no such file or folder")
    pieces: list[str] = []
    for file in files:
        if file.suffix == ".jsonl":
            pieces.extend(jsonl_strings(file))
            continue
        piece = ""
        for line in file.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True):
            if piece and len(piece) + len(line) > CHUNK_CHARS:
                pieces.append(piece)
                piece = ""
            piece += line
        if len(piece.strip()) > 1:
            pieces.append(piece)
    if limit is not None and len(pieces) > limit:
        pieces = random.Random(seed).sample(pieces, limit)
    return pieces


def training_sequences(target, texts: list[str], distill: int, max_tokens: int,
                       deadline: float | None, progress: Callable[[str], None] = print, batch: int = 16,
                       known: dict[str, list[int]] | None = None) -> tuple[list[list[int]], int]:
    """Token sequences: each text, and each text continued by the target's greedy response when ``distill`` > 0
    (EAGLE's regenerated data: what the head must predict is the target's own text), generated ``batch`` texts at a
    time (left-padded, shortest first) until half the time budget is spent, with a progress line per tenth. Also
    returns how many tokens came from the target. ``known`` maps a text's ``seed_key`` to its response from an earlier
    run (the cache); the responses generated now are added to it."""
    import torch

    from relaxbench.ui import clock

    known = {} if known is None else known
    tokenizer, sequences, generated = target.tokenizer, [], 0
    encoded = [tokenizer(text, add_special_tokens=False)["input_ids"][:max_tokens] for text in texts]
    sequences.extend(ids for ids in encoded)
    if not distill:
        return sequences, 0
    unique = {seed_key(ids): ids for ids in encoded if len(ids) >= 2}  # a text shipped twice is continued once
    reused = 0
    for key, ids in unique.items():
        if key in known:
            sequences.append((ids + known[key])[:max_tokens])
            generated += len(known[key])
            reused += 1
    config = target.model.config
    pad = config.pad_token_id if config.pad_token_id is not None else (tokenizer.pad_token_id or 0)
    eos = {config.eos_token_id} if isinstance(config.eos_token_id, int) else set(config.eos_token_id or ())
    seeds = sorted((ids for key, ids in unique.items() if key not in known), key=len)
    if reused:
        progress(f"self-distilled text from the cache: {reused} texts ({generated} tokens)")
    batches = [seeds[i: i + batch] for i in range(0, len(seeds), batch)]
    start, done, every = time.monotonic(), 0, max(1, len(batches) // 10)
    for number, group in enumerate(batches, 1):
        if deadline is not None and time.monotonic() >= deadline:
            break
        width = max(len(ids) for ids in group)
        ids = torch.tensor([[pad] * (width - len(x)) + x for x in group], device=target.device)
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in group], device=target.device)
        with torch.no_grad():
            out = target.model.generate(ids, attention_mask=mask, max_new_tokens=distill, do_sample=False,
                                        pad_token_id=pad)
        for seed, row in zip(group, out[:, width:].tolist()):
            response = []
            for token in row:
                response.append(token)
                if token in eos:
                    break
            sequences.append((seed + response)[:max_tokens])
            generated += len(response)
            known[seed_key(seed)] = response
        done += len(group)
        if number % every == 0 or number == len(batches):
            elapsed = time.monotonic() - start
            eta = elapsed / done * (len(seeds) - done)
            if deadline is not None:
                eta = min(eta, max(0.0, deadline - time.monotonic()))
            progress(f"self-distilling {done}/{len(seeds)} texts ({generated} tokens)  elapsed "
                     f"{clock(elapsed)}  eta {clock(eta)}")
    return sequences, generated


def seed_key(ids: list[int]) -> str:
    """A text's key in the self-distillation cache: its token ids."""
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]


def distilled_cache(target: Any, distill: int) -> Path:
    """Where a target's greedy continuations of the shipped texts are kept between runs (``drafter train`` of a
    second head, or a longer run, reuses and extends them): under the target's heads folder, by dtype and length."""
    from relaxbench.paths import cache_root, target_key

    dtype = str(target.dtype).removeprefix("torch.")
    return cache_root() / "heads" / target_key(target.name) / f"self-distilled-{dtype}-{distill}.json"


def run_train(args: argparse.Namespace) -> int:
    from relaxbench.paths import check_can_write

    if args.out is not None:
        check_can_write(args.out, "--out", folder=True)
    extra = extra_texts(args.text, args.text_limit, args.seed)  # a missing path fails here, before torch loads
    device = runtime_from_args(args)

    from relaxbench.decoding.drafters.head_training import TEACHER_TOP, TrainSettings, save, train
    from relaxbench.models import load_model
    from relaxbench.paths import trained_head_dir
    from relaxbench.ui import console

    out = console(stderr=True)
    start = time.monotonic()
    target = load_model(args.target, dtype=args.dtype, device=device, quiet=False)
    out_dir = Path(args.out) if args.out is not None else trained_head_dir(args.target, args.kind)
    if args.out is None:
        check_can_write(out_dir, "the model cache ($RELAXBENCH_CACHE)", folder=True)
    budget = None if args.max_minutes is None else start + 30 * args.max_minutes  # half for the data
    texts = shipped_texts()
    cached = distilled_cache(target, args.self_distill_tokens)
    known = json.loads(cached.read_text()) if cached.is_file() else {}
    sequences, generated = training_sequences(target, texts, args.self_distill_tokens, args.max_sequence_tokens,
                                              budget, lambda line: out.print(line, markup=False, highlight=False),
                                              known=known)
    sequences += [target.tokenizer(text, add_special_tokens=False)["input_ids"][: args.max_sequence_tokens]
                  for text in extra]
    if args.self_distill_tokens and known:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(known))
    left = None if args.max_minutes is None else max(0.05, args.max_minutes - (time.monotonic() - start) / 60)
    settings = TrainSettings(args.kind, steps=args.steps, max_minutes=left, lr=args.lr, seed=args.seed,
                             draft_vocab=args.draft_vocab, batch_tokens=args.batch_tokens,
                             warm_start=args.warm_start, unroll=args.unroll)
    head, layer, record = train(target, sequences, settings,
                                lambda line: out.print(line, markup=False, highlight=False))
    card = {**record, "target": args.target, "trained_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "data": {"source": "strings of the shipped JSONL files under tasks/ and tests/data/"
                               + (f", and {len(extra)} pieces of --text {', '.join(args.text)}" if extra else ""),
                     "texts": len(texts) + len(extra), "sequences": len(sequences), "self_distilled_tokens": generated,
                     "self_distill_tokens_per_text": args.self_distill_tokens},
            "recipe": "soft cross-entropy to the frozen target's next-token distribution (its top "
                      f"{TEACHER_TOP}, renormalised) from its features, over {args.unroll} chained step(s) "
                      f"(training-time test), {args.batch_tokens} pairs per step"
                      f"{', lm_head and norm from the target' if args.warm_start and args.kind == 'eagle3' else ''} "
                      "(relaxbench/decoding/drafters/head_training.py)"}
    path = save(head, args.kind, layer, target, out_dir, card)
    out.print(f"saved {args.kind} head to {path} (held-out acceptance {record['heldout_acceptance']:.3f}, "
              f"{record['steps']} steps); draft with it: --draft {args.kind} --drafter-knob "
              f"head={'trained' if args.out is None else path}", markup=False, highlight=False, soft_wrap=True)
    return 0
