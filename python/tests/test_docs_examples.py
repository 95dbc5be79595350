# docs/COMMANDS.md, the worked example of every subcommand, run as written: every `$ ` line
# of its indented blocks (continuation lines joined, the shell variables an example sets
# kept for the commands after it), in a scratch folder that sees the checkout's files, with
# `flashbits` the CLI of this build. Each command must exit 0, or 1 (a failed check or a
# detected bias, which some examples show on purpose) or 4 (bias-test inconclusive); the
# output lines the page shows under a command must appear in its stdout, in order, where
# `...` stands for any text (a whole line of `...` for any lines).
#
# Not run here, each with its reason: SKIP (commands that need a GPU machine's files) and
# SLOW (grids that take minutes on two cores: FLASHBITS_DOCS_SLOW=1 runs them too).
import os
import re
import shlex
import subprocess

import pytest

from conftest import CLI, ROOT

PAGE = os.path.join(ROOT, "docs", "COMMANDS.md")
SKIP = {
    "flashbits replay TRACE --sfu-dump": "runs on the device machine: the SFU dumps come from gpu/device_replay.sh",
}
SLOW = {
    "flashbits sweep --formats bf16,fp16 --round rne,sr --model fa2-sm80,fa-bf16acc": "16 configurations at seqlen 512",
    "flashbits sweep --formats bf16,fp16,e4m3 --round rne,rtz,sr,rto": "72 configurations at seqlen 1024",
}
ACCEPTED_EXIT = (0, 1, 4)


def page_examples():
    """[(line, command, shown output lines)] in page order; a command of several lines
    keeps its backslash-newlines (bash joins them)."""
    lines = open(PAGE, encoding="utf-8").read().split("\n")
    examples, current, in_fence = [], None, False
    for number, line in enumerate(lines, start=1):
        if line.startswith("```"):
            in_fence = not in_fence
            current = None
            continue
        if in_fence or not line.startswith("    "):
            current = None if line.strip() else current
            continue
        body = line[4:]
        if body.startswith("$ "):
            current = [number, body[2:], []]
            examples.append(current)
        elif current is not None and current[1].endswith("\\"):
            current[1] += "\n" + body
        elif current is not None:
            current[2].append(body.strip())
    return [tuple(e) for e in examples]


