# One way to build a model (api/models.hpp): the name for the dtype, then the SFU set, then
# the recipe file, which replaces what it names. Python and the CLI resolve alike; before
# api/, Python applied the recipe first and let the set overwrite it.
import json

import numpy as np

import flashbits as fb


def _inputs():
    rng = np.random.default_rng(3)
    return [fb.round(rng.standard_normal((1, 2, 64, 32)) * 2, "bf16").values for _ in range(3)]


def test_a_recipe_wins_over_the_sfu_set(tmp_path):
    q, k, v = _inputs()
    only_ex2 = tmp_path / "ex2_correct.json"
    only_ex2.write_text(json.dumps({"name": "ex2 correct", "sfu": {"ex2": "correct"}}))
    spelled_out = tmp_path / "spelled_out.json"
    spelled_out.write_text(json.dumps({"name": "spelled out", "sfu": {"ex2": "correct", "lg2": "hw-sm90"}}))
    both = fb.attention(q, k, v, "pytorch-fa2-sm90", sfu="hw-sm90", recipe=str(only_ex2), threads=1)
    assert both.sfu.startswith("ex2: correct")
    assert "lg2: table" in both.sfu  # the set's measured lg2 stays where the recipe is silent
    # The same functions named one by one, with no set: the same bits.
    same = fb.attention(q, k, v, "pytorch-fa2-sm90", recipe=str(spelled_out), threads=1)
    np.testing.assert_array_equal(both.o, same.o)
    np.testing.assert_array_equal(both.lse, same.lse)
    # And the set alone (the H200's ex2) is another result: the order is visible.
    set_only = fb.attention(q, k, v, "pytorch-fa2-sm90", sfu="hw-sm90", threads=1)
    assert not (np.array_equal(set_only.o, both.o) and np.array_equal(set_only.lse, both.lse))


def test_auto_needs_a_capture():
    q, k, v = _inputs()
    try:
        fb.attention(q, k, v, "fa2-sm80", sfu="auto", threads=1)
    except ValueError as e:
        assert str(e).startswith("sfu auto: picks the set measured on a capture's GPU; there is no capture here")
    else:
        raise AssertionError("sfu='auto' without a capture was accepted")
