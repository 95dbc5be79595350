# tools/check_layers.py: the include-direction check CI runs (docs/DESIGN.md §1). It must pass
# on this tree and fail, naming file and line, on an include that points up or sideways.
import os
import subprocess
import sys

from conftest import ROOT

SCRIPT = os.path.join(ROOT, "tools", "check_layers.py")


def run(root):
    return subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True, timeout=120)


def test_this_tree_has_no_include_against_the_layers():
    p = run(ROOT)
    assert p.returncode == 0, p.stdout + p.stderr


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def test_an_include_up_or_sideways_fails_with_file_and_line(tmp_path):
    root = str(tmp_path)
    write(root, "emu/ok.cpp", '#include "formats/format.hpp"\n#include "emu/rounding.hpp"\n')
    write(root, "emu/up.cpp", '// an engine header from the emulator\n#include "attention/attention.hpp"\n')
    write(root, "python/src/face.cpp", '#include "api/names.hpp"\n#include "tools/cli_common.hpp"\n')
    write(root, "tests/test_any.cpp", '#include "tools/cli_common.hpp"\n#include "attention/attention.hpp"\n')
    p = run(root)
    assert p.returncode == 1
    lines = p.stdout.strip().splitlines()
    assert lines == [
        "emu/up.cpp:2: includes attention/attention.hpp: attention/ is not below emu/ "
        "(layers: formats, emu, traces, attention, studies, api, faces)",
        "python/src/face.cpp:2: includes tools/cli_common.hpp: a face (python/) never includes another face",
    ]
