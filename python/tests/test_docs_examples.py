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
