"""PEs from outside the package: a tiny plug-in distribution, built and installed into a fresh virtual
environment, registers its PE through the `posbench_pes` entry point group, and posbench trains with it; a module
named by `--plugin` does the same without installing anything."""

import os
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PE_FILE = textwrap.dedent('''
    """A PE outside posbench: NoPE under another name, enough to show where it registers."""
    from posbench.pe.encoding import PES
    from posbench.pe.none import NoPE


    @PES.register("{name}")
    class PluginNoPE(NoPE):
        summary = "a plug-in PE (tests/repo/test_plugins.py)"
''')
TRAIN = ["--model-size", "nano", "model.seq_len=32", "train.stream=random", "train.budget_unit=tokens",
         "train.target_budgets=[256]", "train.global_batch_tokens=128", "train.micro_batch=2", "train.eval_interval=0",
         "train.ckpt_interval=0", "logging.wandb=disabled", "schedule.warmup_tokens=64", "train.device=cpu"]


def _run(python, args, cwd, env=None):
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # builds a virtual environment and installs a package into it (about 20 s)
def test_an_installed_plugin_package_registers_its_pe_through_its_entry_point(tmp_path):
    """Item 5: a PE in a pip-installed package of its own (entry point group `posbench_pes`) is
    registered and trains with `posbench train pe.name=...`; nothing in site-packages' posbench is edited."""
    pkg = tmp_path / "plugin_src"
    (pkg / "my_posbench_pe").mkdir(parents=True)
    (pkg / "my_posbench_pe" / "__init__.py").write_text("")
    (pkg / "my_posbench_pe" / "plugin_nope.py").write_text(PE_FILE.format(name="plugin_nope"))
    (pkg / "pyproject.toml").write_text(textwrap.dedent('''
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "my-posbench-pe"
        version = "0.1"

        [project.entry-points."posbench_pes"]
        plugin_nope = "my_posbench_pe.plugin_nope"

        [tool.setuptools]
        packages = ["my_posbench_pe"]
    '''))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # torch, posbench and setuptools of this interpreter, seen from the new environment (nothing reinstalled)
    new_site = Path(_run(python, ["-c", "import site; print(site.getsitepackages()[0])"], tmp_path).stdout.strip())
    (new_site / "outer.pth").write_text("\n".join([*site.getsitepackages(), str(ROOT / "src")]) + "\n")
    got = _run(python, ["-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", str(pkg)], tmp_path)
    assert got.returncode == 0, got.stdout + got.stderr
    before = _run(sys.executable, ["-m", "posbench", "train", *TRAIN, "pe.name=plugin_nope",
                                   f"train.out_dir={tmp_path / 'a'}"], tmp_path)
    assert before.returncode == 2 and "plugin_nope" in before.stderr  # not installed here: an unknown PE
    trained = _run(python, ["-m", "posbench", "train", *TRAIN, "pe.name=plugin_nope",
                            f"train.out_dir={tmp_path / 'b'}"], tmp_path)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    assert list((tmp_path / "b").glob("*plugin_nope*/latest/model.pt"))


def test_the_plugin_flag_imports_a_module_of_pes(tmp_path):
    """Item 5: `--plugin MODULE` imports a module on the path and its PEs register; a module that
    does not exist is refused with exit 2 and its name."""
    (tmp_path / "flag_pe.py").write_text(PE_FILE.format(name="flag_nope"))
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    trained = _run(sys.executable, ["-m", "posbench", "train", "--plugin", "flag_pe", *TRAIN, "pe.name=flag_nope",
                                    f"train.out_dir={tmp_path / 'c'}"], tmp_path, env)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    assert list((tmp_path / "c").glob("*flag_nope*/latest/model.pt"))
    missing = _run(sys.executable, ["-m", "posbench", "train", "--plugin", "no_such_pes", *TRAIN], tmp_path, env)
    assert missing.returncode == 2 and "plug-in module `no_such_pes`" in missing.stderr
    assert "Traceback" not in missing.stderr
