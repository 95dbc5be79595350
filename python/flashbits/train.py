"""flashbits.train: does a kernel's rounding bias break training? (README "Training",
docs/TRAINING.md).

A small pre-LN GPT (nanoGPT's architecture, written here from its published description:
token and learned position embeddings, blocks of LayerNorm -> causal self-attention ->
residual and LayerNorm -> MLP(4x, GELU) -> residual, a final LayerNorm, the output head tied
to the token embedding) is trained on character-level text. Chosen layers run their
attention through a flashbits kernel model (``flashbits.torch``); the others run PyTorch's
fp32 math attention.

Fork design (as Qiu & Yao replayed batch indices): one shared checkpoint is trained in fp32
up to ``--fork-step``; from it, every arm (a kernel model with its variants and recipe) trains
``--steps`` more steps on the same batches in the same order for a given seed (the batch of
step t depends on (seed, t) only). Each (arm, seed) is its own run directory and can be its
own process (``--arm A --seed S``); ``merge`` joins them into ``summary.json``.

Per step and arm: loss and gradient norm; for each emulated layer on a fixed sample of rows
(batch entry 0, every head, ``--probe-rows`` rows in all, the same rows in each head; a count
not so divisible is refused): the tie rate (rows whose final max is
reached by two or more keys after the kernel's rounding), the signed error of O and of
delta = rowsum(dO*O) against the exact attention of the same rounded inputs, their running
sums, the same errors of the kernel's floor (the exact outputs rounded once where the kernel
keeps them: the format's share, which the mechanism's test sets apart), and the largest
singular values of W_Q and W_K. Weight snapshots give the deviation
from the control arm and between two control seeds (Golden et al.'s measure).

Step numbers: steps.csv's ``step`` (and the plots' x axis) counts from the initialisation, the
fork's steps included (``--fork-step`` + 1 .. ``--fork-step`` + ``--steps``); the snapshots,
checkpoints, ``--snapshot-every`` and summary.json's ``golden.step`` count forked steps
(1 .. ``--steps``); ``--stop-after N`` is N more forked steps per invocation.

Command line: ``python3 -m flashbits.train --help``. Bad input is one line and exit 2;
Ctrl-C writes a checkpoint and prints the command that resumes.
"""
from __future__ import annotations

import argparse
import dataclasses
from fractions import Fraction
import hashlib
import itertools
import json
import math
import os
import re
import shlex
import signal
import sys
import tempfile
import time

import numpy as np
import torch

from . import attention as _attention
from . import exact_attention as _exact_attention
from . import round as _round
from . import torch as _fbtorch

CONTROL = "fp32"
LOW_PRECISION = "bf16-autocast"  # the whole model trained under bf16 autocast (Golden's comparison)
# flashbits.torch's models that are no kernel and no arm (parse_arm refuses them).
NO_ARM_MODELS = {"fp64": "PyTorch's float64 math attention (a control of flashbits.torch)",
                 "exact": "the exact reference of flashbits.torch"}
DEFAULT_CORPUS_DIR = "/usr/share/games/fortunes"
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
# The most worker threads the kernel models take (the library's limit, api::kMaxJobs:
# flashbits.attention(threads=) refuses more); checked here before the fork trains.
MAX_THREADS = 1024


class UsageError(Exception):
    """Bad input: printed as one line, exit 2."""


# ---- configuration ----------------------------------------------------------------------------
@dataclasses.dataclass
class ModelConfig:
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 64

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


@dataclasses.dataclass
class StudyConfig:
    """What every run of one study shares (config.json); arms and seeds are per run."""
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    corpus: str = DEFAULT_CORPUS_DIR
    corpus_sha256: str = ""
    batch_size: int = 16
    fork_step: int = 500
    steps: int = 2000
    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.95
    weight_decay: float = 0.0
    clip: float = 1.0
    init_seed: int = 0
    emulate_layers: tuple = (1,)
    probe_rows: int = 16
    probe_every: int = 1
    probe_batch: str = "live"  # or "forced-ties" (forced_ties_batch)
    snapshot_every: int = 500
    # torch's CPU threads (--threads): its matmuls and reductions split their sums by thread
    # count, so the losses depend on it; recorded so that runs with other counts never mix.
    threads: int = 1

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["emulate_layers"] = list(self.emulate_layers)
        return d

    @staticmethod
    def from_json(d: dict) -> "StudyConfig":
        d = dict(d)
        d["model"] = ModelConfig(**d["model"])
        d["emulate_layers"] = tuple(d["emulate_layers"])
        d.setdefault("threads", None)  # a study written before --threads was recorded: not known
        return StudyConfig(**d)


PRESETS = {
    # The defaults (StudyConfig's: 4 layers, 4 heads, width 128, 64 tokens, batch 16, fork at
    # step 500, 2,000 forked steps). docs/TRAINING.md's runs are these with --batch-size 8.
    "study": {},
    # CI's smoke test: the whole driver in seconds.
    "smoke": {"model": ModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=32), "batch_size": 4,
              "fork_step": 10, "steps": 30, "probe_rows": 8, "snapshot_every": 10, "emulate_layers": (1,)},
}


# ---- the corpus -------------------------------------------------------------------------------
@dataclasses.dataclass
class Corpus:
    text_sha256: str
    vocab: str
    train: torch.Tensor  # int64 token ids
    val: torch.Tensor
    # Files of a corpus directory left out as fortune indexes and links (fortune_companions),
    # by name: said on the run's output and recorded in config.json.
    skipped: tuple = ()


def fortune_companions(directory: str, names) -> list:
    """The names among ``names`` (files of ``directory``) that Debian's fortunes package puts
    beside each text file NAME: NAME.dat, strfile's binary index of it, and NAME.u8, a link to
    it. Only where NAME itself is a file there: a NAME.dat or NAME.u8 with no NAME beside it
    is a file of its own, read as text (a binary one is then refused as not UTF-8)."""
    return sorted(n for n in names if n.endswith((".dat", ".u8"))
                  and os.path.isfile(os.path.join(directory, n.rsplit(".", 1)[0])))


def _corpus_files(path: str, skipped: list | None = None) -> list:
    """The files ``path`` names: itself, or a directory's files in name order without the
    fortune indexes and links (fortune_companions), whose names are appended to ``skipped``."""
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if os.path.isfile(os.path.join(path, n)))
        companions = fortune_companions(path, names)
        if skipped is not None:
            skipped.extend(companions)
        names = [n for n in names if n not in set(companions)]
        if not names:
            raise UsageError(f"corpus {path}: a directory with no text files")
        return [os.path.join(path, n) for n in names]
    if not os.path.exists(path):
        hint = " (install Debian's fortunes package, or give --corpus FILE)" if path == DEFAULT_CORPUS_DIR else ""
        raise UsageError(f"corpus {path}: no such file or directory{hint}")
    if not os.path.isfile(path):  # a FIFO with no writer would block in open() forever
        raise UsageError(f"corpus {path}: not a regular file or a directory")
    return [path]


def skipped_text(path: str, skipped) -> str:
    """The line that says which files of the corpus directory ``path`` were left out."""
    shown = ", ".join(skipped[:6]) + (f" and {len(skipped) - 6} more" if len(skipped) > 6 else "")
    return (f"corpus {path}: skipped {len(skipped)} fortune index and link file{'s' if len(skipped) != 1 else ''} "
            f"(NAME.dat, NAME.u8 beside a text file NAME; config.json lists them): {shown}")


def load_corpus(path: str, block_size: int, max_bytes: int = 256 << 20) -> Corpus:
    """Character-level text: the UTF-8 text of ``path`` (a file, or every file of a directory
    in name order but the fortune indexes and links, fortune_companions; joined by newlines),
    its sorted characters as the vocabulary,
    the first 90% for training and the rest for validation. UsageError when it cannot be
    read, is not UTF-8, or is too short for one training block in each part."""
    parts, skipped = [], []
    total = 0
    for f in _corpus_files(path, skipped):
        try:
            with open(f, "rb") as fh:
                raw = fh.read(max_bytes + 1 - total)
        except OSError as e:
            raise UsageError(f"corpus {f}: {e.strerror}") from None
        total += len(raw)
        if total > max_bytes:
            raise UsageError(f"corpus {path}: larger than {max_bytes >> 20} MiB")
        try:
            parts.append(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise UsageError(f"corpus {f}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    text = "\n".join(parts)
    if not text.strip():
        raise UsageError(f"corpus {path}: empty")
    vocab = "".join(sorted(set(text)))
    index = {c: i for i, c in enumerate(vocab)}
    ids = torch.tensor([index[c] for c in text], dtype=torch.int64)
    split = int(len(ids) * 0.9)
    need = block_size + 2
    if split < need or len(ids) - split < need:
        raise UsageError(f"corpus {path}: {len(text)} characters; at least {10 * need} are needed for "
                         f"block size {block_size} (the first 90% trains, the other 10% is set aside)")
    return Corpus(hashlib.sha256(text.encode("utf-8")).hexdigest(), vocab, ids[:split], ids[split:], tuple(skipped))


def batch_indices(stream: tuple, step: int, batch_size: int, n_tokens: int, block_size: int) -> np.ndarray:
    """Start offsets of the batch of ``step`` in ``stream``: a function of (stream, step) only,
    so every arm sees the same batches and a resumed run the same next ones."""
    rng = np.random.default_rng(list(stream) + [step])
    return rng.integers(0, n_tokens - block_size - 1, size=batch_size)


def get_batch(data: torch.Tensor, offsets: np.ndarray, block_size: int):
    x = torch.stack([data[i:i + block_size] for i in offsets])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in offsets])
    return x, y


# ---- the model --------------------------------------------------------------------------------
class CausalSelfAttention(torch.nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.c_attn = torch.nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = torch.nn.Linear(cfg.n_embd, cfg.n_embd)
        self.attention = None  # callable(q, k, v) -> o; set by the arm

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.cfg.n_head, self.cfg.head_dim).transpose(1, 2) for z in (q, k, v))
        o = self.attention(q, k, v)
        return self.c_proj(o.transpose(1, 2).contiguous().view(b, t, c))

    def w_q_w_k(self):
        c = self.cfg.n_embd
        w = self.c_attn.weight
        return w[:c], w[c:2 * c]


