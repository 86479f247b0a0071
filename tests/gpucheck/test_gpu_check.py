"""scripts/gpu_check.py: the budget, the isolated rows and the tables that every mode shares (hand-checked), the
kernels mode's error measures against hand-computed values, and its --dry-run end to end on the CPU with only the
packages of the GPU machine's image importable (a slow test: the same code the GPU call runs, at toy sizes)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posbench.gpucheck.common import Budget, Report, markdown_table
from posbench.gpucheck.correctness import grad_error, rel

ROOT = Path(__file__).resolve().parents[2]
# on the GPU machine's image these are absent (the device tool's package list): the check must not need them
NOT_ON_GPU_IMAGE = ["wandb", "datasets", "rustbpe", "mambapy", "streamlit", "plotly", "lm_eval", "selenium"]


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_budget_parts_are_shares_of_what_is_left():
    clock = Clock()
    b = Budget(100, clock)
    clock.now += 40
    assert b.left() == 60 and b.elapsed() == 40
    part = b.part(0.5)
    assert part.left() == 30 and part.allows(30) and not part.allows(30.5)
    clock.now += 100
    assert b.left() == -40 and b.part(0.5).left() == 0


def test_a_failing_row_is_a_row_and_json_is_written_after_each(tmp_path, capsys):
    report = Report("demo", tmp_path)
    report.attempt("t", {"k": 1}, lambda: {"x": 2.0})
    report.attempt("t", {"k": 2}, lambda: 1 / 0)
    report.attempt("t", {"k": 3}, lambda: {"x": 1.0, "pass": False})
    report.attempt("t", {"k": 4}, lambda: {"x": 1.0}, Budget(5), need_s=10)
    rows = json.loads((tmp_path / "demo.json").read_text())["tables"]["t"]
    assert [r["status"] for r in rows] == ["ok", "error", "FAIL", "skipped"]
    assert rows[1]["error"] == "ZeroDivisionError: division by zero"
    assert rows[3]["error"].startswith("budget:") and "needs ~10 s" in rows[3]["error"]
    text = markdown_table("T", rows, [("k", "key", ""), ("x", "x", ".1f")])
    lines = text.splitlines()
    assert lines[0] == "## T" and lines[1].split("|")[1:3] == [" key ", " x   "]
    assert lines[3].rstrip().endswith("| 2.0 |") and "error: ZeroDivisionError" in lines[4]
    assert "n/a" in lines[4] and "FAIL" in lines[5] and "skipped: budget" in lines[6]


def test_relative_errors_by_hand():
    ref = torch.tensor([3.0, 4.0])  # norm 5
    assert rel(torch.tensor([3.0, 5.0]), ref) == pytest.approx(1 / 5)
    ref_g = {"a": torch.tensor([3.0, 4.0]), "b": torch.tensor([1.0, 0.0]), "zero": torch.zeros(2)}
    got = {"a": torch.tensor([3.0, 4.5]), "b": torch.tensor([1.0, 0.5]), "zero": torch.ones(2)}
    assert grad_error(got, ref_g) == pytest.approx(0.5)  # b's 0.5 / 1 is the worst; zero's ||1, 1|| / sqrt(26) less
    # a negligible reference gradient (zero but for rounding) is measured against all gradients' norm, 5
    tiny = {"a": torch.tensor([3.0, 4.0]), "noise": torch.tensor([1e-9, 0.0])}
    assert grad_error({"a": tiny["a"], "noise": torch.tensor([2e-9, 0.0])}, tiny) == pytest.approx(1e-9 / 5)
    assert grad_error({"a": tiny["a"], "noise": torch.tensor([0.5, 0.0])}, tiny) == pytest.approx(0.5 / 5, rel=1e-6)
    # all gradients as one vector: ||(0, .5, 0, .5, 1, 1)|| / ||(3, 4, 1, 0, 0, 0)|| = sqrt(2.5) / sqrt(26)
    assert grad_error(got, ref_g, worst_parameter=False) == pytest.approx((2.5 / 26) ** 0.5)
    assert grad_error({"a": got["a"], "zero": got["zero"]}, ref_g) == 1.0  # a missing gradient is a whole error


def test_a_pe_that_draws_in_training_draws_the_same_in_a_row_as_in_its_reference():
    """SeqPE shifts a batch's positions at random in training mode (here at every forward: rate 1): each of a row's
    forwards runs at the generator state of the reference's, so the same kernel (eager against eager) differs by
    exactly 0, and flex on a CPU, whose forward is measured again after its missing backward, by rounding alone (it
    read a third draw before: a false failure). Unseeded, two forwards shift to different starts."""
    from posbench.gpucheck.correctness import Case, CheckDims, Reference, build, check_kernel

    case, dims, cpu = Case("x", "seqpe", ("pe.random_shift_rate=1.0",)), CheckDims(32, 4, 64, 32, 61, 2), "cpu"
    cpu = torch.device(cpu)
    ref = Reference.of(case, dims, cpu)
    same = check_kernel(case, dims, "eager", cpu, ref)
    assert same["fwd_err"] == 0.0 and same["grad_err"] == 0.0
    assert check_kernel(case, dims, "sdpa", cpu, ref)["pass"]
    flex = check_kernel(case, dims, "flex", cpu, ref)
    assert flex["grad_err"] is None and flex["pass"], flex
    model = build(case, dims, "eager", cpu, ref.state)
    with torch.no_grad():
        assert rel(model(ref.x).logits, model(ref.x).logits) > 1e-3  # the draws the rows must share


def test_kernel_kinds_by_name():
    from posbench.gpucheck.profile import OTHER, kind_of

    names = {
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": "matmul",
        "nvjet_tst_128x256_64x4_2x1_v_bz_coopB_TNT": "matmul",
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>": "attention",
        "triton_tem_fused_flex_attention_backward_0": "attention",
        "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1": "fused elementwise/reduction",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>": "optimizer",
        "aten::mm": "matmul",
        "Memcpy HtoD (Pageable -> Device)": "copy/cast",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL": OTHER,
    }
    assert {n: kind_of(n) for n in names} == names


def run_isolated(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """gpu_check.py in a fresh interpreter where the packages absent from the GPU image cannot be imported."""
    blocker = (
        "import importlib.abc, runpy, sys\n"
        f"BLOCKED = {NOT_ON_GPU_IMAGE!r}\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ImportError(f'{name} is not on the GPU image')\n"
        "sys.meta_path.insert(0, Block())\n"
        f"sys.argv = ['gpu_check.py', *{args!r}]\n"
        f"runpy.run_path({str(ROOT / 'scripts' / 'gpu_check.py')!r}, run_name='__main__')\n")
    return subprocess.run([sys.executable, "-c", blocker], cwd=tmp_path, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_kernels_dry_run_end_to_end(tmp_path):
    """The whole kernels mode on the CPU, every row (a budget that a busy machine cannot run out of): the profile
    first, then the throughput rows with every model.kernels option (those that cannot run on a CPU skipped with
    their reason), then the correctness rows never measured on a GPU before those measured; each passes; the
    tables print last."""
    done = run_isolated(["kernels", "--dry-run", "--budget-s", "1200", "--out", str(tmp_path / "out")], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tables = json.loads((tmp_path / "out" / "kernels.json").read_text())["tables"]
    out = done.stdout
    order = [out.index(f"[kernels] {part}: ") for part in ("profile", "throughput", "correctness", "tests", "resume")]
    assert order == sorted(order)
    assert tables["tests"][0]["status"] == "ok" and "skipped" in tables["tests"][0]["summary"]  # no CUDA here
    rows = tables["correctness"]
    assert {r["status"] for r in rows} == {"ok"}, [r for r in rows if r["status"] != "ok"]
    assert len(rows) >= 80 and all(r["pass"] for r in rows)
    assert {"sdpa", "flex", "sdpa_bias", "sdpa_dense", "kv-cache"} <= {r["kernel"] for r in rows}
    assert {"alibi+sinks", "alibi+chunk", "alibi+temperature", "fire+docs"} <= {r["pe"] for r in rows}
    assert {"cable", "drope", "path", "stick_breaking", "repo", "grape_m", "grape_m_ctx", "grape_a", "grape_ap",
            "selective_rope", "tape", "seqpe"} <= {r["pe"] for r in rows if r["family"] == "2025-2026"}
    assert any(r["kernel"].startswith("compiled(") for r in rows)
    flags = [r["measured_before"] for r in rows]
    assert flags == sorted(flags) and any(flags) and not all(flags)  # never measured first
    assert tables["resume"][0]["pass"] is True
    tp = tables["throughput"]
    options = {r["options"] for r in tp}
    assert {"torch", "loss=cce", "loss=liger_flce", "norm=liger", "mlp=liger"} <= options
    assert {"loss=cce, norm=liger, mlp=liger", "loss=liger_flce, norm=liger, mlp=liger"} <= options
    assert [(r["pe"], r["options"]) for r in tp][0] == ("rope", "torch") and tp[0]["vs_anchor"] == 1.0
    assert ("alibi", "torch") in [(r["pe"], r["options"]) for r in tp]
    for r in tp:
        if "liger" in r["options"]:  # Triton kernels: no CPU backend (or the package missing), said in the row
            assert r["status"] == "skipped", r
        if r["status"] == "skipped":
            assert r["error"].startswith("model.kernels.") and ("runs on cuda only" in r["error"]
                                                                or "is not installed" in r["error"]), r
        else:
            assert r["status"] == "ok" and r["tok_s"] > 0 and r["vs_anchor"] > 0, r
    (prof,) = tables["profile"]
    assert prof["status"] == "ok" and prof["step_ms"] > 0 and sum(prof["shares"].values()) == pytest.approx(1.0)
    assert prof["shares"]["matmul"] > 0 and len(prof["top"]) == 8
    assert out.index("## Kernel correctness") > out.index("# gpu_check kernels (dry run)")
    assert "## Where a training step's time goes: nano rope" in out


def test_no_gpu_without_dry_run_is_a_usage_error(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    done = run_isolated(["kernels"], tmp_path)
    assert done.returncode == 2 and "no CUDA device is visible" in done.stderr


@pytest.mark.parametrize("args,says", [
    (["kernels", "--cases", "alibi", "nosuch"], "--cases: unknown `nosuch`"),
    (["kernels", "--pes", "rope", "ropee"], "--pes: unknown `ropee` (did you mean `rope`?)"),
    (["kernels", "--sizes", "huge"], "--sizes: unknown `huge`"),
    (["pretrain", "--pretrain-pes", "nosuch"], "--pretrain-pes: unknown `nosuch`"),
    (["studies", "--study", "nosuch"], "no study preset `nosuch`"),
    (["studies", "--sweep", "nosuch"], "no sweep preset `nosuch`"),
], ids=["cases", "pes", "sizes-in-dry-run", "pretrain-pes", "study", "sweep"])
def test_unknown_names_are_refused_before_any_work(tmp_path, args, says):
    """A mistyped name: one line, exit 2, the valid names, and nothing run (no JSON, no job started)."""
    done = run_isolated([*args, "--dry-run", "--out", str(tmp_path / "out")], tmp_path)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], done.stderr
    if "unknown" in says:
        assert "valid: " in lines[0]
    assert not (tmp_path / "out").exists() and done.stdout == ""


def test_out_naming_a_file_is_refused_before_any_work(tmp_path):
    """`--out` naming a file: refused at once (not after the probes, as a FileExistsError); the file stays."""
    target = tmp_path / "results.json"
    target.write_text("kept")
    for out in (target, target / "below"):
        done = run_isolated(["kernels", "--dry-run", "--out", str(out)], tmp_path)
        assert done.returncode == 2 and done.stdout == "", done.stderr[-2000:]
        assert done.stderr.strip() == f"error: --out {out}: {target} is a file, not a folder; give a folder (made " \
                                      "if missing)"
    assert target.read_text() == "kept"


def test_throughput_rows_time_every_option_alone_then_all_never_measured_first():
    from posbench.gpucheck.kernels import DEFAULT_PES
    from posbench.gpucheck.rows import MEASURED_THROUGHPUT, library_options, throughput_rows

    rows = throughput_rows(["tiny", "small"], DEFAULT_PES)
    assert (rows[0].size, rows[0].pe, rows[0].options) == ("tiny", "rope", ())  # the profiled anchor stays first
    options = library_options()
    assert {("loss", "cce"), ("loss", "liger_flce"), ("norm", "liger"), ("mlp", "liger")} == set(options)
    for size in ("tiny", "small"):
        alone = {r.options[0] for r in rows if r.size == size and len(r.options) == 1}
        assert alone == set(options)
        together = [dict(r.options) for r in rows if r.size == size and len(r.options) > 1]
        assert together == [{"loss": "cce", "norm": "liger", "mlp": "liger"},
                            {"loss": "liger_flce", "norm": "liger", "mlp": "liger"}]
    assert {r.pe for r in rows if r.size == "tiny"} == set(DEFAULT_PES)
    flags = [r.measured for r in rows[1:]]
    assert flags == sorted(flags) and {(r.size, r.pe) for r in rows if r.measured} == MEASURED_THROUGHPUT
    assert rows[1].overrides == ["model.kernels.loss=cce"] and rows[1].label == "loss=cce"


def test_correctness_rows_never_measured_first_and_the_measured_list_names_real_rows():
    from posbench.gpucheck.correctness import CheckDims, rows
    from posbench.gpucheck.rows import MEASURED_CORRECTNESS

    planned = rows(CheckDims(32, 4, 64, 32, 61, 2), torch.device("cpu"), reference=None)
    flags = [r.measured for r in planned]
    assert flags == sorted(flags)
    assert {(r.case.name, r.what) for r in planned if r.measured} == MEASURED_CORRECTNESS
    assert {"sdpa_dense", "compiled", "kv-cache"} <= {r.what for r in planned if not r.measured}
