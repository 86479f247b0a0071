"""Provenance of a checkpoint (training/meta.py): the git state of the package that trained it."""

import hashlib
import subprocess

from posbench.training.meta import git_commit


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})


def test_untracked_package_file_makes_the_checkout_dirty_with_its_name_and_hash(tmp_path):
    """Item 2: a new, untracked PE file in the package makes the provenance dirty, names the file and
    hashes its content, so the checkpoint does not point at a commit that lacks the code that trained it."""
    pkg = tmp_path / "src" / "pkg"
    (pkg / "pe").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "init")
    assert git_commit(pkg)["dirty"] is False
    (tmp_path / "notes.txt").write_text("outside the package")  # not code that trains: ignored
    assert git_commit(pkg)["dirty"] is False
    body = b"class LearnedSlopes: pass\n"
    (pkg / "pe" / "learned_alibi.py").write_bytes(body)
    got = git_commit(pkg)
    assert got["dirty"] is True
    assert got["untracked"] == ["src/pkg/pe/learned_alibi.py"]
    # the hash is over each untracked file's path and bytes, in name order (hand-computed here)
    expected = hashlib.sha256(b"src/pkg/pe/learned_alibi.py\0" + body + b"\0").hexdigest()
    assert got["untracked_sha256"] == expected
