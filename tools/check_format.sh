#!/usr/bin/env bash
# tools/check_format.sh [--fix]: every tracked C++ and CUDA source follows .clang-format.
# Without --fix, lists the files that differ and exits 1; with --fix, rewrites them.
# Needs clang-format 14 (Debian 12's `clang-format`); other versions format a few
# constructs differently, so CI pins the one tools/setup.sh installs.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
  echo "check_format.sh: clang-format not found (apt-get install clang-format)" >&2
  exit 2
fi
# The tracked sources; outside a git checkout (or without git), the sources under the tree
# but build folders. An empty list is an error: "0 files follow" passed with nothing checked.
if command -v git >/dev/null && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh')
else
  mapfile -t files < <(find . \( -path './build*' -o -path './.git' \) -prune -o -type f \
    \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print | sed 's|^\./||' | sort)
fi
if [ ${#files[@]} -eq 0 ]; then
  echo "check_format.sh: no C++ or CUDA source found: nothing checked" >&2
  exit 2
fi
if [ "${1:-}" = --fix ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -ne 0 ]; then
  echo "check_format.sh: ${#bad[@]} file(s) differ from .clang-format (tools/check_format.sh --fix):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format.sh: ${#files[@]} files follow .clang-format"
