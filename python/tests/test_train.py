# flashbits.train: the training experiment's driver (python/flashbits/train.py), run whole
# on the smoke configuration (CI's budget: well under 3 minutes on 2 cores).
#
# References: the fork's bit-for-bit agreement, a resumed run against an uninterrupted one,
# one process against one process per (arm, seed), exact binomial tails computed here with
# fractions, and the forced-ties batch on which Qiu & Yao's mechanism must show (fa-bf16acc's
# delta errs positive) and their fix must not.
import json
import math
import os
import shutil
import subprocess
import sys
from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")
import flashbits.train as train  # noqa: E402

from conftest import BUILD_PYTHON  # noqa: E402

ARMS = "fp32,fa-bf16acc,fa-bf16acc+dynmax"


def run_driver(*args, check_rc=0):
    env = dict(os.environ, PYTHONPATH=BUILD_PYTHON, PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run([sys.executable, "-m", "flashbits.train", *args], capture_output=True, text=True,
                       env=env, timeout=300)
    if check_rc is not None:
        assert p.returncode == check_rc, p.stderr
    return p


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    # Real text, as the default corpus is: Debian's fortunes when installed, else this file's
    # own source (any UTF-8 text will do for the driver's mechanics).
    path = tmp_path_factory.mktemp("corpus") / "text.txt"
    src = train.DEFAULT_CORPUS_DIR
    if os.path.isdir(src):
        files = train._corpus_files(src)[:3]
        path.write_text("\n".join(open(f, encoding="utf-8").read() for f in files), encoding="utf-8")
    else:
        path.write_text(open(__file__, encoding="utf-8").read() * 20, encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, corpus):
    out = tmp_path_factory.mktemp("smoke")
    p = run_driver("--preset", "smoke", "--corpus", corpus, "--out", str(out), "--arms", ARMS,
                   "--probe-batch", "forced-ties", "--quiet")
    with open(out / "summary.json") as f:
        return out, json.load(f), p.stdout


def test_smoke_losses_are_finite_and_every_output_is_written(smoke):
    out, summary, stdout = smoke
    assert set(summary["arms"]) == set(ARMS.split(","))
    for name, arm in summary["arms"].items():
        assert math.isfinite(arm["final_loss"]) and not arm["diverged"]
        assert set(arm) >= {"final_loss", "diverged", "delta_error_sum", "delta_error_sign_p",
                            "wq_spectral_norm_ratio", "per_seed", "o_error_sum", "o_error_sign_p"}
        assert set(arm["per_seed"]) == {"0", "1"}
        for seed in (0, 1):
            rows = train.read_steps(str(out / "runs" / train.parse_arm(name).slug / f"seed{seed}" / "steps.csv"))
            assert [r["step"] for r in rows] == list(range(11, 41))
            assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in rows)
    assert (out / "plots" / "loss_seed0.svg").read_text().startswith("<svg")
    assert (out / "plots" / "L1_delta_error_sum_seed1.svg").exists()
    assert "verdicts (diverged: a 50-step mean loss > 0.5 nats" in stdout  # thresholds printed


def test_smoke_arms_agree_bit_for_bit_at_the_fork(smoke):
    _, summary, _ = smoke
    for seed in ("0", "1"):
        forks = {name: arm["per_seed"][seed]["fork"] for name, arm in summary["arms"].items()}
        assert len({f["weights_sha256"] for f in forks.values()}) == 1
        assert len({f["loss"].hex() if isinstance(f["loss"], float) else f["loss"] for f in forks.values()}) == 1


def test_smoke_forced_ties_show_the_mechanism_in_fa_bf16acc_and_not_with_dynmax(smoke):
    _, summary, _ = smoke
    plain, fixed = summary["arms"]["fa-bf16acc"], summary["arms"]["fa-bf16acc+dynmax"]
    # Qiu & Yao: tied maxima make P-bar = 1, bf16 O rounds away from zero (V < 0), delta errs > 0.
    assert plain["delta_error_sum"] > 0
    assert plain["delta_error_sign_p"] < 0.01
    assert plain["verdict"] == "mechanism present, no divergence"
    assert fixed["delta_error_sign_p"] >= 0.01
    assert fixed["verdict"] == "no effect seen"
    layer = plain["per_seed"]["0"]["layers"]["1"]
    assert layer["tie_rate"] > 0.9  # every probed row but the first has its max tied


def test_resuming_from_a_checkpoint_reproduces_the_next_losses_bit_for_bit(smoke, tmp_path, corpus):
    out, _, _ = smoke
    args = ["--preset", "smoke", "--corpus", corpus, "--out", str(tmp_path), "--arms", "fa-bf16acc", "--seeds", "0",
            "--probe-batch", "forced-ties", "--quiet"]
    stopped = run_driver(*args, "--stop-after", "7", check_rc=130)
    assert "resume with: python3 -m flashbits.train" in stopped.stderr
    assert (tmp_path / "runs" / "fa-bf16acc" / "seed0" / "checkpoint.pt").exists()
    assert not (tmp_path / "runs" / "fa-bf16acc" / "seed0" / "steps.csv").exists()
    run_driver(*args)
    resumed = (tmp_path / "runs" / "fa-bf16acc" / "seed0" / "steps.csv").read_text()
    straight = (out / "runs" / "fa-bf16acc" / "seed0" / "steps.csv").read_text()
    assert resumed == straight  # every loss, gradient norm and metric, as exact decimal round trips


