#!/usr/bin/env python3
"""tools/check_layers.py: fails on an #include that points up or sideways (docs/DESIGN.md §1).

The layers, each using only those below it:
  formats/ -> emu/ -> traces/ (every file format: traces, captures, SFU tables and the probe
  and SFU capture formats, fb-fa2's host side) -> attention/ (the engine) -> studies/
  (scenarios, measurement, statistics, verdicts, bias runs) -> api/ (the one library API:
  input errors, names, model resolution, event JSON, output files) -> the faces: tools/ (the
  CLI), python/, bench/, fuzz/, and gpu/ (the CUDA programs and their device sessions).
A folder includes its own files and those of lower layers; a face never includes another
face. gpu/ includes only formats/, emu/ and traces/ (what its programs read and write). tests/
may include anything (it tests every layer). One edge is allowed by name, with its reason, in
ALLOWED below.

Usage: tools/check_layers.py [ROOT]   (exit 0: clean; 1: violations, one line each)
"""
import os
import re
import sys

RANK = {"formats": 0, "emu": 1, "traces": 2, "attention": 3, "studies": 4, "api": 5,
        "tools": 6, "python": 6, "bench": 6, "fuzz": 6, "gpu": 6}
FACES = {"tools", "python", "bench", "fuzz", "gpu"}
# Faces that may include only some of the layers below them.
ONLY = {
    # The CUDA programs and their host tools need the file formats and the emu's SFU rules,
    # never the engine or the API.
    "gpu": {"formats", "emu", "traces"},
}
ALLOWED = {
    # The CLI's own fuzz harness runs the CLI's subcommands (registry, option parsing) on
    # untrusted files: what it tests is the face itself.
    ("fuzz/fuzz_cli.cpp", "tools/cli_common.hpp"),
}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([a-z_]+)/([^"]+)"', re.M)
SOURCES = (".cpp", ".hpp", ".h", ".cu", ".cuh", ".c")


def violations(root: str):
    for layer in sorted(RANK):
        top = os.path.join(root, layer)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if not d.startswith(("build", "."))]
            for name in sorted(filenames):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for m in INCLUDE.finditer(text):
                    target, rest = m.group(1), m.group(2)
                    if target not in RANK or target == layer:
                        continue
                    edge = (rel, f"{target}/{rest}")
                    if edge in ALLOWED:
                        continue
                    line = text.count("\n", 0, m.start()) + 1
                    if layer in FACES and target in FACES:
                        yield f"{rel}:{line}: includes {target}/{rest}: a face ({layer}/) never includes another face"
                    elif layer in ONLY and target not in ONLY[layer]:
                        yield (f"{rel}:{line}: includes {target}/{rest}: {layer}/ includes only "
                               f"{', '.join(sorted(ONLY[layer]))}")
                    elif RANK[target] >= RANK[layer]:
                        yield (f"{rel}:{line}: includes {target}/{rest}: {target}/ is not below {layer}/ "
                               f"(layers: formats, emu, traces, attention, studies, api, faces)")


def main() -> int:
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = list(violations(root))
    for v in found:
        print(v)
    if found:
        print(f"check_layers: {len(found)} include(s) against the layering (docs/DESIGN.md §1)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
