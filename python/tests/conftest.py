# pytest set-up for the flashbits Python tests: finds the module and the CLI of the same build.
#
# The module is imported from $FLASHBITS_PYTHONPATH, else build/python of this checkout (the
# layout README "Python" documents); the CLI is $FLASHBITS_CLI, else build/tools/flashbits.
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_PYTHON = os.environ.get("FLASHBITS_PYTHONPATH", os.path.join(ROOT, "build", "python"))
if BUILD_PYTHON not in sys.path:
    sys.path.insert(0, BUILD_PYTHON)
CLI = os.environ.get("FLASHBITS_CLI", os.path.join(ROOT, "build", "tools", "flashbits"))


def run_cli(*args, stdin=None, check=True):
    """Runs the flashbits CLI; returns (exit code, stdout, stderr)."""
    p = subprocess.run([CLI, *args], input=stdin, capture_output=True, text=True, timeout=600)
    if check and p.returncode not in (0, 1, 4):  # 4: bias-test finished, inconclusive
        raise AssertionError(f"flashbits {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p.returncode, p.stdout, p.stderr


@pytest.fixture(scope="session")
def cli():
    if not os.access(CLI, os.X_OK):
        pytest.fail(f"the flashbits CLI is not built at {CLI} (cmake --build build --target flashbits)")
    return run_cli