def test_one_process_per_arm_and_seed_merges_to_the_same_summary(smoke, tmp_path, corpus):
    out, summary, _ = smoke
    for arm in ARMS.split(","):
        for seed in ("0", "1"):
            run_driver("--preset", "smoke", "--corpus", corpus, "--out", str(tmp_path), "--arm", arm, "--seed", seed,
                       "--probe-batch", "forced-ties", "--quiet")
    run_driver("merge", "--out", str(tmp_path), "--quiet")
    with open(tmp_path / "summary.json") as f:
        assert json.load(f) == summary


def test_an_arm_without_its_control_run_gets_no_verdict(smoke, tmp_path):
    # Divergence is judged against the fp32 control of the same seed; merged without one, an
    # arm was "no effect seen" with "diverged": false, a comparison never made.
    out, summary, _ = smoke
    shutil.copytree(out / "runs" / "fa-bf16acc", tmp_path / "runs" / "fa-bf16acc")
    for name in ("config.json", "fork.pt"):
        shutil.copy(out / name, tmp_path / name)
    run_driver("merge", "--out", str(tmp_path), "--quiet")
    with open(tmp_path / "summary.json") as f:
        alone = json.load(f)["arms"]["fa-bf16acc"]
    assert alone["diverged"] is None
    assert alone["verdict"].startswith("undetermined: no fp32 control run")
    assert alone["seeds_without_control"] == summary["arms"]["fa-bf16acc"]["seeds"]
    # With its control the same arm is judged, and lists no seed without one.
    assert summary["arms"]["fa-bf16acc"]["diverged"] is False
    assert summary["arms"]["fa-bf16acc"]["seeds_without_control"] == []


