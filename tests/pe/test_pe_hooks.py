"""The PE contract as two tables: the meaning (pe/encoding.py `HOOKS`) names every overridable member of
PositionalEncoding, the speed and accounting layer (pe/speed.py `SPEED`) every member of its providers; the
docstring's and docs/architecture.md's copies match the code (which classes override which member), no PE overrides
a derived member or defines a speed member itself, and wrappers (pe/wrapper.py) relay every hook by construction."""

import inspect
from pathlib import Path

import pytest
import torch
from torch import nn

import posbench.pe
from posbench.pe import encoding
from posbench.pe.encoding import DERIVED, HOOKS, PES, PositionalEncoding, contract_table
from posbench.pe.speed import SPEED, PESpeed
from posbench.pe.wrapper import NOT_RELAYED, WrapperPE
from tests.conftest import build_test_model

ROOT = Path(__file__).resolve().parents[2]
CLASS_ATTRIBUTES = {"name", "kind", "summary", "Config", "Speed"}  # ClassVars that describe a PE, not hooks


def pe_classes(base=PositionalEncoding):
    """Every subclass of `base` defined in posbench/pe/ (bases, layer views and nested providers included)."""
    found, todo = set(), [base]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith(posbench.pe.__name__ + ".") and sub not in found:
                found.add(sub)
            todo.append(sub)
    return found


def overriders():
    hooks = {hook.name: sorted(c.__name__ for c in pe_classes() if hook.name in c.__dict__) for hook in HOOKS}
    return hooks | {m.name: sorted(c.__qualname__ for c in pe_classes(PESpeed) if m.name in c.__dict__)
                    for m in SPEED}


def own_members():
    """Public members PositionalEncoding defines beyond nn.Module's."""
    return {n for n, v in PositionalEncoding.__dict__.items()
            if not n.startswith("_") and n not in CLASS_ATTRIBUTES and not hasattr(nn.Module, n)}


def test_every_hook_exists_and_every_overridable_member_is_a_hook():
    names = [hook.name for hook in HOOKS]
    assert len(names) == len(set(names))
    assert set(names) <= own_members(), set(names) - own_members()
    assert own_members() - set(names) == set(DERIVED), own_members() - set(names) - set(DERIVED)
    for hook in HOOKS:
        assert hook.called_on in encoding.CALLED_ON
        member = PositionalEncoding.__dict__[hook.name]
        if not isinstance(member, property):  # the signature in the table is the method's own
            params = list(inspect.signature(getattr(PositionalEncoding, hook.name)).parameters)
            shown = [p.split("=")[0].strip() for p in hook.signature[len(hook.name) + 1:-1].split(",") if p.strip()]
            assert [p for p in params if p not in ("self", "cls")] == shown, hook.name


def test_no_pe_overrides_a_derived_member():
    for cls in pe_classes():
        assert not set(DERIVED) & set(cls.__dict__), cls


def test_the_tables_in_the_docstring_and_the_architecture_doc_are_the_codes():
    assert contract_table(overriders(), markdown=False) in encoding.__doc__
    assert contract_table(overriders()) in (ROOT / "docs" / "architecture.md").read_text()


def test_a_table_row_follows_a_new_override():
    """The table is made from the classes: one more provider override shows in the row that names the member."""
    assert overriders()["qk_dim"] == ["FoPELayer.Speed", "SeqPE.Speed"]

    class Wide(PESpeed):
        def qk_dim(self, head_dim):
            return 3 * head_dim

    Wide.__module__ = posbench.pe.__name__ + ".wide"
    try:
        assert overriders()["qk_dim"] == ["FoPELayer.Speed", "SeqPE.Speed",
                                          "test_a_table_row_follows_a_new_override.<locals>.Wide"]
        assert contract_table(overriders(), markdown=False) not in encoding.__doc__
    finally:
        Wide.__module__ = __name__


