# A new user's first steps: the README's "Python" section, run exactly as written.
import os
import re
import subprocess
import sys

import pytest

from conftest import BUILD_PYTHON, CLI, ROOT


def readme_section(title):
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def test_readme_python_example_runs_as_written(tmp_path):
    section = readme_section("Python")
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the Python section has one python block: the quick start"
    script = tmp_path / "readme_example.py"
    script.write_text(blocks[0])
    env = dict(os.environ, PYTHONPATH=BUILD_PYTHON)
    p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    # Without a GPU here, the line says its O is the emulator's own (a match proves nothing).
    assert lines[0].startswith("O elements the model does not reproduce (emulated): "), lines[0]
    # The example has power: 16 independent samples (heads), never "inconclusive".
    assert re.match(r"(adds bias|no detectable added bias|less biased than its format's floor) - O excess over the correctly rounded reference: \S+ ulp, CI \[",
                    lines[1]), p.stdout
    assert (tmp_path / "capture.safetensors").exists()


def test_readme_import_command_works():
    section = readme_section("Python")
    cmd = re.search(r'PYTHONPATH=build/python /usr/bin/python3 -c "(.*?)"\n', section).group(1)
    p = subprocess.run([sys.executable, "-c", cmd], env=dict(os.environ, PYTHONPATH=BUILD_PYTHON), cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "[16043]", p.stdout + p.stderr


def test_readme_training_example_runs_as_written(tmp_path):
    section = readme_section("Training")
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the Training section has one python block"
    script = tmp_path / "training_example.py"
    script.write_text(blocks[0])
    p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=dict(os.environ, PYTHONPATH=BUILD_PYTHON),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip() == "torch.float32 torch.Size([2, 4, 64, 32])"


def tour_commands():
    """The `flashbits` command lines of the README's tour, continuation lines joined and
    comments dropped."""
    section = readme_section("A five-minute tour")
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line.startswith("build/tools/flashbits "):
                commands.append(line)
    return commands


def test_readme_tour_commands_run_as_written(tmp_path):
    commands = tour_commands()
    assert len(commands) == 6, commands
    # Run from a folder that sees the repository's inputs under their README names, so that
    # outputs (row3.svg) land there and not in the checkout.
    for name in ("traces", "docs"):
        os.symlink(os.path.join(ROOT, name), tmp_path / name)
    outputs = {}
    for command in commands:
        argv = [CLI] + command.split()[1:]
        p = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert p.returncode in (0, 1, 4) and "error:" not in p.stderr, f"{command}: exit {p.returncode}: {p.stderr}"
        outputs[command] = p.stdout
    # What the README says each shows: the hardware capture replays bit for bit, and the
    # bf16-accumulator recipe is biased on sink rows (Qiu & Yao, docs/DESIGN.md §7).
    assert "result: all compared values match" in outputs[commands[0]]
    assert "all compared values match" in outputs[commands[1]]
    assert "adds bias" in outputs[commands[3]]
    assert (tmp_path / "row3.svg").exists()


# A stand-in for torch on a GPU machine, so that the block's choice of model runs on the CPU:
# cuda reports the capability in FAKE_CAPABILITY, and the "flash kernel" (the emulated
# FAKE_KERNEL) answers only inside sdpa_kernel(SDPBackend.FLASH_ATTENTION).
FAKE_TORCH = {
    "torch/__init__.py": '''
bfloat16 = "bfloat16"
class _Tensor:
    def __init__(self, a): self.a = a
    def float(self): return self
    def cpu(self): return self
    def numpy(self): return self.a
def tensor(x, dtype=None, device=None):
    assert dtype == bfloat16 and device == "cuda", (dtype, device)
    return _Tensor(x)
from . import cuda, nn
''',
    "torch/cuda.py": '''
import os
def is_available(): return True
def get_device_capability(): return tuple(int(x) for x in os.environ["FAKE_CAPABILITY"].split("."))
def get_device_name(): return "Fake GPU"
''',
    "torch/nn/__init__.py": "from . import attention, functional\n",
    "torch/nn/attention.py": '''
import contextlib, enum
class SDPBackend(enum.Enum):
    MATH = 0
    FLASH_ATTENTION = 1
pinned = []
@contextlib.contextmanager
def sdpa_kernel(backend):
    pinned.append(backend)
    yield
    pinned.pop()
''',
    "torch/nn/functional.py": '''
import os
from .attention import SDPBackend, pinned
def scaled_dot_product_attention(q, k, v):
    if pinned != [SDPBackend.FLASH_ATTENTION]:
        raise RuntimeError("the flash backend was not pinned")
    import flashbits as fb
    return type(q)(fb.attention(q.a, k.a, v.a, os.environ["FAKE_KERNEL"]).o)
''',
}


def _trace_metadata(path):
    # The safetensors header read directly: 8-byte little-endian length, then JSON.
    import json
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))["__metadata__"]


def _run_block_on_fake_gpu(tmp_path, capability, kernel):
    for name, text in FAKE_TORCH.items():
        (tmp_path / "fake" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fake" / name).write_text(text)
    blocks = re.findall(r"```python\n(.*?)```", readme_section("Python"), re.S)
    script = tmp_path / "readme_example.py"
    script.write_text(blocks[0])
    env = dict(os.environ, PYTHONPATH=f"{tmp_path / 'fake'}{os.pathsep}{BUILD_PYTHON}", FAKE_CAPABILITY=capability,
               FAKE_KERNEL=kernel)
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.parametrize("capability, model", [("8.0", "pytorch-fa2-sm80"), ("8.6", "pytorch-fa2-sm80"),
                                               ("8.9", "pytorch-fa2-sm80"), ("9.0", "pytorch-fa2-sm90")])
def test_readme_python_example_records_the_model_of_the_gpu_it_ran_on(tmp_path, capability, model):
    # It recorded pytorch-fa2-sm90 and the H200's SFUs on every GPU, and did not pin the
    # flash backend (the fake kernel refuses to run unpinned).
    p = _run_block_on_fake_gpu(tmp_path, capability, model)
    assert p.returncode == 0, p.stdout + p.stderr
    meta = _trace_metadata(tmp_path / "capture.safetensors")
    assert meta["model"] == model and meta["source"] == "cuda:Fake GPU"
    if model == "pytorch-fa2-sm80":  # replayed with the model's own SFUs, as the kernel ran
        assert p.stdout.startswith("O elements the model does not reproduce (cuda:Fake GPU): 0 of ")


@pytest.mark.parametrize("capability", ["7.5", "10.0"])
def test_readme_python_example_says_a_gpu_is_not_modelled(tmp_path, capability):
    p = _run_block_on_fake_gpu(tmp_path, capability, "pytorch-fa2-sm90")
    major, minor = capability.split(".")
    assert p.returncode == 1 and f"sm_{major}{minor}: PyTorch's flash attention on this GPU is not modelled" in p.stderr
    assert not (tmp_path / "capture.safetensors").exists()