@pytest.mark.parametrize("args, message", [
    (["--corpus", "/nonexistent/corpus.txt"], "error: corpus /nonexistent/corpus.txt: no such file"),
    (["--arms", "no-such-model"], "error: arm 'no-such-model': model no-such-model"),
    (["--arms", "fa-bf16acc[o_buffer_format=e9m9]"], "error: arm 'fa-bf16acc[o_buffer_format=e9m9]'"),
    (["--arms", "fa-bf16acc[no_such_stage=fp32]"], "no_such_stage"),
    (["--n-embd", "520", "--n-head", "2"], "error: arm 'fa-bf16acc': "),
    (["--emulate-layers", "5"], "error: --emulate-layers: layer 5 outside 0..1"),
    (["--lr", "-1"], "error: --lr -1.0: expected a finite positive number"),
    (["--n-embd", "30", "--n-head", "4"], "error: --n-embd 30: not a multiple of --n-head 4"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, corpus, args, message):
    base = ["--preset", "smoke", "--corpus", corpus, "--out", str(tmp_path), "--arms", "fa-bf16acc", "--seeds", "0"]
    p = run_driver(*base, *args, check_rc=2)
    assert message in p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_empty_and_non_utf8_corpora_are_refused(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    p = run_driver("--preset", "smoke", "--corpus", str(empty), "--out", str(tmp_path / "o"), check_rc=2)
    assert p.stderr.strip() == f"error: corpus {empty}: empty"
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"abc\xff\xfe" * 100)
    p = run_driver("--preset", "smoke", "--corpus", str(binary), "--out", str(tmp_path / "o"), check_rc=2)
    assert "not UTF-8 text (byte 3" in p.stderr
    short = tmp_path / "short.txt"
    short.write_text("hello world")
    p = run_driver("--preset", "smoke", "--corpus", str(short), "--out", str(tmp_path / "o"), check_rc=2)
    assert "11 characters; at least 340 are needed" in p.stderr


def test_corrupt_and_mismatched_checkpoints_are_refused(tmp_path, corpus):
    base = ["--preset", "smoke", "--corpus", corpus, "--out", str(tmp_path), "--arms", "fp32", "--seeds", "0",
            "--quiet"]
    run_driver(*base)
    p = run_driver(*base, "--n-embd", "64", check_rc=2)
    assert "config.json: written for another configuration (model:" in p.stderr
    (tmp_path / "runs" / "fp32" / "seed0" / "checkpoint.pt").write_bytes(b"not a checkpoint")
    p = run_driver(*base, check_rc=2)
    assert "checkpoint.pt: cannot be read" in p.stderr and "Traceback" not in p.stderr


def test_corpus_loading_on_small_data(tmp_path):
    text = "to be, or not to be: that is the question.\n" * 30
    f = tmp_path / "c.txt"
    f.write_text(text)
    c = train.load_corpus(str(f), block_size=8)
    assert c.vocab == "".join(sorted(set(text)))
    ids = torch.cat([c.train, c.val]).tolist()
    assert "".join(c.vocab[i] for i in ids) == text
    assert len(c.train) == int(len(text) * 0.9)
    d = tmp_path / "dir"
    d.mkdir()
    (d / "b").write_text("second " * 40)
    (d / "a").write_text("first " * 40)
    (d / "a.dat").write_bytes(b"\x00\x01index")
    c = train.load_corpus(str(d), block_size=8)
    assert "".join(c.vocab[i] for i in torch.cat([c.train, c.val]).tolist()) == "first " * 40 + "\n" + "second " * 40


def test_batches_depend_on_seed_and_step_only():
    a = train.batch_indices((3,), 17, 8, 10_000, 32)
    b = train.batch_indices((3,), 17, 8, 10_000, 32)
    assert (a == b).all()
    assert not (a == train.batch_indices((3,), 18, 8, 10_000, 32)).all()
    assert not (a == train.batch_indices((4,), 17, 8, 10_000, 32)).all()


def test_sign_test_is_the_exact_binomial_tail():
    for pos, neg in ((0, 10), (3, 9), (8, 8), (20, 3), (2100, 1900), (3000, 1000)):
        n, k = pos + neg, min(pos, neg)
        tail = sum(Fraction(math.comb(n, i), 2 ** n) for i in range(k + 1))
        want = float(min(1, 2 * tail))
        assert train.sign_test_p(pos, neg) == (pytest.approx(want, rel=1e-12) if want > 0 else 0.0)
    assert train.sign_test_p(0, 0) == 1.0


def test_divergence_rule():
    th = train.Thresholds()
    control = [3.0] * 400
    assert not train.diverged([3.4] * 400, control, th)  # 0.4 nats above: within the threshold
    late = [3.0] * 250 + [3.6] * 150  # 0.6 above for 150 steps; the 50-step mean crosses after ~42
    assert train.diverged(late, control, th)
    short = [3.0] * 320 + [3.6] * 80  # above for fewer than 100 steps
    assert not train.diverged(short, control, th)
    assert train.diverged([3.0] * 250 + [float("nan")] * 150, control, th)


def test_arm_specs():
    a = train.parse_arm("fa-bf16acc+dynmax[o_buffer_format=e8m5]")
    assert a.model == "fa-bf16acc+dynmax" and a.recipe == {"name": a.name, "stages": {"o_buffer_format": "e8m5"}}
    assert train.split_arms("fp32,fa-bf16acc+dynmax:beta=2;tol=0.001,x[a=b;c=d]") == [
        "fp32", "fa-bf16acc+dynmax:beta=2,tol=0.001", "x[a=b,c=d]"]
    with pytest.raises(train.UsageError, match="fp32 is not a kernel model"):
        train.parse_arm("fp32[recipe=x.json]")
    cfg = train.StudyConfig(emulate_layers=(1,))
    everywhere, some = train.parse_arm("pytorch-fa2-sm90[layers=all]"), train.parse_arm("fa2-sm80[layers=0+3]")
    assert [everywhere.emulates(i, cfg) for i in range(4)] == [True] * 4
    assert [some.emulates(i, cfg) for i in range(4)] == [True, False, False, True]
    assert [train.parse_arm("fa2-sm80").emulates(i, cfg) for i in range(4)] == [False, True, False, False]
    assert not train.parse_arm("fp32").emulates(1, cfg)
    with pytest.raises(train.UsageError, match="layers=x: expected 'all' or N"):
        train.parse_arm("fa2-sm80[layers=x]")


def test_ctrl_c_writes_a_checkpoint_and_says_how_to_resume(tmp_path, corpus):
    import signal
    import time
    env = dict(os.environ, PYTHONPATH=BUILD_PYTHON, PYTHONDONTWRITEBYTECODE="1")
    args = [sys.executable, "-m", "flashbits.train", "--preset", "smoke", "--corpus", corpus, "--out", str(tmp_path),
            "--arms", "fa-bf16acc", "--seeds", "0", "--steps", "1000000"]
    p = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run = tmp_path / "runs" / "fa-bf16acc" / "seed0"
    # The progress line (stderr is not a terminal: one line at the first step, then every 30 s)
    # says the step loop runs; Ctrl-C from then on must checkpoint.
    seen = []
    for line in p.stderr:
        seen.append(line)
        if line.startswith("fa-bf16acc seed 0 ["):
            break
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    out, rest = p.communicate(timeout=120)
    err = "".join(seen) + rest
    assert p.returncode == 130, err
    assert "stopped: checkpoint written to" in err and "resume with: python3 -m flashbits.train" in err
    assert "Traceback" not in err
    ck = train.load_checkpoint(str(run / "checkpoint.pt"), "this run")
    assert ck["step"] >= 1 and len(ck["rows"]) == ck["step"]
