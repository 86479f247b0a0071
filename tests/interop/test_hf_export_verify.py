"""A failed export check says what failed, that the export was not kept, and what the user can do (a looser
--tolerance when the difference is float noise, posbench's own evaluation when the PE computes differently),
and exits 4 (errors.EXIT_CHECKPOINT: this checkpoint cannot be exported as asked), never "report this as a bug"."""

import shutil

import pytest

pytest.importorskip("transformers")

from posbench.cli.export import main as export_main  # noqa: E402
from posbench.errors import EXIT_BAD_INPUT, EXIT_CHECKPOINT  # noqa: E402
from posbench.interop import hf_export, hf_posbench  # noqa: E402
from tests.interop.test_hf_export_remote import random_checkpoint  # noqa: E402


def broken_remote(monkeypatch):
    """The shipped ALiBi with its slopes doubled (its pe_alibi module as the export writes it): a model that computes
    something else."""
    ship = hf_export.zoo_files
    target = "        return -self.slopes_H[h] * dist\n"

    def broken(reserved):
        files = ship(reserved)
        assert files["pe_alibi.py"].count(target) == 1
        return {**files, "pe_alibi.py": files["pe_alibi.py"].replace(target, target.replace("* dist", "* dist * 2"))}

    monkeypatch.setattr(hf_export, "zoo_files", broken)


def test_a_model_that_computes_differently_is_not_kept_and_says_what_to_do(tmp_path, monkeypatch, capsys):
    broken_remote(monkeypatch)
    run = random_checkpoint(tmp_path, "pe.name=alibi")
    assert export_main([str(run), str(tmp_path / "hf")]) == EXIT_CHECKPOINT
    (err,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]  # one line
    assert err.startswith("error: the exported model's logits differ from posbench's by ")
    assert "the export was not kept (nothing was written to the output directory)" in err
    assert "PE `alibi` as remote code (modeling_posbench.py) computes differently in transformers than in " \
           "posbench: evaluate it with posbench (eval.py) instead" in err
    assert "--tolerance" not in err  # far from float noise: loosening is not offered
    assert "report this as a bug" not in err
    assert not (tmp_path / "hf").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".hf.")]


def test_a_difference_near_the_tolerance_suggests_a_looser_one(tmp_path, capsys):
    run = random_checkpoint(tmp_path, "pe.name=alibi")
    assert export_main([str(run), str(tmp_path / "hf"), "--tolerance", "1e-12"]) == EXIT_CHECKPOINT
    (err,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert "the export was not kept" in err and "re-run with --tolerance " in err and "(now 1e-12)" in err
    assert not (tmp_path / "hf").exists()
    assert export_main([str(run), str(tmp_path / "hf"), "--tolerance", "2"]) == EXIT_BAD_INPUT
    assert "tolerance must be in (0, 1)" in capsys.readouterr().err
    assert export_main([str(run), str(tmp_path / "hf"), "--tolerance", "1e-3"]) == 0
    assert (tmp_path / "hf" / "config.json").is_file()


@pytest.mark.parametrize("option, target", [
    ("model.attention_chunk=[48, null]", "((tok_BS[:, offset:, None] // c) == (tok_BS[:, None, :] // c))"),
    ("model.attention_window=[40, null]", "(query_T[:, None] - slot_S[None, :] < w)"),
])
def test_item13_the_check_crosses_every_window_and_chunk(tmp_path, monkeypatch, capsys, option, target):
    """Item 13: remote code whose chunks (or windows) are twice as long computes the same as posbench on
    the 32 random ids the check used, so the export was kept; ids past every window and chunk catch it."""
    broken = tmp_path / "remote"
    broken.mkdir()
    for name in hf_posbench.REMOTE_FILES:
        shutil.copyfile(hf_posbench.REMOTE_DIR / name, broken / name)
    source = (broken / "modeling_posbench.py").read_text()
    assert source.count(target) == 1
    doubled = target.replace("// c", "// (2 * c)").replace("< w)", "< 2 * w)")
    (broken / "modeling_posbench.py").write_text(source.replace(target, doubled))
    monkeypatch.setattr(hf_posbench, "REMOTE_DIR", broken)
    run = random_checkpoint(tmp_path, option)
    assert export_main([str(run), str(tmp_path / "hf")]) == EXIT_CHECKPOINT
    (err,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert err.startswith("error: the exported model's logits differ from posbench's by ")
    assert not (tmp_path / "hf").exists()
