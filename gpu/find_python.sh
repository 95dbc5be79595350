# gpu/find_python.sh: sourced by the CPU rehearsals (gpu/rehearse_*.sh) and gpu/import_session.sh.
# find_python MODULES prints the first of $FB_PYTHON, python3 and /usr/bin/python3 that imports
# every module named (comma-separated, as `import` takes them), or nothing when none does; the
# caller decides whether that is a skip or an error. The first python3 on PATH may lack them
# (a pyenv interpreter beside Debian's): check_paths.py then skipped its value checks unseen.
find_python() {
  local cand
  for cand in ${FB_PYTHON:-} python3 /usr/bin/python3; do
    if "$cand" -c "import $1" 2>/dev/null; then
      echo "$cand"
      return 0
    fi
  done
}