class Block(torch.nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_1 = torch.nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = torch.nn.LayerNorm(cfg.n_embd)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(cfg.n_embd, 4 * cfg.n_embd), torch.nn.GELU(),
                                       torch.nn.Linear(4 * cfg.n_embd, cfg.n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(torch.nn.Module):
    """Pre-LN decoder-only transformer (nanoGPT's layout), dropout 0, weights N(0, 0.02) with
    the residual projections scaled by 1/sqrt(2 n_layer), the head tied to the embedding."""

    def __init__(self, cfg: ModelConfig, vocab_size: int):
        super().__init__()
        self.cfg = cfg
        self.wte = torch.nn.Embedding(vocab_size, cfg.n_embd)
        self.wpe = torch.nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = torch.nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = torch.nn.LayerNorm(cfg.n_embd)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                torch.nn.init.zeros_(p)
            elif p.dim() == 2:
                std = 0.02 / math.sqrt(2 * cfg.n_layer) if name.endswith(("c_proj.weight", "mlp.2.weight")) else 0.02
                torch.nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for block in self.blocks:
            x = block(x)
        logits = torch.nn.functional.linear(self.ln_f(x), self.wte.weight)
        return torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


# ---- arms -------------------------------------------------------------------------------------
@dataclasses.dataclass
class Arm:
    """An arm: ``fp32`` (the control: PyTorch's fp32 math attention everywhere),
    ``bf16-autocast`` (the whole model under CPU bf16 autocast, attention included: low-
    precision training as Golden et al. compare it), or a flashbits kernel model with its
    variants, optionally followed by ``[recipe=FILE]`` or ``[STAGE=FORMAT,...]`` (a recipe
    written for it: ``fa-bf16acc[o_buffer_format=e8m5]``) and ``layers=all`` or
    ``layers=0+2`` (the layers this arm emulates, instead of the study's --emulate-layers;
    the mechanism metrics stay on the study's layers): ``pytorch-fa2-sm90[layers=all]``."""
    name: str
    model: str
    recipe: dict | None = None
    recipe_file: str | None = None
    layers: tuple | str | None = None  # the study's --emulate-layers unless the arm says [layers=...]
    # As given on the command line (its ';' kept), for messages; name has ',' for ';'.
    written: str | None = dataclasses.field(default=None, compare=False)

    def emulates(self, layer: int, cfg: "StudyConfig") -> bool:
        if not self.emulated:
            return False
        if self.layers is None:
            return layer in cfg.emulate_layers
        return self.layers == "all" or layer in self.layers

    @property
    def emulated(self) -> bool:
        return self.model not in (CONTROL, LOW_PRECISION)

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.=-]+", "_", self.name)


_ARM = re.compile(r"^([A-Za-z0-9_.:=,+-]+)(?:\[([^\]]*)\])?$")


def parse_arm(spec: str) -> Arm:
    """The arm ``spec`` as written on the command line (``;`` inside brackets standing for a
    comma); its errors quote it as written."""
    written = spec.strip()
    spec = written.replace(";", ",")
    m = _ARM.match(spec.strip())
    if not m:
        raise UsageError(f"arm '{written}': expected MODEL[+VARIANT...] or MODEL[recipe=FILE] or "
                         f"MODEL[STAGE=FORMAT,...]")
    model, options = m.group(1), m.group(2)
    if model in NO_ARM_MODELS:
        # flashbits.torch's other references: trained, they would run without the mechanism
        # probes every emulated arm takes (the op refuses threads, observe and trace for them),
        # and the study has one control, fp32.
        raise UsageError(f"arm '{written}': {model} is {NO_ARM_MODELS[model]}, not an arm; an arm is the "
                         f"control {CONTROL}, {LOW_PRECISION}, or a kernel model with a backward (flashbits models)")
    arm = Arm(spec.strip(), model, written=written)
    if options is None:
        return arm
    if not arm.emulated:
        raise UsageError(f"arm '{written}': {model} is not a kernel model; it takes no recipe")
    stages = {}
    seen = set()
    for item in filter(None, (s.strip() for s in options.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not value:
            raise UsageError(f"arm '{written}': '{item}': expected KEY=VALUE")
        if key in seen:  # else the last one would win silently
            raise UsageError(f"arm '{written}': '{key}' given twice")
        seen.add(key)
        if key == "recipe":
            arm.recipe_file = value
        elif key == "layers":
            if value == "all":
                arm.layers = "all"
            else:
                try:
                    arm.layers = tuple(int(x) for x in value.split("+"))
                except ValueError:
                    raise UsageError(f"arm '{written}': layers={value}: expected 'all' or N+M+...") from None
                twice = sorted({x for x in arm.layers if arm.layers.count(x) > 1})
                if twice:
                    raise UsageError(f"arm '{written}': layers={value}: {', '.join(map(str, twice))} named twice")
        else:
            stages[key] = value
    if arm.recipe_file and stages:
        raise UsageError(f"arm '{written}': give a recipe file or stages, not both")
    if stages:
        arm.recipe = {"name": spec.strip(), "stages": stages}
    return arm


def validate_arm(arm: Arm, cfg: StudyConfig, recipe_dir: str) -> Arm:
    """Resolve the arm's recipe and run its attention once on zeros of the study's shape, so
    that an unknown model, a bad recipe or a shape the model cannot run is refused before
    any training (UsageError with flashbits' message)."""
    if not arm.emulated:
        return arm
    if isinstance(arm.layers, tuple):
        for layer in arm.layers:
            if not 0 <= layer < cfg.model.n_layer:
                raise UsageError(f"arm '{arm.written or arm.name}': layer {layer} outside "
                                 f"0..{cfg.model.n_layer - 1}")
    if arm.recipe is not None:
        os.makedirs(recipe_dir, exist_ok=True)
        arm.recipe_file = os.path.join(recipe_dir, arm.slug + ".json")
        write_atomic(arm.recipe_file, json_bytes(arm.recipe))
    shape = (1, cfg.model.n_head, cfg.model.block_size, cfg.model.head_dim)
    z = torch.zeros(shape, requires_grad=True)
    try:
        formats = _fbtorch.model_formats(arm.model, None, arm.recipe_file)
        if not formats["backward"]:
            raise UsageError(f"arm '{arm.written or arm.name}': {formats['model']} has no backward modelled (a "
                             f"forward-only kernel model), and an arm trains through its attention's gradients; pick "
                             f"a kernel model with a backward")
        # A seed only where the arithmetic draws from one (the op refuses it elsewhere).
        o = _fbtorch.scaled_dot_product_attention(z, z, z, is_causal=True, model=arm.model, recipe=arm.recipe_file,
                                                  seed=0 if formats["seeded"] else None)
        o.sum().backward()
    except (ValueError, TypeError, RuntimeError) as e:
        message = str(e)
        if arm.recipe is not None:
            # The recipe file is the driver's own (a scratch file, or OUT/recipes/): the user
            # wrote the stages in the arm's brackets, which the arm's name already shows.
            # The "recipe: " that names the argument names nothing the user wrote here either.
            message = message.removeprefix("recipe: ")
            message = message.replace(f"{arm.recipe_file}: ", "").replace(arm.recipe_file, "the arm's stages")
        # An unknown model's list ends with flashbits.torch's controls; the arms are others.
        message = message.replace("; and the controls fp32, fp64, exact)",
                                  f"; and the arms {CONTROL} (the control) and {LOW_PRECISION})")
        raise UsageError(f"arm '{arm.written or arm.name}': {message}") from None
    return arm


# ---- measurements of one emulated layer --------------------------------------------------------
def sign_test_p(positives: int, negatives: int) -> float:
    """Two-sided exact binomial sign test (ties dropped): P(|K - n/2| >= |k - n/2|), K~B(n, 1/2)."""
    n = positives + negatives
    if n == 0:
        return 1.0
    k = min(positives, negatives)
    # Exact integers, then one division: 2.0 ** n overflows a float beyond n = 1023 steps.
    tail = sum(math.comb(n, i) for i in range(k + 1))
    return min(1.0, float(Fraction(2 * tail, 1 << n)))


def row_is_tied(trace: dict) -> bool | None:
    """The row's final max reached by two or more keys after the kernel's rounding: the tile
    that first set the final running max saw its max more than once. None (undetermined) when
    the row's scores were not finite: its running max or sum is then NaN or infinite (a NaN
    score leaves the max at -inf), and no key's score ties or fails to tie another's."""
    tiles = trace["tiles"]
    if not tiles:
        return False
    final = tiles[-1]["running_max"]
    if not (math.isfinite(final) and math.isfinite(tiles[-1]["running_sum"])):
        return None
    for tile in tiles:
        if tile["running_max"] == final:
            return tile["repeated_max"] > 0
    return False


def measure(q, k, v, d_o, fmt: str, scale: float, causal: bool, result, traces, rows: list, model: str,
            recipe=None) -> dict:
    """Signed errors of O (mean over the rows' features) and delta (mean over the rows) of a
    kernel run (``result`` of ``model`` with ``recipe``, with its backward) against the exact
    attention of the same rounded inputs (batch entry 0); the same of the kernel's floor (the
    exact outputs rounded once where the kernel keeps them, exact_attention(rounded_as=model)),
    whose error is the format's, not the kernel's; and the tie rate of the traced rows."""
    exact = _exact_attention(q[:1], k[:1], v[:1], do=d_o[:1], causal=causal, scale=scale, dtype=fmt)
    floor = _exact_attention(q[:1], k[:1], v[:1], do=d_o[:1], causal=causal, scale=scale, dtype=fmt,
                             rounded_as=model, recipe=recipe)
    o_err = [np.mean(result.o[0, h, r] - exact.o[0, h, r]) for _, h, r in rows]
    d_err = [result.delta[0, h, r] - exact.delta[0, h, r] for _, h, r in rows]
    # In bias-test's units (an ulp of the output format at the scale of delta's rounding
    # errors), so that the mechanism's size is judged as bias-test judges it.
    d_err_ulps = [(result.delta[0, h, r] - exact.delta[0, h, r]) / floor.delta_unit[0, h, r] for _, h, r in rows]
    d_floor_ulps = [(floor.delta[0, h, r] - exact.delta[0, h, r]) / floor.delta_unit[0, h, r] for _, h, r in rows]
    # The rate over the rows whose tie could be decided: NaN (steps.csv's nan, as every value
    # not measured) when none could, never a 0.0 that reads as "traced, none tied".
    decided = [tied for tied in map(row_is_tied, traces or []) if tied is not None]
    return {"o_error": float(np.mean(o_err)), "delta_error": float(np.mean(d_err)),
            "delta_error_ulps": float(np.mean(d_err_ulps)), "delta_floor_error_ulps": float(np.mean(d_floor_ulps)),
            "tie_rate": sum(decided) / len(decided) if decided else float("nan")}


def forced_ties_batch(rng: np.random.Generator, heads: int, n: int, d: int, fmt: str = "bf16"):
    """A batch [1, heads, n, d] whose rows' max is reached by exactly two keys, as in Qiu &
    Yao's failure (and flashbits' `sink` scenario, docs/DESIGN.md §7): every query row is
    one ``fmt`` vector u, keys 0 and 1 are one vector whose score lies in [7, 9], the other keys'
    scores 8-20 below it (their P-bar only sets sticky bits); V and dO are N(-1, 1/16) in
    half the features (the sink features) and N(0, 1) in the rest. Values rounded once to
    ``fmt``, the kernel's input format (bf16; fp16 for an fp16 model: keys 0 and 1 are one
    vector, so they stay tied). Returns q, k, v, dO as float64 arrays."""
    def bf16(x):
        return _round(x[None], fmt).values

    u = bf16(rng.standard_normal((heads, 1, d)))[0]
    scale = 1.0 / math.sqrt(d)
    norm = (u * u).sum(-1, keepdims=True)
    top = rng.uniform(7.0, 9.0, size=(heads, 1, 1))
    k = u * (top - rng.uniform(8.0, 20.0, size=(heads, n, 1))) / (scale * norm)
    k[:, 0] = k[:, 1] = (u * top / (scale * norm))[:, 0]
    sink = np.arange(d) < d // 2
    v = np.where(sink, rng.normal(-1.0, 0.25, (heads, n, d)), rng.standard_normal((heads, n, d)))
    d_o = np.where(sink, rng.normal(-1.0, 0.25, (heads, n, d)), rng.standard_normal((heads, n, d)))
    return bf16(np.repeat(u, n, axis=1)), bf16(k), bf16(v), bf16(d_o)


def attention_seed(*key: int) -> int:
    """The seed of one attention call of a run (its stochastic rounding, +o-sr), a function of
    ``key`` (the run's seed, the step, the layer) only: every call rounds with its own bits,
    and a resumed run draws the same ones as an uninterrupted one. torch's generator, which
    flashbits.torch draws from when no seed is given, is not saved in checkpoints."""
    return int(np.random.SeedSequence([0x5EED5, *key]).generate_state(1, np.uint64)[0])


def forced_ties_metrics(arm: "Arm", cfg: "StudyConfig", seed: int, step: int, rows: list, layer: int = 0) -> dict:
    """The arm's kernel measured on a fresh forced-ties batch of the layer's shape (seeded by
    seed and step; training does not see it)."""
    rng = np.random.default_rng([0x71E5, seed, step])
    # The format the op rounds this arm's float32 activations to in training.
    formats = _fbtorch.model_formats(arm.model, None, arm.recipe_file)
    fmt = formats["input"]
    q, k, v, d_o = forced_ties_batch(rng, cfg.model.n_head, cfg.model.block_size, cfg.model.head_dim, fmt)
    # A seed only where the arithmetic draws from one (flashbits.attention refuses it elsewhere).
    r = _attention(q, k, v, arm.model, do=d_o, causal=True, recipe=arm.recipe_file, threads=1, trace=rows,
                   dtype=fmt, seed=attention_seed(0x71E5, seed, step, layer) if formats["seeded"] else None)
    return measure(q, k, v, d_o, fmt, 1.0 / math.sqrt(cfg.model.head_dim), True, r, r.traces, rows, arm.model,
                   arm.recipe_file)


class LayerProbe:
    """The mechanism metrics of one emulated layer (module docstring), filled by the
    attention op's observer after each backward on probe steps."""

    def __init__(self, rows: list, model: str, recipe=None):
        self.rows = rows  # (batch 0, head, row) triples
        self.model, self.recipe = model, recipe  # the kernel measured, for its floor
        self.active = False  # measure the next backward
        self.pending = None

    def observe(self, seen: dict) -> None:
        self.pending = measure(seen["q"], seen["k"], seen["v"], seen["do"], seen["format"], seen["scale"],
                               seen["causal"], seen["result"], seen["traces"], self.rows, self.model, self.recipe)


def probe_rows_per_head(block_size: int) -> int:
    """The rows a head can probe: a quarter of the sequence to its end."""
    return block_size - block_size // 4


def probe_rows(cfg: StudyConfig) -> list:
    """The probed (batch 0, head, row) triples: --probe-rows of them, --probe-rows / --n-head
    distinct rows spread evenly over each head's probe_rows_per_head (study_config refuses a
    count that is not so divided). A study written before that check may probe fewer."""
    n = cfg.model.block_size
    rows = np.linspace(n // 4, n - 1, num=max(1, cfg.probe_rows // cfg.model.n_head)).round().astype(int)
    return [(0, h, int(r)) for h in range(cfg.model.n_head) for r in sorted(set(rows.tolist()))]


def spectral_norm(w: torch.Tensor) -> float:
    w = w.detach().double()
    # A run that diverged has NaN or infinite weights, where the SVD fails: their norm is NaN
    # (recorded as such), and the run goes on to its verdict.
    if not bool(torch.isfinite(w).all()):
        return float("nan")
    return float(torch.linalg.svdvals(w)[0])


# ---- files ------------------------------------------------------------------------------------
def _replace_atomic(path: str, write) -> None:
    """``write(tmp)`` then the temporary file renamed over ``path``: a reader sees the old file or
    the new one. A path that cannot take a file (a directory there, a full disk) is one
    UsageError naming it, and the temporary file is removed (it was a traceback, and the
    temporary file stayed)."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        if os.path.isdir(path):
            raise IsADirectoryError(21, "is a directory")
        write(tmp)
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise UsageError(f"{path}: cannot write: {e.strerror or e}") from None


def finite_or_null(obj):
    """``obj`` with every float that is not finite (NaN, +-inf) replaced by None: JSON has no
    such numbers, and Python's NaN token is refused by strict parsers. A reader tells a
    non-finite number from an absent one by the fields beside it (a run's ``nan``, a layer's
    ``delta_error_non_finite``, the fork's ``finite``)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_null(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_null(v) for v in obj]
    return obj


def json_bytes(obj) -> bytes:
    """The JSON this driver writes: strict (null for a number that is not finite)."""
    return json.dumps(finite_or_null(obj), indent=1, allow_nan=False).encode()


def write_atomic(path: str, data: bytes) -> None:
    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(data)
    _replace_atomic(path, write)


def save_atomic(obj, path: str) -> None:
    _replace_atomic(path, lambda tmp: torch.save(obj, tmp))


def torch_load(path: str):
    """A checkpoint or snapshot this driver wrote. weights_only=False on every torch version:
    PyTorch 2.6 made True the default, and 1.13's restricted unpickler cannot read a float,
    so only the explicit choice reads the same files on both (they are the user's own run
    directory's files, written by this module)."""
    return torch.load(path, map_location="cpu", weights_only=False)


def _error_text(e: Exception) -> str:
    """An exception in one line (torch's messages span several), at most 160 characters."""
    text = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
    return f"{type(e).__name__}: {text[:160]}"


def load_torch_file(path: str, remedy: str):
    """torch_load, or a UsageError naming the file (a corrupt or truncated file)."""
    try:
        return torch_load(path)
    except Exception as e:  # noqa: BLE001 - torch.load raises many kinds on a corrupt file
        raise UsageError(f"{path}: cannot be read ({_error_text(e)}); {remedy}") from None


FORK_KEYS = ("config", "model", "optimizer", "step")
RUN_KEYS = FORK_KEYS + ("rows", "fork")  # a run's checkpoint.pt (run_arm's save)


def load_checkpoint(path: str, what: str, keys: tuple = FORK_KEYS) -> dict:
    """A checkpoint with every key of ``keys`` (what its reader uses), or a UsageError naming
    the file and the key: a file written by another version, or damaged."""
    ck = load_torch_file(path, f"remove it to start {what} again")
    if not isinstance(ck, dict) or "config" not in ck or "model" not in ck:
        raise UsageError(f"checkpoint {path}: not a flashbits.train checkpoint")
    for key in keys:
        if key not in ck:
            raise UsageError(f"checkpoint {path}: no '{key}'; remove it to start {what} again")
    return ck


def load_weights(path: str, ck: dict, model: GPT, optimizer, what: str) -> None:
    """The checkpoint's model and optimizer states into ``model`` and ``optimizer``, or a
    UsageError naming the file and the key that does not fit them."""
    for key, target in (("model", model), ("optimizer", optimizer)):
        try:
            target.load_state_dict(ck[key])
        except (RuntimeError, ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
            raise UsageError(f"checkpoint {path}: '{key}' does not fit this model ({_error_text(e)}); remove it to "
                             f"start {what} again") from None


def check_run_checkpoint(path: str, ck: dict, cfg: "StudyConfig") -> None:
    """A run's checkpoint holds what resuming reads: its step, one row per step done with every
    column, and the fork's digest and loss (UsageError naming the file and the key)."""
    def bad(key, why):
        raise UsageError(f"checkpoint {path}: '{key}' {why}; remove it to start this run again")

    step, rows, fork = ck["step"], ck["rows"], ck["fork"]
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= cfg.steps:
        bad("step", f"is {step!r}, not a step 0..{cfg.steps}")
    if not isinstance(rows, list) or len(rows) != step:
        bad("rows", f"holds {len(rows) if isinstance(rows, list) else type(rows).__name__} rows, not the {step} "
                    f"steps done")
    fields = CSV_FIELDS + [f for i in cfg.emulate_layers for f in layer_fields(i)]
    for n, row in enumerate(rows):
        if not isinstance(row, dict) or any(f not in row for f in fields):
            bad("rows", "holds a row without this study's columns")
        for f in fields:
            v = row[f]
            if isinstance(v, bool) or not isinstance(v, int if f == "step" else (int, float)):
                bad("rows", f"row {n}: '{f}' is {v!r}, not {'an integer' if f == 'step' else 'a number'}")
    if not (isinstance(fork, dict) and isinstance(fork.get("weights_sha256"), str)
            and isinstance(fork.get("loss"), float)):
        bad("fork", "is not the fork's digest and loss")


def _threads_of(config: dict):
    """The --threads a recorded configuration (a study's, or a run's identity holding one) says."""
    study = config.get("study", config) if isinstance(config, dict) else None
    return study.get("threads") if isinstance(study, dict) else None


def check_same_config(path: str, found: dict, expected: dict, remedy: str = "use another --out or the same options",
                      here: str = "now") -> None:
    if not isinstance(found, dict):
        raise UsageError(f"{path}: no configuration ({type(found).__name__} where it is recorded); {remedy}")
    there, wanted = _threads_of(found), _threads_of(expected)
    if there != wanted:
        # Named on its own: torch's CPU sums depend on the thread count, so the losses do.
        if there is None:
            raise UsageError(f"{path}: records no --threads (written by an older version), --threads {wanted} {here}; "
                             f"PyTorch's CPU results depend on the thread count, so nothing can be added to that "
                             f"study: use another --out")
        raise UsageError(f"{path}: written with --threads {there}, --threads {wanted} {here}; PyTorch's CPU ops give "
                         f"other results with another thread count, so runs with different counts do not mix "
                         f"(use --threads {there}, or another --out)")
    for key in sorted(set(found) | set(expected)):
        if found.get(key) != expected.get(key):
            raise UsageError(f"{path}: written for another configuration ({key}: {found.get(key)!r} there, "
                             f"{expected.get(key)!r} {here}); {remedy}")


def read_json(path: str):
    """A JSON file this driver wrote, or a UsageError naming it (truncated, damaged, missing)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise UsageError(f"{path}: cannot be read ({e.strerror})") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise UsageError(f"{path}: not valid JSON ({e})") from None


def read_study(path: str) -> dict:
    """config.json's study configuration, as written: a dict (UsageError naming the file when
    it is not one)."""
    found = read_json(path)
    if not isinstance(found, dict) or not isinstance(found.get("study"), dict):
        raise UsageError(f"{path}: no 'study' configuration (not a flashbits.train config.json)")
    return found["study"]


def study_from_json(path: str, found: dict) -> "StudyConfig":
    """The StudyConfig of a configuration read from ``path``: every key of this version, of
    the type it has here (UsageError naming the file and the key otherwise)."""
    def check(where: str, got: dict, expected: dict) -> None:
        for key in sorted(set(got) | set(expected)):
            if where == "" and key == "threads" and key not in got:
                continue  # written before --threads was recorded (merge says so)
            if key not in expected:
                raise UsageError(f"{path}: unknown key '{where}{key}' (written by another version?)")
            if key not in got:
                raise UsageError(f"{path}: no key '{where}{key}' (written by another version?)")
            v, want = got[key], expected[key]
            if isinstance(want, dict):
                ok = isinstance(v, dict)
                if ok:
                    check(f"{where}{key}.", v, want)
            elif isinstance(want, list):
                ok = isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
            elif isinstance(want, float):
                ok = isinstance(v, (int, float)) and not isinstance(v, bool)
            else:
                ok = isinstance(v, type(want)) and not (isinstance(v, bool) and not isinstance(want, bool))
            if not ok:
                kind = {dict: "an object", list: "a list of integers", float: "a number", int: "an integer",
                        str: "a string"}[type(want)]
                raise UsageError(f"{path}: '{where}{key}' is {v!r}, not {kind}")

    check("", found, StudyConfig().to_json())
    return StudyConfig.from_json(found)


# ---- training ---------------------------------------------------------------------------------
class Progress:
    """One status line with the step rate and ETA (rewritten in place on a terminal)."""

    def __init__(self, label: str, total: int, quiet: bool):
        self.label, self.total, self.quiet = label, total, quiet
        self.start = time.monotonic()
        self.last = 0.0
        self.tty = sys.stderr.isatty()

    def update(self, done: int, loss: float) -> None:
        now = time.monotonic()
        if self.quiet or (now - self.last < (0.5 if self.tty else 30.0) and done < self.total):
            return
        self.last = now
        rate = done / max(now - self.start, 1e-9)
        eta = (self.total - done) / rate if rate > 0 else float("inf")
        width = 24
        filled = int(width * done / max(self.total, 1))
        line = (f"{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} "
                f"loss {loss:.4f} {rate:.2f} steps/s ETA {eta:.0f}s")
        sys.stderr.write(("\r" + line) if self.tty else line + "\n")
        if self.tty and done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


class StepClock:
    """The (run seed, step) of the step being trained, which each layer's attention call keys
    its seed with (attention_seed)."""

    def __init__(self, seed: int):
        self.seed, self.step = seed, 0


def attention_for(arm_model: str, recipe_file, threads: int, probe: LayerProbe | None,
                  clock: StepClock | None = None, layer: int = 0):
    def control(q, k, v):
        return _fbtorch.scaled_dot_product_attention(q, k, v, is_causal=True, model=CONTROL)

    def under_autocast(q, k, v):
        # The control's math attention, its matmuls as the arm's autocast runs them (bf16): the
        # fp32 control itself turns autocast off.
        return _fbtorch._math_attention(q, k, v, "top-left", 1.0 / math.sqrt(q.shape[-1]), torch.float32,
                                        under_autocast=True)

    if arm_model == CONTROL:
        return control
    if arm_model == LOW_PRECISION:
        return under_autocast
    # The op refuses a seed for a model whose arithmetic draws none (it would change nothing).
    seeded = _fbtorch.model_formats(arm_model, None, recipe_file)["seeded"]

    def emulated(q, k, v):
        observe = probe.observe if probe is not None and probe.active else None
        # Without a clock (outside run_arm), the op's own default: a fresh seed per call.
        seed = None if clock is None or not seeded else attention_seed(clock.seed, clock.step, layer)
        return _fbtorch.scaled_dot_product_attention(q, k, v, is_causal=True, model=arm_model, recipe=recipe_file,
                                                     threads=threads, observe=observe, seed=seed,
                                                     trace=probe.rows if observe else None)
    return emulated


def use_control_attention(model: GPT) -> None:
    """Every layer on the control's fp32 math attention (the fork, the fork's common loss)."""
    for block in model.blocks:
        block.attn.attention = attention_for(CONTROL, None, 1, None)


def install_arm_attention(model: GPT, arm: "Arm", cfg: StudyConfig, threads: int,
                          clock: StepClock | None = None) -> dict:
    """Each layer's attention as the arm runs it: the arm's kernel model where it emulates,
    the control's elsewhere, each call seeded by ``clock``'s step and its layer. Returns the
    probes of the study's emulated layers (layer -> LayerProbe, inactive until a probe step
    sets them)."""
    probes = {}
    for i, block in enumerate(model.blocks):
        emulate = arm.emulates(i, cfg)
        probed = emulate and i in cfg.emulate_layers
        probe = LayerProbe(probe_rows(cfg), arm.model, arm.recipe_file) if probed else None
        if probe is not None:
            probes[i] = probe
        block.attn.attention = attention_for(arm.model if emulate else CONTROL, arm.recipe_file, threads, probe,
                                             clock, i)
    return probes


def build_model(cfg: StudyConfig, vocab: int) -> GPT:
    torch.manual_seed(cfg.init_seed)
    return GPT(cfg.model, vocab)


def make_optimizer(model: GPT, cfg: StudyConfig):
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                             weight_decay=cfg.weight_decay)


def train_step(model, optimizer, x, y, cfg: StudyConfig, autocast: bool):
    optimizer.zero_grad(set_to_none=True)
    if autocast:
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            loss = model(x, y)
    else:
        loss = model(x, y)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
    optimizer.step()
    return float(loss.detach()), float(grad_norm)


def tensor_shapes(state) -> dict | None:
    """Parameter name -> shape of a state dict of tensors; None when ``state`` is not one."""
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        return None
    return {k: tuple(t.shape) for k, t in state.items()}


def weights_finite(state: dict) -> bool:
    """Every weight of a model's state dict finite (no NaN, no infinity)."""
    return all(bool(torch.isfinite(t).all()) for t in state.values() if torch.is_floating_point(t))


def fork_is_finite(fork: dict) -> bool:
    """The fork a run started from (its result's or checkpoint's ``fork``) finite: its weights,
    and its loss on the run's first forked batch. Written before ``weights_finite`` was
    recorded: the loss alone (NaN weights give a NaN loss). A loss written as null (JSON's
    stand-in for a number that is not finite) is not finite."""
    loss = fork.get("loss")
    return (fork.get("weights_finite", True) is True and isinstance(loss, (int, float))
            and not isinstance(loss, bool) and math.isfinite(loss))


def fork_failed_text(cfg: "StudyConfig") -> str:
    """Every arm's verdict, and the runs' note, when the shared fork is not finite."""
    return (f"no verdict: the shared {CONTROL} fork is not finite (its loss or weights NaN or infinite at "
            f"--fork-step {cfg.fork_step}, before any kernel model ran); every arm trained from it, so its result "
            f"says nothing about its kernel")


def weights_digest(state: dict) -> str:
    """The SHA-256 of a model's state dict (names and bytes, in order): the fork's identity."""
    h = hashlib.sha256()
    for name, p in state.items():
        h.update(name.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


class Interrupted(Exception):
    pass


class ForkInterrupted(Exception):
    """Ctrl-C while the shared fork trained: nothing of it is saved (fork.pt is written whole)."""


def fork_checkpoint(out: str, cfg: StudyConfig, corpus: Corpus, quiet: bool) -> str:
    """The shared fp32 checkpoint at --fork-step (trained here unless it exists; every process
    computes the same bytes, so concurrent array jobs may race harmlessly)."""
    path = os.path.join(out, "fork.pt")
    if os.path.exists(path):
        ck = load_checkpoint(path, "the fork")
        check_same_config(path, ck["config"], cfg.to_json())
        return path
    model = build_model(cfg, len(corpus.vocab))
    use_control_attention(model)
    optimizer = make_optimizer(model, cfg)
    progress = Progress("fork (fp32)", cfg.fork_step, quiet)
    step = 0
    first_non_finite = None  # (step, loss): said on the output, as every arm inherits it
    try:
        for step in range(cfg.fork_step):
            x, y = get_batch(corpus.train, batch_indices((0x5EED, cfg.init_seed), step, cfg.batch_size,
                                                         len(corpus.train), cfg.model.block_size), cfg.model.block_size)
            loss, _ = train_step(model, optimizer, x, y, cfg, autocast=False)
            if first_non_finite is None and not math.isfinite(loss):
                first_non_finite = (step + 1, loss)
            progress.update(step + 1, loss)
    except KeyboardInterrupt:
        raise ForkInterrupted(f"the fork (fp32) was interrupted at step {step} of {cfg.fork_step}; nothing of it is "
                              f"saved: the same command trains it again from the start") from None
    save_atomic({"config": cfg.to_json(), "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "step": cfg.fork_step}, path)
    if first_non_finite is not None or not weights_finite(model.state_dict()):
        how = (f"its loss was {first_non_finite[1]} at step {first_non_finite[0]} of {cfg.fork_step}"
               if first_non_finite is not None else f"its weights at step {cfg.fork_step} are not finite")
        print(f"fork ({CONTROL}): diverged: {how}; every arm trains from it, so no verdict on any kernel model "
              f"(the verdicts say so); use a smaller --lr and a new --out")
    return path


def run_dir(out: str, arm: Arm, seed: int) -> str:
    return os.path.join(out, "runs", arm.slug, f"seed{seed}")


CSV_FIELDS = ["step", "loss", "grad_norm"]


def layer_fields(layer: int) -> list:
    return [f"L{layer}_{n}" for n in ("tie_rate", "o_error", "delta_error", "o_error_sum", "delta_error_sum",
                                      "delta_error_ulps", "delta_floor_error_ulps", "wq_sigma", "wk_sigma")]


def run_arm(out: str, cfg: StudyConfig, corpus: Corpus, arm: Arm, seed: int, threads: int, quiet: bool,
            stop_after: int | None = None) -> dict:
    """Train one (arm, seed) from the fork, resuming from its checkpoint when there is one.
    Ctrl-C, or ``stop_after`` steps done in this call, writes the checkpoint and raises
    Interrupted (the run resumes from it bit for bit)."""
    directory = run_dir(out, arm, seed)
    os.makedirs(os.path.join(directory, "snapshots"), exist_ok=True)
    ck_path = os.path.join(directory, "checkpoint.pt")
    identity = {"study": cfg.to_json(), "arm": arm.name, "seed": seed}
    model = build_model(cfg, len(corpus.vocab))
    optimizer = make_optimizer(model, cfg)
    if os.path.exists(ck_path):
        ck = load_checkpoint(ck_path, "this run", RUN_KEYS)
        check_same_config(ck_path, ck["config"], identity)
        check_run_checkpoint(ck_path, ck, cfg)
        rows, start = ck["rows"], ck["step"]
        fork_info = ck["fork"]
        load_weights(ck_path, ck, model, optimizer, "this run")
    else:
        fork_path = fork_checkpoint(out, cfg, corpus, quiet)
        ck = load_checkpoint(fork_path, "the fork")
        rows, start = [], 0
        fork_info = None
        load_weights(fork_path, ck, model, optimizer, "the fork")
    if fork_info is None:
        # The arms' common start: the fork's weights, and the loss of the first forked batch
        # under the control's attention (every arm must agree on both, bit for bit).
        use_control_attention(model)
        x, y = get_batch(corpus.train, batch_indices((seed,), 0, cfg.batch_size, len(corpus.train),
                                                     cfg.model.block_size), cfg.model.block_size)
        with torch.no_grad():
            state = model.state_dict()
            fork_info = {"weights_sha256": weights_digest(state), "loss": float(model(x, y)),
                         "weights_finite": weights_finite(state)}
    clock = StepClock(seed)
    probes = install_arm_attention(model, arm, cfg, threads, clock)
    # Running error sums of the probed layers only: a layer no probe measures (the control's,
    # autocast's, or one the arm does not emulate) has NaN sums, as its per-step errors, since a
    # 0 would read as a measured "no error".
    sums = {i: (rows[-1][f"L{i}_o_error_sum"], rows[-1][f"L{i}_delta_error_sum"]) if rows else (0.0, 0.0)
            for i in probes}
    autocast = arm.model == LOW_PRECISION

    def save(step):
        save_atomic({"config": identity, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                     "step": step, "rows": rows, "fork": fork_info}, ck_path)

    progress = Progress(f"{arm.name} seed {seed}", cfg.steps, quiet)
    interrupted = []
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
    try:
        for step in range(start, cfg.steps):
            clock.step = step
            probing = step % cfg.probe_every == 0
            for probe in probes.values():
                probe.active = probing and cfg.probe_batch == "live"
                probe.pending = None
            x, y = get_batch(corpus.train, batch_indices((seed,), step, cfg.batch_size, len(corpus.train),
                                                         cfg.model.block_size), cfg.model.block_size)
            loss, grad_norm = train_step(model, optimizer, x, y, cfg, autocast)
            row = {"step": cfg.fork_step + step + 1, "loss": loss, "grad_norm": grad_norm}
            for i in cfg.emulate_layers:
                wq, wk = model.blocks[i].attn.w_q_w_k()
                p = probes[i].pending if i in probes else None
                if i in probes and probing and cfg.probe_batch == "forced-ties":
                    p = forced_ties_metrics(arm, cfg, seed, step, probes[i].rows, i)
                nan = float("nan")
                o_sum, d_sum = sums.get(i, (nan, nan))
                if p is not None:
                    o_sum, d_sum = o_sum + p["o_error"], d_sum + p["delta_error"]
                    sums[i] = (o_sum, d_sum)
                row.update({f"L{i}_tie_rate": p["tie_rate"] if p else nan, f"L{i}_o_error": p["o_error"] if p else nan,
                            f"L{i}_delta_error": p["delta_error"] if p else nan, f"L{i}_o_error_sum": o_sum,
                            f"L{i}_delta_error_sum": d_sum,
                            f"L{i}_delta_error_ulps": p["delta_error_ulps"] if p else nan,
                            f"L{i}_delta_floor_error_ulps": p["delta_floor_error_ulps"] if p else nan,
                            f"L{i}_wq_sigma": spectral_norm(wq),
                            f"L{i}_wk_sigma": spectral_norm(wk)})
            rows.append(row)
            done = step + 1
            if done % cfg.snapshot_every == 0 or done == cfg.steps:
                save_atomic(model.state_dict(), os.path.join(directory, "snapshots", f"step{done}.pt"))
                save(done)
            progress.update(done, loss)
            if stop_after is not None and done - start >= stop_after and done < cfg.steps:
                interrupted.append(True)
            if interrupted:
                save(done)
                raise Interrupted(ck_path)
    finally:
        signal.signal(signal.SIGINT, previous)
    write_csv(os.path.join(directory, "steps.csv"), rows, cfg)
    result = run_result(rows, cfg, fork_info, tuple(probes))
    result.update({"arm": arm.name, "seed": seed, "study": cfg.to_json()})
    write_atomic(os.path.join(directory, "result.json"), json_bytes(result))
    return result


def _csv_value(v) -> str:
    if isinstance(v, float):
        return repr(v)  # round-trips the double exactly
    return str(v)


def write_csv(path: str, rows: list, cfg: StudyConfig) -> None:
    fields = CSV_FIELDS + [f for i in cfg.emulate_layers for f in layer_fields(i)]
    lines = [",".join(fields)] + [",".join(_csv_value(r.get(f, "")) for f in fields) for r in rows]
    write_atomic(path, ("\n".join(lines) + "\n").encode())


def sign_counts(rows: list, column: str) -> tuple:
    """Steps whose value in `column` is positive, and negative (unprobed steps, NaN, left out)."""
    values = [r[column] for r in rows if not math.isnan(r[column])]
    return sum(v > 0 for v in values), sum(v < 0 for v in values)


def distance_sign_counts(pairs: list) -> tuple:
    """The mechanism's test statistic per probed step, as bias-test's distance
    (studies/verdict.hpp): Z = s_K K - s_F F, with K the kernel's delta error, F its floor's
    (the format's own: O rounded before delta is formed), and s_K, s_F the signs of their means
    over the steps (s_F = s_K where F's mean is 0). Z > 0 where the kernel's error lies further
    from zero than its floor's; a sign test on K alone counted the floor's sign as the kernel's
    (PyTorch's FA2 read as "mechanism present" on the forced-ties batches). Returns the steps
    with Z > 0 and Z < 0."""
    if not pairs:
        return 0, 0
    mean_k = float(np.mean([k for k, _ in pairs]))
    mean_f = float(np.mean([f for _, f in pairs]))
    s_k = -1.0 if mean_k < 0 else 1.0
    s_f = s_k if mean_f == 0 else (-1.0 if mean_f < 0 else 1.0)
    z = [s_k * k - s_f * f for k, f in pairs]
    return sum(v > 0 for v in z), sum(v < 0 for v in z)


def measured_sum(rows: list, column: str):
    """A running error sum's last value; None where no probe measured it (NaN in the rows)."""
    if not rows:
        return 0.0
    value = rows[-1][column]
    return None if math.isnan(value) else value


def probed_step(row: dict, cfg: StudyConfig) -> bool:
    """The row's step was a probe step (every --probe-every-th forked step, the first included)."""
    return (row["step"] - cfg.fork_step - 1) % cfg.probe_every == 0


def run_result(rows: list, cfg: StudyConfig, fork_info: dict, probed_layers: tuple = ()) -> dict:
    """result.json's statistics of a run's rows. ``probed_layers``: the layers a probe measured
    (the arm emulates them), whose probe steps with a delta error that is not finite (the
    model's values went NaN or infinite) are counted: their NaN in steps.csv is a measurement,
    not an absent probe."""
    losses = [r["loss"] for r in rows]
    layers = {}
    for i in cfg.emulate_layers:
        positive, negative = sign_counts(rows, f"L{i}_delta_error")
        non_finite = (sum(1 for r in rows if probed_step(r, cfg) and not math.isfinite(r[f"L{i}_delta_error"]))
                      if i in probed_layers else 0)
        ties = [r[f"L{i}_tie_rate"] for r in rows if not math.isnan(r[f"L{i}_tie_rate"])]
        layers[str(i)] = {
            # None where no probe measured the layer (its sums are NaN): never a measured 0.
            "delta_error_sum": measured_sum(rows, f"L{i}_delta_error_sum"),
            "o_error_sum": measured_sum(rows, f"L{i}_o_error_sum"),
            "delta_error_positive": positive, "delta_error_negative": negative,
            "tie_rate": float(np.mean(ties)) if ties else None,
            "wq_spectral_norm": rows[-1][f"L{i}_wq_sigma"] if rows else None,
            "wk_spectral_norm": rows[-1][f"L{i}_wk_sigma"] if rows else None,
            # Probe steps whose delta error was measured and not finite (the sums are then null).
            "delta_error_non_finite": non_finite,
        }
    tail = losses[-50:]
    fork = dict(fork_info, finite=fork_is_finite(fork_info))
    result = {"steps": len(rows), "fork": fork, "final_loss": float(np.mean(tail)) if tail else None,
              "nan": any(math.isnan(x) for x in losses), "layers": layers}
    if not fork["finite"]:
        result["no_verdict"] = fork_failed_text(cfg)
    return result


# ---- merging and verdicts ---------------------------------------------------------------------
@dataclasses.dataclass
class Thresholds:
    divergence_nats: float = 0.5
    divergence_window: int = 50
    divergence_steps: int = 100
    sign_p: float = 0.01
    wq_ratio: float = 1.2
    # The mechanism's size: delta's mean error further from zero than its floor's by at least
    # this many ulps (bias-test's units and default size at stake). PyTorch's FA2 lies 0.7%
    # beyond its floor on forced ties, consistently enough for the sign test over 100 steps, and
    # an O kept in fp32 a hair beyond a floor of about 0; Qiu & Yao's bf16 P-bar V 0.1 ulp and more.
    at_stake: float = 0.05


def read_steps(path: str) -> list:
    """The rows of a steps.csv (ValueError naming the line of a malformed one)."""
    with open(path) as f:
        header = f.readline().strip().split(",")
        out = []
        for n, line in enumerate(f, start=2):
            vals = line.strip().split(",")
            if len(vals) != len(header):
                raise ValueError(f"line {n}: {len(vals)} values, {len(header)} columns")
            try:
                out.append({k: (int(v) if k == "step" else float(v)) for k, v in zip(header, vals)})
            except ValueError as e:
                raise ValueError(f"line {n}: {e}") from None
    return out


_RESULT_TYPES = {"arm": str, "seed": int, "steps": int, "fork": dict, "final_loss": float, "nan": bool,
                 "layers": dict}
_LAYER_KEYS = ("delta_error_sum", "o_error_sum", "delta_error_positive", "delta_error_negative", "tie_rate",
               "wq_spectral_norm", "wk_spectral_norm")
# What run_result writes for each: a number, a count, or a number or null (no tie traced; an
# error sum no probe measured, or one that is not finite). A spectral norm is null where it is
# not finite (weights gone NaN), which steps.csv's last row must then show (read_run checks it).
# delta_error_non_finite, a count, is absent from results written before it was recorded.
_LAYER_COUNTS = ("delta_error_positive", "delta_error_negative", "delta_error_non_finite")
_LAYER_OPTIONAL = ("tie_rate", "delta_error_sum", "o_error_sum")
_LAYER_NORMS = {"wq_spectral_norm": "wq_sigma", "wk_spectral_norm": "wk_sigma"}


def _layer_value_ok(key: str, v) -> bool:
    if isinstance(v, bool):
        return False
    if key in _LAYER_COUNTS:
        return isinstance(v, int) and v >= 0
    return isinstance(v, (int, float)) or (v is None and (key in _LAYER_OPTIONAL or key in _LAYER_NORMS))


def read_run(directory: str, slug: str, seed_dir: str, cfg: StudyConfig, study: dict) -> dict | None:
    """A finished run's result.json and steps.csv (None when it has no result.json: not
    finished), checked to belong where it lies: its arm and seed those of its directory, its
    configuration the study's (config.json), all the study's steps in its steps.csv, with every
    column. A UsageError names the file and what is wrong."""
    res_path = os.path.join(directory, "result.json")
    if not os.path.exists(res_path):
        return None
    res = read_json(res_path)
    if not isinstance(res, dict):
        raise UsageError(f"{res_path}: not a run's result")
    for key, kind in _RESULT_TYPES.items():
        v = res.get(key)
        if key == "final_loss" and v is None:
            continue  # null: a mean that is not finite, checked against steps.csv below
        if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
            raise UsageError(f"{res_path}: '{key}' is {v!r}, not of type {kind.__name__}")
    fork = res["fork"]
    # The fork's loss is null where it was not finite (json_bytes); "finite" and
    # "weights_finite" are absent from results written before they were recorded.
    if (not isinstance(fork.get("weights_sha256"), str) or not (isinstance(fork.get("loss"), float)
                                                                 or fork.get("loss") is None)
            or any(not isinstance(fork.get(k, True), bool) for k in ("finite", "weights_finite"))):
        raise UsageError(f"{res_path}: 'fork' is not the fork's digest and loss")
    if fork["loss"] is None:
        fork["loss"] = float("nan")
    if Arm(res["arm"], res["arm"]).slug != slug or seed_dir != f"seed{res['seed']}":
        raise UsageError(f"{res_path}: the result of arm '{res['arm']}' seed {res['seed']}, in the directory of "
                         f"another run ({slug}/{seed_dir})")
    found = res.get("study")
    if found is None:
        # Written before result.json recorded its configuration: the run's checkpoint has it.
        ck_path = os.path.join(directory, "checkpoint.pt")
        if not os.path.exists(ck_path):
            raise UsageError(f"{res_path}: records no configuration, and the run's checkpoint.pt is gone: "
                             f"nothing says which study it belongs to")
        found = load_checkpoint(ck_path, "this run")["config"]
        found = found.get("study") if isinstance(found, dict) else found
    check_same_config(res_path, found, study, "the run belongs to another study: remove it or merge it there",
                      "in config.json")
    layers = [str(i) for i in cfg.emulate_layers]
    if sorted(res["layers"]) != sorted(layers) or any(
            not isinstance(res["layers"][i], dict) or any(k not in res["layers"][i] for k in _LAYER_KEYS)
            for i in layers):
        raise UsageError(f"{res_path}: 'layers' does not hold the statistics of layers {', '.join(layers)}")
    for i in layers:
        for key in _LAYER_KEYS + ("delta_error_non_finite",) * ("delta_error_non_finite" in res["layers"][i]):
            v = res["layers"][i][key]
            if not _layer_value_ok(key, v):
                kind = ("a count (an integer >= 0)" if key in _LAYER_COUNTS
                        else "a number or null" if key in _LAYER_OPTIONAL else "a number")
                raise UsageError(f"{res_path}: 'layers.{i}.{key}' is {v!r}, not {kind}")
    csv_path = os.path.join(directory, "steps.csv")
    if not os.path.exists(csv_path):
        raise UsageError(f"{csv_path}: missing (its run's result.json is there); run the arm again")
    try:
        rows = read_steps(csv_path)
    except (OSError, ValueError) as e:
        raise UsageError(f"{csv_path}: {e}") from None
    if res["steps"] != cfg.steps:
        raise UsageError(f"{res_path}: {res['steps']} steps, not the study's {cfg.steps}")
    steps = [r["step"] for r in rows]
    want = list(range(cfg.fork_step + 1, cfg.fork_step + cfg.steps + 1))
    if steps != want:
        held = f"steps {steps[0]}..{steps[-1]} ({len(steps)} rows)" if steps else "no steps"
        raise UsageError(f"{csv_path}: {held}, not the study's {want[0]}..{want[-1]}; run the arm again")
    fields = CSV_FIELDS + [f for i in cfg.emulate_layers for f in layer_fields(i)]
    if list(rows[0]) != fields:
        raise UsageError(f"{csv_path}: columns {','.join(rows[0])}, not the study's {','.join(fields)}")
    # A null that stands for a number that is not finite: steps.csv holds that number (nan, inf).
    for i in layers:
        for key, column in _LAYER_NORMS.items():
            held = rows[-1][f"L{i}_{column}"]
            if res["layers"][i][key] is None:
                if math.isfinite(held):
                    raise UsageError(f"{res_path}: 'layers.{i}.{key}' is None, not a number (null stands for one "
                                     f"that is not finite, and steps.csv's last L{i}_{column} is {held!r})")
                res["layers"][i][key] = held
    if res["final_loss"] is None:
        mean = float(np.mean([r["loss"] for r in rows[-50:]]))
        if math.isfinite(mean):
            raise UsageError(f"{res_path}: 'final_loss' is None, not of type float (null stands for a mean that is "
                             f"not finite, and steps.csv's last 50 losses average {mean!r})")
        res["final_loss"] = mean
    res["rows"] = rows
    res["dir"] = directory
    return res


def moving_mean(xs: list, window: int) -> list:
    out, acc = [], 0.0
    for i, x in enumerate(xs):
        acc += x
        if i >= window:
            acc -= xs[i - window]
        out.append(acc / min(i + 1, window))
    return out


def diverged(arm_losses: list, control_losses: list, th: Thresholds) -> bool | None:
    """A 50-step mean loss more than 0.5 nats above the control's, or NaN, for 100 or more
    steps (the thresholds' defaults). None (undecided) for a run shorter than those 100 steps
    whose losses are all finite: the rule counts steps, so it could never be met there, and
    False would claim a comparison the run was too short to make. A non-finite loss is
    divergence however short the run: weights that went NaN or infinite stay so."""
    n = min(len(arm_losses), len(control_losses))
    if n < th.divergence_steps:
        return True if any(not math.isfinite(x) for x in arm_losses[:n]) else None
    a = moving_mean(arm_losses[:n], th.divergence_window)
    c = moving_mean(control_losses[:n], th.divergence_window)
    bad = sum(1 for x, y in zip(a, c) if math.isnan(x) or x > y + th.divergence_nats)
    return bad >= th.divergence_steps


def too_short_for_divergence(steps: int, th: Thresholds) -> str:
    """Why a run of ``steps`` steps gets no divergence decision (the verdict's words)."""
    return (f"divergence undetermined: run of {steps} steps is shorter than the {th.divergence_steps} steps the "
            f"divergence rule needs")


def weight_deviation(a: dict, b: dict) -> float:
    """||A - B|| / ||B|| over every parameter (Frobenius), the relative weight deviation."""
    num = sum(float(((a[k].double() - b[k].double()) ** 2).sum()) for k in b)
    den = sum(float((b[k].double() ** 2).sum()) for k in b)
    return math.sqrt(num / den) if den > 0 else float("nan")


def merge(out: str, th: Thresholds) -> dict:
    """Join every finished (arm, seed) run under ``out`` into summary.json, the plots and the
    verdicts; the same file whether the runs came from one process or many."""
    cfg_path = os.path.join(out, "config.json")
    if not os.path.exists(cfg_path):
        raise UsageError(f"{out}: no config.json (not a flashbits.train output directory)")
    study = read_study(cfg_path)
    cfg = study_from_json(cfg_path, study)
    if cfg.threads is None:
        print(f"merge: {cfg_path} records no --threads (written by an older version); runs made with different "
              f"thread counts, whose losses differ, cannot be told apart")
    # The fork's digest, when the fork is there: every run must have started from it.
    fork_path = os.path.join(out, "fork.pt")
    fork_digest, shapes = None, {}
    fork_finite = True  # its weights (fork.pt's, when it is there) and every run's loss at it
    if os.path.exists(fork_path):
        fork = load_checkpoint(fork_path, "the fork")
        check_same_config(fork_path, fork["config"], study, "it belongs to another study", "in config.json")
        shapes = tensor_shapes(fork["model"])
        if shapes is None:
            raise UsageError(f"checkpoint {fork_path}: 'model' is not a model's weights")
        fork_digest = weights_digest(fork["model"])
        fork_finite = weights_finite(fork["model"])
    runs, unfinished = {}, []
    runs_dir = os.path.join(out, "runs")
    for slug in sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else []:
        arm_dir = os.path.join(runs_dir, slug)
        not_a_run = "not a run directory (runs/ holds ARM/seedS directories only)"
        if not os.path.isdir(arm_dir):  # a stray file: runs/ is the driver's
            raise UsageError(f"{arm_dir}: {not_a_run}")
        for sd in sorted(os.listdir(arm_dir)):
            directory = os.path.join(arm_dir, sd)
            if not os.path.isdir(directory):
                raise UsageError(f"{directory}: {not_a_run}")
            res = read_run(directory, slug, sd, cfg, study)
            if res is None:
                unfinished.append(os.path.join("runs", slug, sd))
                continue
            fork_digest = fork_digest or res["fork"]["weights_sha256"]
            if res["fork"]["weights_sha256"] != fork_digest:
                raise UsageError(f"{os.path.join(directory, 'result.json')}: started from another fork (weights "
                                 f"{res['fork']['weights_sha256'][:12]}..., not {fork_digest[:12]}...)")
            fork_finite = fork_finite and fork_is_finite(res["fork"])
            runs.setdefault(res["arm"], {})[res["seed"]] = res
    if not runs:
        raise UsageError(f"{out}: no finished runs to merge"
                         + (f" (unfinished: {', '.join(unfinished)})" if unfinished else ""))
    for directory in unfinished:
        # Said, not skipped silently: the verdicts below then rest on fewer seeds.
        print(f"merge: {directory}: not finished (no result.json), left out; run it to the end, then merge again")
    control = runs.get(CONTROL, {})
    summary = {"config": cfg.to_json(), "control": CONTROL,
               "thresholds": dataclasses.asdict(th),
               # Whether the shared fp32 fork every run started from is finite; when it is not,
               # every arm's verdict is fork_failed_text's "no verdict".
               "fork": {"weights_sha256": fork_digest, "finite": fork_finite}, "arms": {}}
    final_step = cfg.steps

    def snapshot(res, step):
        p = os.path.join(res["dir"], "snapshots", f"step{step}.pt")
        if not os.path.exists(p):  # every finished run wrote its final step's snapshot
            raise UsageError(f"{p}: missing (its run's result.json is there); run the arm again")
        weights = load_torch_file(p, "remove it (the weight deviation is then not computed) or run the arm again")
        got = tensor_shapes(weights)
        if got is None or (shapes and got != shapes):
            raise UsageError(f"{p}: not a weight snapshot of this study's model")
        shapes.update(got)  # the first snapshot read sets them when there is no fork.pt
        return weights

    for name, seeds in sorted(runs.items()):
        per_seed, div_votes, signs_pos, signs_neg, d_sums, ratios = {}, [], 0, 0, [], []
        o_pos, o_neg, o_sums = 0, 0, []
        floor_pairs = {}  # layer -> [(kernel's delta error, its floor's)] over seeds' probed steps
        probe_samples = 0  # probed steps (a non-NaN delta error) over seeds and layers
        non_finite_samples = 0  # probed steps whose delta error was measured and not finite
        for seed, res in sorted(seeds.items()):
            ctrl = control.get(seed)
            losses = [r["loss"] for r in res["rows"]]
            entry = {"final_loss": res["final_loss"], "nan": res["nan"], "steps": res["steps"], "fork": res["fork"],
                     "layers": res["layers"]}
            if ctrl is not None and name != CONTROL:
                # A NaN loss is divergence however few steps ran: weights that went NaN stay NaN.
                # Otherwise None when the run is too short for the rule (diverged()).
                entry["diverged"] = True if res["nan"] else diverged(losses, [r["loss"] for r in ctrl["rows"]], th)
                div_votes.append(entry["diverged"])
                a, b = snapshot(res, final_step), snapshot(ctrl, final_step)
                entry["weight_deviation_from_control"] = weight_deviation(a, b) if a and b else None
            elif name == CONTROL or res["nan"]:  # a NaN loss diverged, with or without a control
                entry["diverged"] = res["nan"]
                div_votes.append(res["nan"])
            for layer, stats in res["layers"].items():
                signs_pos += stats["delta_error_positive"]
                signs_neg += stats["delta_error_negative"]
                # From the CSV: result.json files written before O's counts existed lack them.
                positive, negative = sign_counts(res["rows"], f"L{layer}_o_error")
                o_pos += positive
                o_neg += negative
                layer_samples = sum(1 for r in res["rows"] if not math.isnan(r[f"L{layer}_delta_error"]))
                probe_samples += layer_samples
                non_finite_samples += stats.get("delta_error_non_finite", 0)
                # A layer no probe measured has no error sum (None; 0.0 in older result.json
                # files), and adds none: the arm's sum would read as a measured zero.
                if layer_samples and stats["delta_error_sum"] is not None:
                    d_sums.append(stats["delta_error_sum"])
                if layer_samples and stats["o_error_sum"] is not None:
                    o_sums.append(stats["o_error_sum"])
                floor_pairs.setdefault(layer, []).extend(
                    (r[f"L{layer}_delta_error_ulps"], r[f"L{layer}_delta_floor_error_ulps"]) for r in res["rows"]
                    if not math.isnan(r[f"L{layer}_delta_error_ulps"]))
                if ctrl is not None and ctrl["layers"].get(layer, {}).get("wq_spectral_norm"):
                    ratio = stats["wq_spectral_norm"] / ctrl["layers"][layer]["wq_spectral_norm"]
                    entry.setdefault("wq_spectral_norm_ratio", {})[layer] = ratio
                    ratios.append(ratio)
            per_seed[str(seed)] = entry
        p = sign_test_p(signs_pos, signs_neg)
        # The mechanism: delta's error further from zero than its floor's, layer by layer, and by
        # at least th.at_stake ulps in the layers (a consistent 0.7% of the floor is no mechanism).
        z_pos = z_neg = 0
        beyond = []  # per layer, |mean K| - |mean F| in ulps
        for pairs in floor_pairs.values():
            positive, negative = distance_sign_counts(pairs)
            z_pos, z_neg = z_pos + positive, z_neg + negative
            if pairs:
                mean_k, mean_f = float(np.mean([k for k, _ in pairs])), float(np.mean([f for _, f in pairs]))
                beyond.append(abs(mean_k) - abs(mean_f))
        z_p = sign_test_p(z_pos, z_neg)
        beyond_ulps = min(beyond) if beyond else None
        # Divergence is judged against the control of the same seed: without one it is not
        # known, and saying "no effect seen" would claim what was never compared.
        without_control = [seed for seed in sorted(seeds) if name != CONTROL and seed not in control]
        # Any seed that diverged (a NaN loss, or the rule) makes the arm diverged: a majority
        # vote would call an arm whose loss went NaN in one seed of two "no divergence". Seeds
        # too short to decide (None) leave the arm undecided when none diverged.
        diverged_seeds = [seed for seed in sorted(seeds) if per_seed[str(seed)].get("diverged") is True]
        if diverged_seeds:
            arm_diverged = True
        elif not div_votes or any(v is None for v in div_votes):
            arm_diverged = None
        else:
            arm_diverged = False
        wq_ratio = float(np.mean(ratios)) if ratios else None
        measured = name not in (CONTROL, LOW_PRECISION)
        # An arm that emulates none of the probed layers (fa-bf16acc[layers=0] with
        # --emulate-layers 1) has no probe sample: its sign tests measured nothing.
        probed = measured and probe_samples > 0
        sign_shown = (probed and z_p < th.sign_p and z_pos > z_neg and beyond_ulps is not None
                      and beyond_ulps >= th.at_stake)
        # A sign test over fewer samples than it needs cannot reach th.sign_p whatever they show
        # (six of six one way is p = 0.031): its silence is no finding, and "no mechanism
        # seen" would claim one (as bias_test says "inconclusive" below its minimum).
        # Counted in probe samples, ties included: an error equal to its floor's in every sample
        # (the reference itself) is a finding, not a lack of data.
        tested = sum(len(pairs) for pairs in floor_pairs.values())
        too_few = probed and not sign_shown and sign_test_p(tested, 0) >= th.sign_p
        needed = next(n for n in itertools.count(1) if sign_test_p(n, 0) < th.sign_p)
        too_few_text = (f"{tested} probe sample{'s' if tested != 1 else ''}: the sign test needs at least {needed} "
                        f"to reach p < {th.sign_p}; probe more often (--probe-every) or train longer")
        wq_shown = measured and wq_ratio is not None and wq_ratio > th.wq_ratio
        wq_part = f"W_Q spectral norm above {th.wq_ratio}x the control's"
        if sign_shown and cfg.probe_batch == "forced-ties":
            # The sign test then measured the kernel on a synthetic batch built to tie maxima,
            # not the rows the model trained on: say so, or it reads as a finding about training.
            mechanism = ("mechanism present on the synthetic forced-ties probe batch (not the training batches)"
                         + (f", {wq_part}" if wq_shown else ""))
        elif sign_shown:
            mechanism = "mechanism present" + (f", {wq_part}" if wq_shown else "")
        elif wq_shown:
            # W_Q's growth alone is no sign of the tie mechanism (one seed's drift can pass the
            # ratio): the verdict names the rule that fired and what the probe showed.
            mechanism = wq_part + (f" (delta's error against its floor undetermined: {too_few_text})" if too_few
                                   else " (delta's error not shown beyond its floor)" if probed else "")
        else:
            mechanism = None
        not_measured = None
        if measured and not probed and non_finite_samples:
            # Measured, and not finite in every probed step (the model's values went NaN or
            # infinite): "not measured" would be untrue, and nothing can be tested.
            not_measured = (f"mechanism undetermined (delta's error not finite in all {non_finite_samples} probed "
                            f"step{'s' if non_finite_samples != 1 else ''})")
        elif measured and not probed:
            layers = cfg.emulate_layers
            not_measured = ("mechanism not measured (no probe samples: the arm "
                            + (f"emulates none of the probed layers {', '.join(map(str, layers))})"
                               if len(layers) > 1 else f"does not emulate the probed layer {layers[0]})"))
        elif too_few and mechanism is None:
            not_measured = f"mechanism undetermined ({too_few_text})"
        elif name == LOW_PRECISION and not probe_samples:
            # Its attention is PyTorch's under autocast, which no probe measures: zero samples
            # are "not measured", never "no mechanism seen".
            not_measured = (f"mechanism not measured (no probe samples: {LOW_PRECISION} runs PyTorch's attention "
                            f"under autocast, not a kernel model the probes measure)")
        if not fork_finite:
            # Every arm, the control included, trained from non-finite weights: its NaN losses
            # are the fork's, not a divergence of its own, and no kernel is judged.
            verdict = fork_failed_text(cfg)
            arm_diverged = None
            for entry in per_seed.values():
                if "diverged" in entry:
                    entry["diverged"] = None
        elif diverged_seeds:
            named = ", ".join(map(str, diverged_seeds))
            verdict = ("diverged" if len(diverged_seeds) == len(seeds) else
                       f"diverged in {len(diverged_seeds)} of {len(seeds)} seeds "
                       f"(seed{'s' if len(diverged_seeds) > 1 else ''} {named})")
        elif arm_diverged is None and not div_votes:
            verdict = (f"undetermined: no {CONTROL} control run for seed(s) "
                       f"{', '.join(str(seed) for seed in without_control)} (run --arm {CONTROL} with them)"
                       + "".join(f"; {m}" for m in (mechanism, not_measured) if m))
        elif arm_diverged is None:
            verdict = (f"{mechanism or not_measured or 'no mechanism seen'}; "
                       f"{too_short_for_divergence(cfg.steps, th)}")
        elif mechanism is not None:
            verdict = f"{mechanism}, no divergence"
        elif not_measured is not None:
            verdict = f"no divergence; {not_measured}"
        else:
            verdict = "no effect seen"
        if without_control and div_votes and fork_finite:
            # Some seeds had their control and some not: the divergence above is of the first
            # alone, and the arm's mean final loss covers seeds the control's does not.
            judged = [seed for seed in sorted(seeds) if seed not in without_control]
            verdict += (f"; divergence compared with the {CONTROL} control on seed(s) "
                        f"{', '.join(map(str, judged))} only: no {CONTROL} control run for seed(s) "
                        f"{', '.join(map(str, without_control))} (run --arm {CONTROL} with them)")
        summary["arms"][name] = {
            "final_loss": float(np.mean([s["final_loss"] for s in per_seed.values()])),
            "diverged": arm_diverged,
            "delta_error_sum": float(np.sum(d_sums)) if d_sums else None,
            "delta_error_positive_steps": signs_pos, "delta_error_negative_steps": signs_neg,
            "delta_error_sign_p": p if probed else None,
            # Probe steps whose delta error was measured and not finite (left out of the sums).
            "delta_error_non_finite_steps": non_finite_samples,
            # The mechanism's test: steps whose delta error lies further from zero than the
            # floor's (> 0) or closer (< 0), and the sign test's p (distance_sign_counts).
            "delta_beyond_floor_steps": z_pos, "delta_within_floor_steps": z_neg,
            "delta_beyond_floor_sign_p": z_p if probed else None,
            # |mean delta error| - |mean floor error|, in ulps (the least over the probed layers)
            "delta_beyond_floor_ulps": beyond_ulps if probed else None,
            # O's signed error, the mechanism's first step (delta inherits it through dO*O)
            "o_error_sum": float(np.sum(o_sums)) if o_sums else None,
            "o_error_positive_steps": o_pos, "o_error_negative_steps": o_neg,
            "o_error_sign_p": sign_test_p(o_pos, o_neg) if probed else None,
            "wq_spectral_norm_ratio": wq_ratio,
            "verdict": verdict,
            "seeds": sorted(seeds),
            "seeds_without_control": without_control,
            "per_seed": per_seed,
        }
    summary["golden"] = golden_ratio(runs, final_step, snapshot)
    write_atomic(os.path.join(out, "summary.json"), json_bytes(summary))
    write_plots(out, runs, cfg)
    print_verdicts(summary, th)
    return summary


def golden_ratio(runs: dict, step: int, snapshot) -> dict:
    """Golden et al.'s comparison at the final step: each arm's weight deviation from the
    control (same seed), beside the deviation between control seeds (same fork, other batch
    order) and that of bf16 autocast training."""
    control = runs.get(CONTROL, {})
    seeds = sorted(control)
    out = {"step": step, "seed_to_seed": None, "deviation": {}}
    if len(seeds) >= 2:
        a, b = snapshot(control[seeds[0]], step), snapshot(control[seeds[1]], step)
        if a and b:
            out["seed_to_seed"] = weight_deviation(a, b)
    for name, seeds_runs in runs.items():
        if name == CONTROL:
            continue
        devs = []
        for seed, res in seeds_runs.items():
            if seed in control:
                a, b = snapshot(res, step), snapshot(control[seed], step)
                if a and b:
                    devs.append(weight_deviation(a, b))
        if devs:
            out["deviation"][name] = float(np.mean(devs))
    low = out["deviation"].get(LOW_PRECISION)
    out["ratio_to_low_precision"] = {n: (d / low if low else None) for n, d in out["deviation"].items()}
    return out


def print_verdicts(summary: dict, th: Thresholds) -> None:
    print(f"verdicts (diverged: a {th.divergence_window}-step mean loss > {th.divergence_nats} nats above the "
          f"control for >= {th.divergence_steps} steps, or a NaN loss, in any seed; mechanism: delta's error "
          f"further from zero than its floor's in more steps than not, sign test p < {th.sign_p}, and at least "
          f"{th.at_stake} ulp beyond it; or W_Q spectral norm > {th.wq_ratio}x the control, named as such)")
    if not summary["fork"]["finite"]:
        print(f"  fork ({summary['control']}): not finite (its loss or weights NaN or infinite): no verdict on any "
              f"arm; run the study again in a new --out with settings whose {summary['control']} training stays "
              f"finite (a smaller --lr)")
    for name, a in summary["arms"].items():
        p = a["delta_error_sign_p"]
        ratio = a["wq_spectral_norm_ratio"]
        o_p = a["o_error_sign_p"]
        non_finite = a.get("delta_error_non_finite_steps", 0)
        if non_finite:
            # Measured, not absent: the probe ran and the error was NaN or infinite.
            signed = a["delta_error_positive_steps"] + a["delta_error_negative_steps"]
            delta = (f"delta error not finite in {non_finite} probed step{'s' if non_finite != 1 else ''}"
                     + (f"; where finite {a['delta_error_positive_steps']}+/{a['delta_error_negative_steps']}-"
                        if signed else ""))
        elif a["delta_error_sum"] is None:
            delta = "delta error not measured"
        else:
            delta = (f"delta error sum {a['delta_error_sum']:+.3e}, {a['delta_error_positive_steps']}+/"
                     f"{a['delta_error_negative_steps']}-")
        if p is not None:
            delta += f", sign test p {p:.2g}"
        if a.get("delta_beyond_floor_sign_p") is not None:
            delta += (f"; beyond its floor {a['delta_beyond_floor_steps']}+/{a['delta_within_floor_steps']}-, "
                      f"p {a['delta_beyond_floor_sign_p']:.2g}, by {a['delta_beyond_floor_ulps']:+.3g} ulp")
        o_part = ""
        if o_p is not None:
            o_part = f"; O error {a['o_error_positive_steps']}+/{a['o_error_negative_steps']}-, p {o_p:.2g}"
        w_part = ("" if ratio is None else f"; W_Q norm {ratio:.3f}x control" if math.isfinite(ratio)
                  else "; W_Q norm not finite (the arm's or the control's weights are not)")
        print(f"  {name}: {a['verdict']} (final loss {a['final_loss']:.4f}; {delta}{o_part}{w_part})")
    g = summary["golden"]
    if g["seed_to_seed"] is not None:
        arms = ", ".join(f"{n} {d:.3e}" for n, d in sorted(g["deviation"].items()))
        print(f"  weight deviation at step {g['step']}: control seed to seed {g['seed_to_seed']:.3e}"
              + (f"; {arms}" if arms else ""))


# ---- plots (SVG, no plotting library needed) ---------------------------------------------------
_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
            "#bcbd22", "#17becf"]


def svg_lines(path: str, title: str, ylabel: str, series: dict, bounds: tuple | None = None) -> None:
    """A line chart of ``series`` (name -> (xs, ys)); NaNs break a line; a series with no
    finite value has no line and no legend entry. ``bounds`` (lo, hi): the range the values
    can take (a rate: (0, 1)), which the y axis never leaves."""
    w, h, left, right, top, bottom = 900, 420, 70, 350, 30, 40
    pts = [(x, y) for xs, ys in series.values() for x, y in zip(xs, ys) if math.isfinite(y)]
    if not pts:
        return
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:  # a constant: a band of a tenth of its size around it (1 around 0)
        pad = abs(y0) / 10 if y0 else 1.0
        y0, y1 = y0 - pad, y1 + pad
        if bounds is not None:
            y0, y1 = max(y0, bounds[0]), min(y1, bounds[1])

    def sx(x):
        return left + (x - x0) / (x1 - x0) * (w - left - right)

    def sy(y):
        return h - bottom - (y - y0) / (y1 - y0) * (h - top - bottom)

    esc = lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
             f'font-size="11"><rect width="100%" height="100%" fill="white"/>',
             f'<text x="{left}" y="18" font-size="13">{esc(title)}</text>',
             f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>',
             f'<text x="{left}" y="{h - 8}">step {x0:g}</text>',
             f'<text x="{w - right}" y="{h - 8}" text-anchor="end">{x1:g}</text>',
             f'<text x="{left - 4}" y="{top + 8}" text-anchor="end">{y1:.4g}</text>',
             f'<text x="{left - 4}" y="{h - bottom}" text-anchor="end">{y0:.4g}</text>',
             f'<text x="12" y="{(top + h - bottom) / 2}" transform="rotate(-90 12 {(top + h - bottom) / 2})" '
             f'text-anchor="middle">{esc(ylabel)}</text>']
    legend_entries = 0
    for n, (name, (xs, ys)) in enumerate(series.items()):
        if not any(math.isfinite(y) for y in ys):
            continue  # nothing to draw: a legend entry would name a line that is not there
        colour = _COLOURS[n % len(_COLOURS)]
        # At most ~500 points a line (the chart is 480 pixels wide): every stride-th, and the last.
        stride = max(1, len(xs) // 500)
        if stride > 1:
            keep = list(range(0, len(xs), stride)) + ([len(xs) - 1] if (len(xs) - 1) % stride else [])
            xs, ys = [xs[i] for i in keep], [ys[i] for i in keep]
        segment = []
        for x, y in list(zip(xs, ys)) + [(None, float("nan"))]:
            if x is not None and math.isfinite(y):
                segment.append(f"{sx(x):.1f},{sy(y):.1f}")
                continue
            if segment:
                parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.2" points="{" ".join(segment)}"/>')
            segment = []
        ly = top + 14 * legend_entries + 10
        legend_entries += 1
        parts.append(f'<line x1="{w - right + 10}" y1="{ly - 4}" x2="{w - right + 30}" y2="{ly - 4}" '
                     f'stroke="{colour}" stroke-width="2"/><text x="{w - right + 34}" y="{ly}">{esc(name)}</text>')
    parts.append("</svg>")
    write_atomic(path, "\n".join(parts).encode())


def write_plots(out: str, runs: dict, cfg: StudyConfig) -> None:
    plots = os.path.join(out, "plots")
    if os.path.exists(plots) and not os.path.isdir(plots):
        raise UsageError(f"{plots}: not a directory (the plots are written there)")
    os.makedirs(plots, exist_ok=True)
    for seed in sorted({s for seeds in runs.values() for s in seeds}):
        def series(column, smooth=1):
            d = {}
            for name, seeds in sorted(runs.items()):
                if seed in seeds and seeds[seed]["rows"] and column in seeds[seed]["rows"][0]:
                    rows = seeds[seed]["rows"]
                    ys = [r[column] for r in rows]
                    d[name] = ([r["step"] for r in rows], moving_mean(ys, smooth) if smooth > 1 else ys)
            return d
        svg_lines(os.path.join(plots, f"loss_seed{seed}.svg"), f"training loss, 50-step mean (seed {seed})",
                  "loss (nats)", series("loss", 50))
        losses = series("loss", 50)
        if CONTROL in losses:
            control_steps, control_loss = losses[CONTROL]
            difference = {name: (xs, [y - c for y, c in zip(ys, control_loss)])
                          for name, (xs, ys) in losses.items() if name != CONTROL and xs == control_steps}
            svg_lines(os.path.join(plots, f"loss_minus_control_seed{seed}.svg"),
                      f"training loss minus the fp32 control's, 50-step means (seed {seed})", "nats", difference)
        for i in cfg.emulate_layers:
            for column, label in (("delta_error_sum", "running sum of delta's signed error"),
                                  ("o_error_sum", "running sum of O's signed error"),
                                  ("wq_sigma", "largest singular value of W_Q"),
                                  ("tie_rate", "tie rate (50-step mean)")):
                svg_lines(os.path.join(plots, f"L{i}_{column}_seed{seed}.svg"), f"layer {i}: {label} (seed {seed})",
                          label, series(f"L{i}_{column}", 50 if column == "tie_rate" else 1),
                          (0.0, 1.0) if column == "tie_rate" else None)


# ---- command line -----------------------------------------------------------------------------
def _int_list(text: str, name: str) -> tuple:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip() != "")
    except ValueError:
        raise UsageError(f"{name} {text}: expected comma-separated integers") from None
    if not vals:
        raise UsageError(f"{name}: empty")
    # A value named twice would count twice (a layer's error sums doubled, a seed run twice).
    twice = sorted({v for v in vals if vals.count(v) > 1})
    if twice:
        raise UsageError(f"{name} {text}: {', '.join(map(str, twice))} named twice")
    return vals


class _TypedFloat(float):
    """A float option's value with the text it was given (``.text``): a refusal names what was
    typed, where the float would not (``--lr 1e400`` is inf)."""
    text: str


def _typed_float(text: str) -> float:
    value = _TypedFloat(text)
    value.text = text
    return value


_typed_float.__name__ = "float"  # argparse's "invalid float value: '0x1p-3'"


def shown(value) -> str:
    """A float option's value as a refusal quotes it: as typed where the float is not finite
    (``1e400``, not ``inf``), else the number (``-1.0``)."""
    text = getattr(value, "text", None)
    return text if text is not None and not math.isfinite(value) else str(float(value))


class _OneLineErrorParser(argparse.ArgumentParser):
    """argparse, whose refusals (an unknown --preset, --lr 0x1p-3) printed its usage block
    before the error: one `error: ...` line and exit 2 here, as every other refusal."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _OneLineErrorParser(prog="python3 -m flashbits.train", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Example: python3 -m flashbits.train --preset smoke --out /tmp/fbtrain\n"
                                       "Scale-out: one process per (arm, seed) with --arm A --seed S, then "
                                       "`python3 -m flashbits.train merge --out DIR`.")
    p.add_argument("command", nargs="?", default="run", choices=["run", "merge"],
                   help="run (train the arms, then merge what is finished) or merge (only join finished runs; "
                        "it takes --out, --quiet, --threads and the verdict thresholds --divergence-nats, "
                        "--divergence-steps, --sign-p, --wq-ratio, --at-stake, and refuses the study's options)")
    p.add_argument("--out", required=True, help="output directory (config.json, fork.pt, runs/, summary.json, plots/)")
    p.add_argument("--preset", choices=sorted(PRESETS), default="study")
    p.add_argument("--corpus", help=f"a UTF-8 text file or a directory of them (default {DEFAULT_CORPUS_DIR})")
    p.add_argument("--arms", default="fp32,fa-bf16acc,fa-bf16acc+dynmax",
                   help="comma-separated arms (fp32, bf16-autocast, MODEL[+VARIANT], MODEL[recipe=FILE], "
                        "MODEL[STAGE=FORMAT;...]; inside [] separate stages with ';')")
    p.add_argument("--arm", help="run only this arm (one process of a job array)")
    p.add_argument("--seeds", default="0,1", help="comma-separated batch-order seeds")
    p.add_argument("--seed", type=int, help="run only this seed")
    for name, kind in (("n-layer", int), ("n-head", int), ("n-embd", int), ("block-size", int), ("batch-size", int),
                       ("fork-step", int), ("steps", int), ("probe-rows", int), ("probe-every", int),
                       ("snapshot-every", int), ("lr", _typed_float), ("beta1", _typed_float),
                       ("beta2", _typed_float), ("weight-decay", _typed_float), ("clip", _typed_float),
                       ("init-seed", int)):
        p.add_argument(f"--{name}", type=kind)
    p.add_argument("--probe-batch", choices=["live", "forced-ties"],
                   help="what the mechanism metrics measure: the emulated layers' own rows (live, default) or, "
                        "each probe step, the arm's kernel on a fresh forced-ties batch of the layer's shape")
    p.add_argument("--emulate-layers", help="comma-separated layer indices (0-based) that run the emulated kernel")
    p.add_argument("--threads", type=int, default=1,
                   help="threads of torch and of the emulated kernel per process (recorded in config.json: torch's "
                        "CPU results depend on it, so every run of a study uses one count)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument("--stop-after", type=int, metavar="N",
                   help="stop each run after N more steps as Ctrl-C does (checkpoint, exit 130; the same "
                        "command resumes): for time-limited batch jobs")
    th = Thresholds()
    p.add_argument("--divergence-nats", type=_typed_float, default=th.divergence_nats)
    p.add_argument("--divergence-steps", type=int, default=th.divergence_steps)
    p.add_argument("--sign-p", type=_typed_float, default=th.sign_p)
    p.add_argument("--wq-ratio", type=_typed_float, default=th.wq_ratio)
    p.add_argument("--at-stake", type=_typed_float, default=th.at_stake,
                   help="the mechanism's size: delta's mean error further from zero than its floor's by at least this "
                        f"many ulps (default {th.at_stake}, as bias-test)")
    return p


def check_seed(name: str, v: int) -> None:
    """A seed (the initialisation's, a batch order's) in 0..2^32-1, what numpy's and torch's
    generators both take; else a raw numpy or torch error, after the fork for a batch seed."""
    if not 0 <= v < 2 ** 32:
        raise UsageError(f"{name} {v}: expected 0..2^32-1")


def study_config(args) -> StudyConfig:
    preset = dict(PRESETS[args.preset])
    cfg = StudyConfig(**preset)
    m = dataclasses.asdict(cfg.model)
    for key in ("n_layer", "n_head", "n_embd", "block_size"):
        v = getattr(args, key)
        if v is not None:
            m[key] = v
    cfg.model = ModelConfig(**m)
    for key in ("batch_size", "fork_step", "steps", "probe_rows", "probe_every", "snapshot_every", "lr", "beta1",
                "beta2", "weight_decay", "clip", "init_seed"):
        v = getattr(args, key)
        if v is not None:
            # A float option as a plain float (config.json, checkpoints); its text for refusals.
            setattr(cfg, key, float(v) if isinstance(v, float) else v)
    typed = {key: getattr(args, key) if getattr(args, key) is not None else getattr(cfg, key)
             for key in ("lr", "beta1", "beta2", "weight_decay", "clip")}
    if args.probe_batch is not None:
        cfg.probe_batch = args.probe_batch
    if args.emulate_layers is not None:
        cfg.emulate_layers = _int_list(args.emulate_layers, "--emulate-layers")
    if args.corpus is not None:
        cfg.corpus = os.path.abspath(args.corpus)
    cfg.threads = args.threads
    positive = {"--n-layer": cfg.model.n_layer, "--n-head": cfg.model.n_head, "--n-embd": cfg.model.n_embd,
                "--block-size": cfg.model.block_size, "--batch-size": cfg.batch_size, "--steps": cfg.steps,
                "--probe-rows": cfg.probe_rows, "--probe-every": cfg.probe_every,
                "--snapshot-every": cfg.snapshot_every, "--threads": args.threads}
    if args.stop_after is not None:
        positive["--stop-after"] = args.stop_after
    for name, v in positive.items():
        if v < 1:
            raise UsageError(f"{name} {v}: expected a positive integer")
    if args.threads > MAX_THREADS:  # else refused by the kernel model only after the fork has trained
        raise UsageError(f"--threads {args.threads}: expected 1..{MAX_THREADS}")
    check_seed("--init-seed", cfg.init_seed)
    if cfg.fork_step < 0:
        raise UsageError(f"--fork-step {cfg.fork_step}: expected 0 or more")
    if cfg.model.n_embd % cfg.model.n_head:
        raise UsageError(f"--n-embd {cfg.model.n_embd}: not a multiple of --n-head {cfg.model.n_head}")
    # Probed exactly as asked, or refused: config.json records the count, so it must be the
    # count of rows probed (probe_rows: the same rows in every head, distinct).
    heads, per_head = cfg.model.n_head, probe_rows_per_head(cfg.model.block_size)
    if cfg.probe_rows % heads or cfg.probe_rows > heads * per_head:
        raise UsageError(f"--probe-rows {cfg.probe_rows}: expected a multiple of --n-head {heads} (every head probes "
                         f"the same rows) up to {heads * per_head} ({per_head} row{'' if per_head == 1 else 's'} a head: a quarter of "
                         f"--block-size {cfg.model.block_size} to its end)")
    for layer in cfg.emulate_layers:
        if not 0 <= layer < cfg.model.n_layer:
            raise UsageError(f"--emulate-layers: layer {layer} outside 0..{cfg.model.n_layer - 1}")
    for name, v in (("--lr", typed["lr"]), ("--clip", typed["clip"])):
        if not (math.isfinite(v) and v > 0):
            raise UsageError(f"{name} {shown(v)}: expected a finite positive number")
    for name, v in (("--beta1", typed["beta1"]), ("--beta2", typed["beta2"])):
        if not 0 <= v < 1:
            raise UsageError(f"{name} {shown(v)}: expected 0 <= beta < 1")
    if not (math.isfinite(cfg.weight_decay) and cfg.weight_decay >= 0):
        raise UsageError(f"--weight-decay {shown(typed['weight_decay'])}: expected a finite number >= 0")
    return cfg


def split_arms(text: str, option: str = "--arms") -> list:
    """Arms separated by commas outside brackets (a recipe's stages inside [] use ';' or ',').
    An empty one (``--arms ,``, ``fp32,,x``) is a UsageError: nothing would run for it."""
    arms, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            arms.append(cur)
            cur = ""
        else:
            cur += ch
    arms.append(cur)
    if not all(a.strip() for a in arms):
        raise UsageError(f"{option} '{text}': an empty arm (arms are separated by commas)")
    return [a.strip() for a in arms]


def check_thresholds(th: "Thresholds") -> None:
    """The verdict thresholds in their ranges: outside them every arm would get one verdict."""
    if not (math.isfinite(th.divergence_nats) and th.divergence_nats >= 0):
        raise UsageError(f"--divergence-nats {shown(th.divergence_nats)}: expected a finite number >= 0")
    if th.divergence_steps < 1:
        raise UsageError(f"--divergence-steps {th.divergence_steps}: expected a positive integer")
    if not 0 < th.sign_p < 1:
        raise UsageError(f"--sign-p {shown(th.sign_p)}: expected a significance level, 0 < p < 1")
    if not (math.isfinite(th.wq_ratio) and th.wq_ratio >= 1):
        raise UsageError(f"--wq-ratio {shown(th.wq_ratio)}: expected a finite ratio >= 1 (W_Q's norm grown that "
                         f"much over the control's)")
    if not (math.isfinite(th.at_stake) and th.at_stake > 0):
        raise UsageError(f"--at-stake {shown(th.at_stake)}: expected a finite number of ulps > 0")


_UNSET = object()
# What merge reads of the command line: the study is config.json's, its runs those under runs/.
MERGE_OPTIONS = ("command", "out", "quiet", "threads", "divergence_nats", "divergence_steps", "sign_p", "wq_ratio",
                 "at_stake")


def given_options(argv) -> dict:
    """dest -> option string of every option the command line gives (a default is not given)."""
    p = build_parser()
    p.set_defaults(**{a.dest: _UNSET for a in p._actions if a.dest != "help"})
    ns = p.parse_args(argv)
    return {a.dest: a.option_strings[0] for a in p._actions
            if a.option_strings and a.dest != "help" and getattr(ns, a.dest, _UNSET) is not _UNSET}


def check_merge_options(given: dict, args, out: str) -> None:
    """merge takes --out, the verdict thresholds and --threads (which must be the study's);
    a study option it would ignore is refused, as the documentation promises."""
    for dest, option in given.items():
        if dest not in MERGE_OPTIONS:
            raise UsageError(f"merge: {option} is not used by merge (the study's configuration is config.json's, "
                             f"its runs those under runs/); drop {option}")
    if "threads" in given:
        cfg_path = os.path.join(out, "config.json")
        if not os.path.exists(cfg_path):
            raise UsageError(f"{out}: no config.json (not a flashbits.train output directory)")
        there = study_from_json(cfg_path, read_study(cfg_path)).threads
        if there is None:
            raise UsageError(f"merge: {cfg_path} records no --threads (written by an older version), so "
                             f"--threads {args.threads} cannot be checked; drop --threads")
        if there != args.threads:
            raise UsageError(f"merge: {cfg_path} was written with --threads {there}, not --threads {args.threads}; "
                             f"PyTorch's CPU ops give other losses with another thread count (use --threads {there}, "
                             f"or drop it)")


def check_one_of(given: dict, args) -> None:
    """--arm with --arms, --seed with --seeds: the one must be among the others, else the
    command contradicts itself."""
    if "arm" in given and "arms" in given:
        listed = split_arms(args.arms)
        for arm in split_arms(args.arm, "--arm"):
            if arm not in listed:
                raise UsageError(f"--arm {arm}: not one of --arms {args.arms} (give an arm of the list, or drop "
                                 f"--arms)")
    if "seed" in given and "seeds" in given and args.seed not in _int_list(args.seeds, "--seeds"):
        raise UsageError(f"--seed {args.seed}: not one of --seeds {args.seeds} (give a seed of the list, or drop "
                         f"--seeds)")


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    th = Thresholds(divergence_nats=args.divergence_nats, divergence_steps=args.divergence_steps,
                    sign_p=args.sign_p, wq_ratio=args.wq_ratio, at_stake=args.at_stake)
    try:
        check_thresholds(th)
        # Plain floats from here on (summary.json's thresholds); the text was for refusals.
        th = dataclasses.replace(th, **{f.name: float(getattr(th, f.name)) for f in dataclasses.fields(th)
                                        if isinstance(getattr(th, f.name), float)})
        if os.path.exists(args.out) and not os.path.isdir(args.out):
            raise UsageError(f"--out {args.out}: not a directory")
        given = given_options(argv)
        if args.command == "merge":
            check_merge_options(given, args, args.out)
            merge(args.out, th)
            return 0
        check_one_of(given, args)
        cfg = study_config(args)
        # Arms and seeds before anything is written or trained.
        option = "--arm" if args.arm else "--arms"
        arms = [parse_arm(a) for a in split_arms(args.arm if args.arm else args.arms, option)]
        names = [a.name for a in arms]
        if len(set(names)) != len(names):
            raise UsageError(f"--arms: an arm named twice ({', '.join(names)})")
        by_dir = {}
        for a in arms:  # else the second arm would find the first one's run directory, after it trained
            if a.slug in by_dir:
                raise UsageError(f"--arms: '{by_dir[a.slug]}' and '{a.name}' would share the run directory "
                                 f"runs/{a.slug}; name one of them otherwise")
            by_dir[a.slug] = a.name
        seeds = (args.seed,) if args.seed is not None else _int_list(args.seeds, "--seeds")
        for s in seeds:
            check_seed("seed", s)
        torch.set_num_threads(args.threads)
        corpus = load_corpus(cfg.corpus, cfg.model.block_size)
        cfg.corpus_sha256 = corpus.text_sha256
        # Every arm checked (recipes written to a scratch directory) before anything is written
        # under --out: a refused configuration must not leave a config.json that then refuses the
        # corrected command.
        with tempfile.TemporaryDirectory(prefix="flashbits-train-") as scratch:
            for a in arms:
                validate_arm(dataclasses.replace(a), cfg, scratch)
        if corpus.skipped:
            print(skipped_text(cfg.corpus, corpus.skipped))
        cfg_path = os.path.join(args.out, "config.json")
        try:
            os.makedirs(args.out, exist_ok=True)
            if not os.path.exists(cfg_path):
                write_atomic(cfg_path, json_bytes({"study": cfg.to_json(), "vocab": corpus.vocab,
                                                   "corpus_skipped": list(corpus.skipped)}))
        except OSError as e:
            raise UsageError(f"--out {args.out}: cannot be created or written ({e.strerror})") from None
        check_same_config(cfg_path, read_study(cfg_path), cfg.to_json())
        arms = [validate_arm(a, cfg, os.path.join(args.out, "recipes")) for a in arms]
        fork_checkpoint(args.out, cfg, corpus, args.quiet)
        for arm in arms:
            for seed in seeds:
                run_arm(args.out, cfg, corpus, arm, seed, args.threads, args.quiet, args.stop_after)
        merge(args.out, th)
        return 0
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Interrupted as e:
        # Quoted for the shell: an arm's ';' or brackets would otherwise split or glob the command.
        again = shlex.join(sys.argv[1:] if argv is None else list(argv))
        print(f"\nstopped: checkpoint written to {shlex.quote(str(e))}; resume with: python3 -m flashbits.train "
              f"{again}",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except ForkInterrupted as e:
        print(f"\ninterrupted: {e}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print("\ninterrupted before training started; nothing to resume", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
