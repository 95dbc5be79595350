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
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh')
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
