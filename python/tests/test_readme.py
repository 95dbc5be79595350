# A new user's first steps: the README's "Python" section, run exactly as written.
import os
import re
import subprocess
import sys

from conftest import BUILD_PYTHON, ROOT


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
    assert lines[0].startswith("O elements the model does not reproduce: ")
    # The example has power: 16 independent samples (heads), never "inconclusive".
    assert re.match(r"(adds bias|no detectable bias|less biased than its format's floor) - O excess over the correctly rounded reference: \S+ ulp, CI \[",
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
