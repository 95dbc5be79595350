# gpu/torch_python.sh: sourced by the CPU rehearsals (gpu/rehearse_*.sh). Sets `py` to the first
# of $FB_PYTHON, python3 and /usr/bin/python3 that imports torch and numpy (the stand-ins need
# both), or to the empty string when none does; the caller decides whether that is a skip.
py=""
for cand in ${FB_PYTHON:-} python3 /usr/bin/python3; do
  if "$cand" -c 'import torch, numpy' 2>/dev/null; then py=$cand; break; fi
done
