# gpu/rank_models.py (which kernel model reproduces a capture), on emulated traces whose
# generating model is known by construction: that model must be among the bit-exact ones, the
# bit-exact ones must rank first, and the counts must be replay's own.
import json
import os
import subprocess
import sys

from conftest import CLI, ROOT

SCRIPT = os.path.join(ROOT, "gpu", "rank_models.py")


def rank(*args):
    p = subprocess.run([sys.executable, SCRIPT, "--flashbits", CLI, *args], capture_output=True, text=True,
                       timeout=600)
    return p.returncode, p.stdout, p.stderr


def make_trace(cli, path, model, dtype="bf16"):
    rc, _, err = cli("make-trace", "--model", model, "--dtype", dtype, "--scenario", "random", "--seqlen", "64",
                     "--headdim", "32", "--seed", "11", "--backward", "--out", str(path))
    assert rc == 0, err


def test_the_generating_model_ranks_among_the_bit_exact_first(cli, tmp_path):
    for model, dtype in (("fa2-sm80", "bf16"), ("triton-tutorial", "fp16"), ("fa-bf16acc", "bf16")):
        trace = tmp_path / f"{model}.safetensors"
        make_trace(cli, trace, model, dtype)
        rc, out, err = rank(str(trace), "--json")
        assert rc == 0, err
        results = json.loads(out)
        ranked = [r for r in results if "refused" not in r]
        exact = [r["model"] for r in ranked if r["bit_exact"]]
        assert model in exact, (model, exact)
        assert [r["bit_exact"] for r in ranked] == sorted((r["bit_exact"] for r in ranked), reverse=True)
        # Below the bit-exact ones, by matching elements over all tensors.
        rest = [r["matching"] for r in ranked if not r["bit_exact"]]
        assert rest == sorted(rest, reverse=True)
        # Every base model is a candidate, ranked or refused (the fp16 models on a bf16 trace).
        listed = {r["model"] for r in results}
        _, models_json, _ = cli("models", "--json")
        bases = {m["name"] for m in json.loads(models_json)["kernel_models"] if not m["name"].startswith("+")}
        assert listed == bases
        # The counts are replay's own: one candidate that differs, checked against replay --json.
        differs = next(r for r in ranked if not r["bit_exact"])
        _, replay_json, _ = cli("replay", str(trace), "--model", differs["model"], "--json")
        for t in json.loads(replay_json)["tensors"]:
            assert differs["counts"][t["name"]] == [t["matching"], t["compared"]]


def test_text_output_and_refusals(cli, tmp_path):
    trace = tmp_path / "t.safetensors"
    make_trace(cli, trace, "fa2-sm80")
    rc, out, err = rank(str(trace), "--models", "standard-bf16,fa2-sm80,standard-fp16")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["fa2-sm80", "bit-exact"]
    assert lines[0].split()[2:4] == ["o", "2048/2048"]
    assert lines[1].split()[:2] == ["standard-bf16", "differs"]
    assert lines[2].split()[:2] == ["standard-fp16", "refused"]
    assert "reads fp16 inputs, not the trace's bf16" in lines[2]
    # No candidate can replay an unreadable trace: exit 2, one line naming the file.
    rc, out, err = rank(str(tmp_path / "absent.safetensors"), "--models", "fa2-sm80")
    assert rc == 2
    assert err.strip().count("\n") == 0 and "absent.safetensors" in err
    rc, _, err = rank(str(trace), "--models", ",")
    assert rc == 2 and "--models" in err
    rc, _, err = rank(str(trace), "--jobs", "0")
    assert rc == 2 and "--jobs 0" in err