def shown_lines_appear(shown, output):
    """Whether every shown line matches an output line, in order (`...` = any text)."""
    got = [line.strip() for line in output.split("\n")]
    at = 0
    for want in shown:
        if want == "...":
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in want.split("...")) + r"\Z")
        while at < len(got) and not pattern.match(got[at]):
            at += 1
        if at == len(got):
            return False
        at += 1
    return True


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A folder whose entries link to the checkout's (so `traces/...` and `docs/...` resolve
    and written files stay out of the checkout), with bin/flashbits the built CLI."""
    if not os.access(CLI, os.X_OK):
        pytest.fail(f"the flashbits CLI is not built at {CLI}")
    folder = tmp_path_factory.mktemp("commands_md")
    for name in os.listdir(ROOT):
        if not name.startswith(".") and not name.startswith("build"):
            os.symlink(os.path.join(ROOT, name), folder / name)
    (folder / "bin").mkdir()
    os.symlink(CLI, folder / "bin" / "flashbits")
    return folder


def test_the_page_has_examples():
    examples = page_examples()
    assert len(examples) >= 30, "docs/COMMANDS.md lost its examples"
    for key in list(SKIP) + list(SLOW):
        assert any(key in command for _, command, _ in examples), f"{key!r} no longer on the page: drop it here"


def test_every_example_runs_as_written(scratch):
    env = dict(os.environ, PATH=f"{scratch / 'bin'}:{os.environ['PATH']}")
    slow_too = os.environ.get("FLASHBITS_DOCS_SLOW") == "1"
    variables, failures, ran = "", [], 0
    for number, command, shown in page_examples():
        if re.match(r"[A-Z_]+=", command):  # sets shell variables for the commands after it
            variables += command + "\n"
        if any(key in command for key in SKIP) or (not slow_too and any(key in command for key in SLOW)):
            continue
        p = subprocess.run(["bash", "-c", variables + command], cwd=scratch, env=env, capture_output=True, text=True,
                           timeout=900)
        ran += 1
        where = f"docs/COMMANDS.md:{number}: {command.splitlines()[0]}"
        if p.returncode not in ACCEPTED_EXIT:
            failures.append(f"{where}\n  exit {p.returncode}: {p.stderr.strip()[:300]}")
        elif not shown_lines_appear(shown, p.stdout):
            failures.append(f"{where}\n  the page shows:\n    " + "\n    ".join(shown) + "\n  stdout:\n    " +
                            "\n    ".join(p.stdout.splitlines()[:40]))
    assert ran >= 30
    assert not failures, "\n".join(failures)


# ---- docs/PYTHON.md "Replaying the captures you already have" ---------------------------------
# Its shell block and its one-line Python example, run as written on dumps of the kind the
# section describes: a bare `save_file` dump (tensors, no flashbits metadata) and an `.npz` in
# flash_attn's [batch, seq, heads, dim] layout with bf16 saved as uint16. Both are cut from an
# emulated pytorch-fa2-sm90 trace (make-trace), so the replays must agree bit for bit, and the
# npz's values must read back as the trace's.
PYTHON_PAGE = os.path.join(ROOT, "docs", "PYTHON.md")


def python_page_shell_block():
    text = open(PYTHON_PAGE, encoding="utf-8").read()
    section = text[text.index("## Replaying the captures you already have"):]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "docs/PYTHON.md lost its replay block"
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def write_bare_safetensors(path, tensors):
    """safetensors with no __metadata__: name -> (dtype string, shape, raw bytes)."""
    import json
    import struct
    header, offset, blobs = {}, 0, []
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def test_python_page_replay_block_runs_as_written(scratch, tmp_path):
    import numpy as np
    import flashbits as fb
    work = tmp_path / "dumps"
    work.mkdir()
    # A real dump: the H200 capture of PyTorch's FA2 (the page replays it with the SFUs measured
    # on sm_90, which a bare dump cannot name), stripped of its metadata below.
    t = fb.load_trace(os.path.join(ROOT, "traces/hw/h200/torch/torch_bf16_sink_d64.safetensors"))
    assert t.scale == 0.125 and not t.causal
    assert all(t.formats[name] == "bf16" for name in ("q", "k", "v", "o"))
    bits = {name: np.ascontiguousarray(fb.round(t[name], "bf16").bits) for name in ("q", "k", "v", "o")}
    lse = np.ascontiguousarray(t["lse"].astype(np.float32))  # fp32 values: exact
    assert np.array_equal(lse.astype(np.float64), t["lse"])
    # The LSE's [batch, heads, seq] shape is what tells the two layouts apart.
    dump = {name: ("BF16", b.shape, b.tobytes()) for name, b in bits.items()}
    dump["softmax_lse"] = ("F32", lse.shape, lse.tobytes())
    write_bare_safetensors(work / "dump.safetensors", dump)
    names = {"q": "query", "k": "key", "v": "value", "o": "out"}
    np.savez(work / "dump.npz", softmax_lse=lse, **{names[n]: b.transpose(0, 2, 1, 3) for n, b in bits.items()})

    env = dict(os.environ, PATH=f"{scratch / 'bin'}:{os.environ['PATH']}")
    # The page reads the shipped bare dumps (the next test runs it on them); here its commands
    # read this test's own dumps, whose tensor names (query, out, softmax_lse) and LSE (which
    # tells the two layouts apart) the shipped ones lack.
    commands = [c.replace("traces/examples/bare/", "") for c in python_page_shell_block()]
    assert len(commands) == 3 and commands[0].startswith("flashbits replay dump.safetensors")
    for command in commands:
        p = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        # The first replay is under the model that made the data: bit for bit (exit 0). The
        # last replays the imported trace under another model (fa2-sm90), which may differ
        # (exit 1, a result, as in docs/COMMANDS.md), but must run and give its verdict.
        same_model = command is commands[0] or command.startswith("flashbits import")
        assert p.returncode in ((0,) if same_model else (0, 1)), \
            f"docs/PYTHON.md: {command}\n exit {p.returncode}: {p.stderr.strip()[:400]}\n{p.stdout[-400:]}"
        if command.startswith("flashbits replay"):
            assert "result: " in p.stdout, p.stdout[-800:]

    text = open(PYTHON_PAGE, encoding="utf-8").read()
    example = re.search(r"In Python: `(flashbits\.load_trace\([^`]*\))`", text)
    assert example, "docs/PYTHON.md lost its load_trace example"
    old = os.getcwd()
    os.chdir(work)
    try:
        loaded = eval(example.group(1).replace("traces/examples/bare/", ""), {"flashbits": fb})  # noqa: S307
    finally:
        os.chdir(old)
    assert np.array_equal(fb.round(loaded["q"], "bf16").bits, bits["q"])
    assert np.array_equal(loaded["o"], t["o"])
    assert loaded.metadata["source"] == "cuda:NVIDIA H200"


def test_python_page_replays_a_top_left_capture_from_python_as_written():
    # The page's Python replay of a trace: with the trace's causal statement (t.causal_alignment)
    # a top-left hardware capture replays bit for bit (its asserts compare to the capture's own
    # O and dQ); fb.attention took no alignment before, and ran it bottom-right.
    text = open(PYTHON_PAGE, encoding="utf-8").read()
    section = text[text.index("## Replaying the captures you already have"):]
    # As written: the block imports flashbits itself (it failed pasted alone without that line).
    block = re.search(r"```python\n(import flashbits as fb[^\n]*\nt = fb\.load_trace.*?)```", section, re.S)
    assert block, "docs/PYTHON.md lost its Python replay block"
    old = os.getcwd()
    os.chdir(ROOT)
    try:
        scope = {}
        exec(block.group(1), scope)  # noqa: S102 - the page's own lines
    finally:
        os.chdir(old)
    assert scope["t"].causal_alignment == "top-left"


# ---- docs/TRAINING.md: the flashbits.torch call ------------------------------------------------
# The page's one Python block, run as written on small tensors: every keyword it shows must be
# accepted, and the result is the module's attention on the same inputs rounded to bf16.
TRAINING_PAGE = os.path.join(ROOT, "docs", "TRAINING.md")


def test_training_page_sdpa_call_runs_as_written():
    torch = pytest.importorskip("torch")
    import numpy as np
    import flashbits as fb
    text = open(TRAINING_PAGE, encoding="utf-8").read()
    block = re.search(r"```python\n(.*?)```", text, re.S)
    assert block and "scaled_dot_product_attention" in block.group(1), "docs/TRAINING.md lost its call"
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 48, 32, generator=gen, dtype=torch.float64) for _ in range(3))
    scope = {"q": q, "k": k, "v": v}
    exec(block.group(1), scope)  # noqa: S102 - the page's own lines
    o = scope["o"]
    assert o.shape == q.shape and o.dtype == q.dtype
    rounded = [fb.round(x.numpy(), "bf16").values for x in (q, k, v)]
    assert np.array_equal(o.numpy(), fb.attention(*rounded, "fa-bf16acc+dynmax").o)


def test_training_page_states_the_real_signature():
    # The page showed q, k, v and model among the positional arguments; model is keyword-only
    # and required, and the positional names are PyTorch's query, key, value. The signature
    # the page writes out (its comment lines) must be the function's.
    import ast
    import inspect
    pytest.importorskip("torch")
    import flashbits.torch as fbt
    block = re.search(r"```python\n(.*?)```", open(TRAINING_PAGE, encoding="utf-8").read(), re.S).group(1)
    comment = " ".join(line.lstrip("# ").strip() for line in block.splitlines() if line.startswith("#   "))
    shown = ast.parse(comment.replace("scaled_dot_product_attention(", "def f(", 1) + ": pass").body[0].args
    params = inspect.signature(fbt.scaled_dot_product_attention).parameters.values()
    positional = [p for p in params if p.kind == p.POSITIONAL_OR_KEYWORD]
    keyword_only = [p for p in params if p.kind == p.KEYWORD_ONLY]
    assert [a.arg for a in shown.args] == [p.name for p in positional]
    assert [a.arg for a in shown.kwonlyargs] == [p.name for p in keyword_only]
    assert [ast.literal_eval(d) for d in shown.defaults] == [p.default for p in positional
                                                             if p.default is not p.empty]
    assert [None if d is None else ast.literal_eval(d) for d in shown.kw_defaults] == \
        [None if p.default is p.empty else p.default for p in keyword_only]
    assert shown.kw_defaults[[a.arg for a in shown.kwonlyargs].index("model")] is None  # required



def test_python_page_bare_dump_commands_replay_bit_for_bit(tmp_path):
    # docs/PYTHON.md's bare-dump block, run as written from the repository root's view (the
    # newcomer audit found it read dump files nothing shipped): each replay must match.
    for link in ("traces", "docs"):
        os.symlink(os.path.join(ROOT, link), tmp_path / link)
    commands = python_page_shell_block()
    assert len(commands) == 3 and all("traces/examples/bare/dump." in c for c in commands[:2])
    for command in commands:
        assert command.startswith("flashbits ")
        p = subprocess.run(shlex.quote(CLI) + " " + command[len("flashbits "):], shell=True, cwd=tmp_path, capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, command + "\n" + p.stdout + p.stderr
        if " replay " in " " + command:
            assert "result: all compared values match" in p.stdout, command + "\n" + p.stdout