@pytest.mark.parametrize("member", [m.name for m in SPEED])
def test_a_speed_member_on_the_pe_itself_is_refused_at_registration(member):
    """Model code asks `pe.speed`: a `layer_flops` written on the PE (the contract before its two layers) would never
    be called, so registering such a PE fails, naming where the member belongs."""
    cls = type("Stale", (PositionalEncoding,), {"summary": "stale", member: lambda self, *a: 0})
    with pytest.raises(TypeError, match=f"Stale defines {member} on the PE; .* `Speed` provider"):
        PES.register("stale_speed_member")(cls)
    assert "stale_speed_member" not in PES.names()


class Spy(PositionalEncoding):
    """An inner PE that records which hook the wrapper called, with which arguments."""

    def __init__(self):
        nn.Module.__init__(self)
        self.calls = []

    def __getattribute__(self, name):
        if name in {h.name for h in HOOKS} and name not in ("max_positions", "is_relative"):
            calls = object.__getattribute__(self, "__dict__")["calls"]
            return lambda *args: calls.append((name, args)) or name
        if name in ("max_positions", "is_relative"):
            object.__getattribute__(self, "__dict__")["calls"].append((name, ()))
            return name
        return super().__getattribute__(name)


@pytest.mark.parametrize("hook", [h for h in HOOKS if h.called_on == "model" and h.name not in NOT_RELAYED],
                         ids=lambda h: h.name)
def test_the_wrapper_base_relays_every_model_hook(hook):
    wrapper = object.__new__(WrapperPE)
    nn.Module.__init__(wrapper)
    wrapper.inner = Spy()
    member = getattr(type(wrapper), hook.name)
    if isinstance(member, property):
        assert getattr(wrapper, hook.name) == hook.name
        assert wrapper.inner.calls == [(hook.name, ())]
    else:
        args = tuple(object() for _ in inspect.signature(getattr(PositionalEncoding, hook.name)).parameters
                     if _ != "self")
        assert getattr(wrapper, hook.name)(*args) == hook.name
        assert wrapper.inner.calls == [(hook.name, args)]


def test_every_hook_reaches_a_wrappers_inner_pe():
    """Hooks not relayed by name reach the inner PE otherwise: "layer" hooks through the relayed layer_pe,
    "module" hooks through the inner PE being a submodule, `check_model` through the inner config; `drop` and
    `data_positions` are not relayed, as each decides a derived property (a wrapper cannot drop; only coupled,
    which says so itself, reads the data's ids)."""
    for name in ("randomized", "coupled"):
        model = build_test_model(name, overrides=["pe.inner.name=alibi"])
        wrapper = model.pe
        assert isinstance(wrapper, WrapperPE) and wrapper.kind == "bias"
        for layer in range(4):
            assert wrapper.layer_pe(layer) is wrapper.inner.layer_pe(layer)
        assert wrapper.inner in list(wrapper.modules())
        assert not type(wrapper).can_drop() and NOT_RELAYED == ("drop", "data_positions")
        assert type(wrapper).reads_data_positions() == (name == "coupled")
        for hook in HOOKS:
            assert hook.called_on in ("model", "layer", "module", "class")
            if hook.called_on == "model" and hook.name not in NOT_RELAYED:
                assert hook.name in WrapperPE.__dict__


def test_a_wrapper_runs_its_inner_bias():
    """randomized(alibi) with evaluation's dense positions computes what alibi computes on the same weights."""
    inner = build_test_model("alibi").eval()
    wrapped = build_test_model("randomized", overrides=["pe.inner.name=alibi", "pe.sample_at_eval=false"]).eval()
    wrapped.load_state_dict(inner.state_dict(), strict=False)
    idx = torch.randint(0, 61, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(wrapped(idx).logits, inner(idx).logits, rtol=0, atol=0)


def test_coupled_relays_the_inner_layer_windows():
    """layer_window is a model hook: a coupled RNoPE-SWA keeps the inner PE's sliding windows per layer."""
    model = build_test_model("coupled", overrides=["pe.inner.name=rnope_swa", "pe.inner.window=5"])
    assert [model.pe.layer_window(i) for i in range(4)] == [5, 5, 5, None]
    assert [b.attn.kernel.window for b in model.blocks] == [5, 5, 5, None]


def test_every_registered_pe_builds_with_its_hooks_answering():
    for name in PES.names():
        pe = build_test_model(name).pe
        assert pe.layer_pe(0) is not None and isinstance(pe.is_relative, bool)
