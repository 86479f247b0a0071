"""The PE contract's second layer (pe/speed.py): a PE written with its meaning alone (the base provider, `PESpeed`:
no fast forms, derived accounting) trains and evaluates as the same PE with its providers' fast forms, and its
derived prices are conservative."""

import pytest
import torch

from posbench.pe import PES
from posbench.pe.speed import LOGITS_MOD_COPIES, PESpeed
from tests.conftest import build_test_model

# the providers with fast forms: a distance table (every bias PE), far fields, FIRE's per-row evaluator
FAST = ("fire", "alibi", "t5")


@pytest.fixture
def meaning_only(request):
    """`<name>_meaning`: the registered PE `name` with its provider replaced by the base one, registered for the
    test and removed after it."""
    name = request.param
    twin = f"{name}_meaning"
    PES.register(twin)(type(f"{PES.get(name).__name__}Meaning", (PES.get(name),), {"Speed": PESpeed}))
    yield name, twin
    PES.unregister(twin)


def twins(name, twin, overrides):
    fast = build_test_model(name, overrides=overrides)
    slow = build_test_model(twin, overrides=overrides)
    slow.load_state_dict(fast.state_dict())
    return fast, slow


@pytest.mark.parametrize("meaning_only", FAST, indirect=True)
def test_a_pe_with_only_its_meaning_evaluates_and_trains_as_with_its_fast_forms(meaning_only):
    name, twin = meaning_only
    overrides = ["model.attention=sdpa_bias", "model.n_layers=1", "model.seq_len=32"] + \
        (["pe.threshold_init=12"] if name == "fire" else [])
    fast, slow = twins(name, twin, overrides)
    pos = torch.arange(32.0)
    assert fast.pe.layer_pe(0).speed.fast_bias(0, pos, pos).table(4) is not None  # the fast model has fast forms
    assert slow.pe.layer_pe(0).speed.fast_bias(0, pos, pos) is None
    idx = torch.randint(0, 61, (2, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # the no-grad paths: tables, far fields, FIRE's piecewise rows past its threshold of 12
        torch.testing.assert_close(fast.eval()(idx).logits, slow.eval()(idx).logits, rtol=1e-5, atol=1e-5)
    losses = []
    for model in (fast.train(), slow.train()):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        run = []
        for step in range(2):
            batch = torch.randint(0, 61, (2, 33), generator=torch.Generator().manual_seed(step))
            loss = model(batch[:, :-1], batch[:, 1:]).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            run.append(loss.item())
        losses.append(run)
    assert losses[0] == pytest.approx(losses[1], rel=1e-5, abs=1e-6)
    for a, b in zip(fast.parameters(), slow.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["cope", "stick_breaking", "path"])
def test_the_derived_price_of_a_logits_mod_is_above_every_measured_one(name):
    """Without its own `logits_mod_bytes` a PE is charged LOGITS_MOD_COPIES logit matrices: more than each PE here
    measured (scripts/bench_eval_memory.py) at a full forward, so the memory check errs toward refusing."""
    pe = build_test_model(name).pe.layer_pe(0)
    derived = PESpeed(pe)
    for B, H, T in ((2, 4, 64), (1, 4, 1024)):
        assert derived.logits_mod_bytes(B, H, T, T) == 4 * B * H * T * T * LOGITS_MOD_COPIES
        assert derived.logits_mod_bytes(B, H, T, T) >= pe.speed.logits_mod_bytes(B, H, T, T) > 0
    assert PESpeed(build_test_model("rope").pe).logits_mod_bytes(2, 4, 64, 64) == 0  # no logits_mod: nothing
    pos = torch.arange(4.0)
    assert derived.layer_flops(0, 64) == (0.0, 0.0) and derived.fast_bias(0, pos, pos) is None


def test_position_free_is_derived_from_the_hooks_not_the_kind():
    """NoPE layers (a hybrid's fourth) are position-free; every layer of a rotary, bias or absolute PE is not."""
    hybrid = build_test_model("hybrid").pe
    assert [hybrid.layer_pe(i).position_free for i in range(4)] == [False, False, False, True]
    assert build_test_model("none").pe.position_free
    assert not any(build_test_model(n).pe.position_free for n in ("rope", "alibi", "learned", "cope"))
