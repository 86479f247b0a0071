"""A sweep's first-token attention claims read the suite's value at each run's training length, paired by seed."""

from types import SimpleNamespace

from posbench.grid.arm import Arm
from posbench.studies.claims import ClaimConfig
from posbench.sweeps.sweep_report import FIRST_TOKEN, build_tables, claims_part
from posbench.sweeps.sweep_spec import SweepConfig


def run(pe, seed, train_len=128):
    cfg = SimpleNamespace(model=SimpleNamespace(seq_len=train_len), train=SimpleNamespace(out_dir="/nonexistent"))
    return SimpleNamespace(name=f"{pe}_s{seed}", pe=pe, seed=seed, group="nano", cfg=cfg)


def result(mass_at):
    return {"suites": {"first_token": {"rows": [{"length": L, "mean": m} for L, m in mass_at.items()]}}}


def test_claim_values_are_the_training_length_rows_and_the_judge_decides_a_clear_gap():
    sweep = SweepConfig(name="t", pes=[], arms=[Arm(label="rope"), Arm(label="gated")], seeds=[0, 1, 2],
                        claims=[ClaimConfig(order="rope > gated", metric="first_token_mass")], n_boot=200)
    runs, results = [], {}
    for seed in range(3):
        for pe, mass in (("rope", (0.30, 0.31, 0.32)), ("gated", (0.05, 0.053, 0.049))):
            r = run(pe, seed)
            runs.append(r)
            # the 256 row is the same for both: were it read, the gap would vanish
            results[r.name] = result({128: mass[seed], 256: 0.01})
    tables = build_tables(sweep, runs, results)
    assert tables["first_token_train"].by_seed[("nano", "rope", FIRST_TOKEN)] == {0: 0.30, 1: 0.31, 2: 0.32}
    assert tables["first_token"].values[("nano", "gated", "256")] == [0.01, 0.01, 0.01]
    text = "\n".join(claims_part(sweep, tables, ["nano"]))
    assert "Verdict (nano): reproduced" in text, text
