"""Every module path, file name and dotted name the docs, docstrings and comments quote exists.

Whoever carries the work on reads docs/architecture.md and the docstrings first; a name there that the code
no longer has sends them looking for something that was moved or deleted. `problems(text)` is the checker; it
reads the text between single backticks (fenced ``` blocks in markdown are commands and their output, skipped),
and a quoted text with a space, `<`, `=`, or that starts with `-`, `$`, `http` or `.` is not a name. The rules:

- A dotted name (`a.b.c`, optionally called: `a.b()`) is a reference when it starts with `posbench.` or its
  first part is a module or package of posbench (`sweeps`, `stats`, or a nested one: `study_spec`). It is
  resolved by reading the source with `ast` (nothing is imported): packages are folders, then the rest are
  attributes defined at the module's top level (assignments, defs, classes, imports, followed through
  `from posbench... import`), then members of a class defined there. A name with the `posbench.` prefix must
  resolve. One without may instead be a config key or an object's attribute (`model.seq_len`,
  `task.answer_positions`): it passes when every part after the first is a field, method or attribute some
  posbench class declares. Anything else dotted (`torch.save`, `Example.positions_T`) is not ours: skipped.
- `pkg/mod.NAME` names an attribute defined at the top level of that file.
- A path (ending in .py/.yaml/.md/.sh/.sbatch/.toml/.txt/.lock, or a folder ending in `/`; `{a,b}` expands):
  with a folder part it must exist, from the repository root, src/, src/posbench/ or one of its packages,
  unless its first folder is none of those (another project's file: `megatron/mpu/layers.py`) or it is a
  path the tools write at run time (under data/, runs/, checkpoints/: a string literal of src/ or scripts/
  is its last part, `data/raw/`: "raw"). A bare file name must exist somewhere in the tree or be a run-time
  name that way. `my_*` names are the docs' examples. File names outside backticks are checked the same way
  (a package docstring's listing of its files), in tests/ only those with a folder (a test names the files
  it writes).
- Other projects' files and functions the docs cite from reference implementations are listed in ELSEWHERE.
- In docs/ and the README, a bare identifier with an underscore or a call `name()` occurs in the code
  (an identifier or a string of src/, scripts/, tests/, a word of configs/).
Docstrings and comments are never evidence: run-time names and identifiers count only from code, so a name
quoted in a docstring cannot vouch for itself.
Comments never cite an issue number: issues close, the code stays.
"""

from __future__ import annotations

import ast
import re
from fnmatch import fnmatch
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "posbench"
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
PY = [
    p
    for p in sorted(p for d in ("src", "scripts", "tests") for p in (ROOT / d).rglob("*.py"))
    + [ROOT / "train.py", ROOT / "eval.py"]
    if p != Path(__file__).resolve()  # this file quotes the rules' own examples
]
QUOTED = re.compile(r"`([^`\n]+)`")
FENCED = re.compile(r"^\s*```.*?^\s*```", re.MULTILINE | re.DOTALL)
DOTTED = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\([^()]*\))?")
FILE_SUFFIXES = (".py", ".yaml", ".md", ".sh", ".sbatch", ".toml", ".txt", ".lock")
# a file name outside backticks: checked too (a docstring's listing of the files beside it)
UNQUOTED_FILE = re.compile(r"(?<![\w./{-])([\w][\w./{},*-]*\.(?:py|yaml|md|sh|sbatch|toml))(?![\w/-])")
# `meta.json` is a file, not an attribute `json` of a module `meta`
DATA_SUFFIXES = {"json", "jsonl", "csv", "png", "pdf", "html", "log", "pt", "bin", "safetensors", "npy", "parquet",
                 "gz", "zip", "tar", "txt", "yml", "cfg", "ini", "part", "lock", "py", "md", "yaml", "toml"}
# Other projects' files and functions the docs cite (reference implementations), named as their authors do.
ELSEWHERE = {
    "configs/config.py",  # zhixuan-lin/forgetting-transformer
    "modeling_forgetting_transformer.py",
    "group_parameters",
    "fgate_proj",
    "bias_weight_decay",
    "load.py",  # huggingface datasets
    "pscan.py",  # alxndrTL/mamba.py
    "train_gpt.py",  # KellerJordan/modded-nanogpt
    "_compute_yarn_parameters",  # huggingface transformers
    "_compute_llama3_parameters",
    "_compute_longrope_parameters",
    "_relative_position_bucket",
    "no_global_rope",  # allenai/OLMo-core
    "eye_xavier_norm",  # TsinghuaC3I/Fourier-Position-Embedding
    "get_step_eye",
    "configs/task/addition_coupled.yaml",  # HanseulJo/position-coupling
    "max_abacus_len",  # mcleish7/arithmetic
    "model/llama-mha-grape-m-nonctx.py", "model/llama-mha-grape-m-ctx.py",  # model-architectures/GRAPE
    "model/llama-mha-grape-a-keygated.py", "model/llama-mha-grape-ap-v1.py", "model/llama-mha-grape-*.py",
    "model/init_utils.py", "optim_utils.py", "train_adam_finewebedu.py", "get_optimizer_param_groups",
    "apply_rotary_emb", "grape_log_freq_scale", "omega_proj", "_cumulative_phase", "grape_ctx_per_head",
    "grape_ctx_init_omega", "grape_ctx_omega_scale", "_get_alibi_slopes", "q_rms", "k_rms", "keygated_omega_init",
    "keygated_u_l2_norm", "c_p", "p_head_dim", "p_tie_mode",
    "rotary_temperature", "skip_conv", "train_language_modeling.py",  # timurcarstensen/selective-rope
    "configs/language_modeling/model/attn.yaml", "configs/language_modeling/trainer/trainer.yaml",
    "configs/language_modeling/model/position_embedding/selective_rope.yaml",
    "config/adape.json",  # VITA-Group/TAPE
    "post_attention_linear",
    "text_seqpe/",  # ghrua/seqpe
    "get_digit_num",
    "mask_padding",
    "_init_seqpe_gpt_weights",
    "init_weights",
    "attn_scalar",
    "method_ratio",
    "hard_neg_ratio",
    "seqpe_contrastive_num",
    "seqpe_transfer_num",
    "pe_main",
}
SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".ruff_cache", ".venv", "node_modules"}
RUN_TIME_ROOTS = ("data", "runs", "checkpoints", "wandb", "build", "dist")  # git-ignored, written by the tools


@cache
def all_files() -> frozenset[str]:
    return frozenset(
        str(p.relative_to(ROOT)) + ("/" if p.is_dir() else "")
        for p in ROOT.rglob("*")
        if not SKIP_DIRS & set(p.relative_to(ROOT).parts)
        and p.relative_to(ROOT).parts[0] not in RUN_TIME_ROOTS
        and not any(part.endswith(".egg-info") for part in p.parts)
    )


@cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def docstring_nodes(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings (prose, not code)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def code_files(*folders: str) -> list[Path]:
    return [p for f in folders for p in sorted((ROOT / f).rglob("*.py")) if not SKIP_DIRS & set(p.parts)]


@cache
def code_strings() -> frozenset[str]:
    """Every string literal of src/ and scripts/ but the docstrings: the names of files written at run time."""
    found: set[str] = set()
    for p in code_files("src", "scripts"):
        tree = parsed(p)
        docs = docstring_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                found.add(node.value)
    return frozenset(found)


@cache
def code_words() -> frozenset[str]:
    """Identifiers and words of string literals in src/, scripts/ and tests/ (docstrings and comments aside),
    and every word of configs/."""
    words: set[str] = set()
    ident = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
    for p in code_files("src", "scripts", "tests") + [ROOT / "train.py", ROOT / "eval.py"]:
        tree = parsed(p)
        docs = docstring_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                words.update(ident.findall(node.value))
            for field in ("id", "attr", "name", "arg", "asname", "module"):
                value = getattr(node, field, None)
                if isinstance(value, str):
                    words.update(ident.findall(value))
    for p in (ROOT / "configs").rglob("*.yaml"):
        words.update(ident.findall(p.read_text(encoding="utf-8")))
    return frozenset(words)


# --- dotted names, resolved from the source ---------------------------------------------------------------


def top_level_names(tree: ast.Module) -> dict[str, ast.AST]:
    """Names a module defines at its top level (inside top-level if/try/with blocks too)."""
    names: dict[str, ast.AST] = {}

    def targets(t: ast.AST):
        if isinstance(t, ast.Name):
            yield t.id
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                yield from targets(e)

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names[node.name] = node
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    names.update((n, node) for n in targets(t))
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                names.update((n, node) for n in targets(node.target))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    names[a.asname or a.name.split(".")[0]] = node
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                visit(getattr(node, "finalbody", []))
                for h in getattr(node, "handlers", []):
                    visit(h.body)

    visit(tree.body)
    return names


def class_members(node: ast.ClassDef) -> set[str]:
    found = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            found.add(item.target.id)
        elif isinstance(item, ast.Assign):
            found.update(t.id for t in item.targets if isinstance(t, ast.Name))
        if isinstance(item, ast.FunctionDef):  # attributes set in methods: self.x = ...
            for sub in ast.walk(item):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self":
                    found.add(sub.attr)
    return found


@cache
def all_class_members() -> frozenset[str]:
    """Every field, method and attribute some class of posbench declares: what `x.name` may read."""
    found: set[str] = set()
    for p in code_files("src"):
        for node in ast.walk(parsed(p)):
            if isinstance(node, ast.ClassDef):
                found |= class_members(node)
    return frozenset(found)


@cache
def other_packages() -> frozenset[str]:
    """The top-level packages the code imports that are not posbench (`torch`, `lm_eval`)."""
    found: set[str] = set()
    for p in code_files("src", "scripts", "tests"):
        for node in ast.walk(parsed(p)):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found.add(node.module.split(".")[0])
    return frozenset(found - {"posbench"})


@cache
def module_names() -> frozenset[str]:
    """The last part of every posbench module and package name (`sweeps`, `study_spec`)."""
    return frozenset(p.parent.name if p.stem == "__init__" else p.stem for p in code_files("src/posbench"))


def module_file(parts: tuple[str, ...]) -> Path | None:
    """`("sweeps", "sweep_spec")` -> its file, None if there is no such module."""
    path = SRC.joinpath(*parts)
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return None


def imported_from(node: ast.ImportFrom, here: tuple[str, ...], name: str) -> tuple[str, ...] | None:
    """Where `from X import name` takes name from, as posbench module parts (None: another package)."""
    if node.level:
        base = here[: len(here) - node.level + 1] if here[-1:] == ("__init__",) else here[: len(here) - node.level]
        base = tuple(p for p in base if p != "__init__")
        mod = base + tuple((node.module or "").split(".")) if node.module else base
    elif node.module and node.module.split(".")[0] == "posbench":
        mod = tuple(node.module.split(".")[1:])
    else:
        return None
    return mod + (name,)


def resolves(parts: tuple[str, ...], depth: int = 0) -> bool:
    """`("studies", "study_spec", "StudyConfig", "seeds")`: does posbench define it (read from the source)?"""
    if depth > 8:
        return True  # a cycle of re-exports: nothing to decide here
    for i in range(len(parts), 0, -1):
        path = module_file(parts[:i])
        if path is None:
            continue
        rest = parts[i:]
        if not rest:
            return True
        names = top_level_names(parsed(path))
        if "__getattr__" in names:
            return True  # the module makes names on demand
        node = names.get(rest[0])
        if node is None:
            return False
        if isinstance(node, ast.ImportFrom):
            here = parts[:i] + (("__init__",) if path.name == "__init__.py" else ())
            alias = next(a for a in node.names if (a.asname or a.name) == rest[0])
            target = imported_from(node, here, alias.name)
            return target is None or resolves(target + rest[1:], depth + 1)
        if isinstance(node, ast.Import):
            return True  # another package's module
        if isinstance(node, ast.ClassDef) and len(rest) > 1:
            return rest[1] in class_members(node) or bool(node.bases)  # else it may be inherited
        return True
    return False


def dotted_problem(text: str) -> bool | None:
    """True: a stale name; False: it exists; None: not a name of ours."""
    match = DOTTED.fullmatch(text)
    if not match:
        return None
    parts = tuple(match.group(1).split("."))
    if parts[-1] in DATA_SUFFIXES:
        return None  # a file name: `meta.json`
    prefixed = parts[0] == "posbench"
    if prefixed:
        return not resolves(parts[1:])
    if parts[0] not in module_names() or parts[0] in other_packages():
        return None  # not ours, or ambiguous (`lm_eval.simple_evaluate` is the harness's)
    starts = [p.relative_to(SRC).with_suffix("").parts for p in code_files("src/posbench")]
    bases = {s[:-1] if s[-1] == "__init__" else s for s in starts}
    if any(b[-1] == parts[0] and resolves(b + parts[1:]) for b in bases if b):
        return False
    members = all_class_members()
    return not all(p in members for p in parts[1:])  # else a config key or an object's attribute


# --- paths ------------------------------------------------------------------------------------------------


def expand_braces(text: str) -> list[str]:
    """`configs/model/{tiny,small}.yaml` -> both paths (shell brace expansion, one level)."""
    found = re.search(r"\{([^{}]*)\}", text)
    if not found:
        return [text]
    head, tail = text[: found.start()], text[found.end() :]
    return [p for alt in found.group(1).split(",") for p in expand_braces(head + alt + tail)]


def path_bases() -> list[str]:
    return ["", "src/", "src/posbench/"] + [f"src/posbench/{d.name}/" for d in SRC.iterdir() if d.is_dir()]


TRACKED = ("configs", "scripts", "tests", "docs", "src")


def ours(text: str) -> bool:
    """A path into this repository, not a file of another project a doc cites (`megatron/mpu/layers.py`)."""
    first, _, rest = text.partition("/")
    if first == "src":
        return rest.startswith("posbench/")  # `src/forgetting_transformer/utils.py` is another project's
    return first == "posbench" or any((ROOT / b / first).exists() for b in path_bases())


def must_exist(text: str) -> bool:
    """Under a folder that is checked in (configs/, scripts/, tests/, docs/, src/, a package): not a run-time path."""
    first = text.split("/", 1)[0]
    if first in RUN_TIME_ROOTS:
        return False  # `data/raw/` (the data root) or `data/tasks/` (the package): either may be meant
    return first in TRACKED or first == "posbench" or (SRC / first).is_dir()


def written_at_run_time(text: str) -> bool:
    """A string literal of the code is the path's last part, or holds it as a path part (`data/raw/`: "raw")."""
    name = text.rstrip("/").rsplit("/", 1)[-1]
    for s in code_strings():
        if name in s and re.search(rf"(^|[/\s'\"]){re.escape(name)}($|[/\s'\"])", s):
            return True
    return False


def path_exists(text: str) -> bool:
    text = text.rstrip(".,:;")
    if "{" in text:
        return all(path_exists(p) for p in expand_braces(text))
    if text.startswith("posbench/"):
        text = "src/" + text
    bare = "/" not in text.rstrip("/")
    if not bare and not ours(text):
        return True  # another project's file
    if Path(text.rstrip("/")).name.startswith("my_"):
        return True  # the docs' own example of a file to add (`pe/my_pe.py`)
    files = all_files()
    if bare:
        if any(fnmatch(Path(f.rstrip("/")).name, text.rstrip("/")) for f in files):
            return True
    else:
        pattern = re.compile(re.escape(text).replace(r"\*", "[^/]*") + ("$" if text.endswith("/") else "/?$"))
        if any(pattern.match(f[len(b) :]) for b in path_bases() for f in files if f.startswith(b)):
            return True
    return "*" not in text and (bare or not must_exist(text)) and written_at_run_time(text)


def file_attribute_exists(text: str) -> bool:
    """`training/metrics.PEAK_BF16`: the file's top level defines the name."""
    path, name = text.rsplit(".", 1)
    candidates = [p for p in all_files() if p.endswith(path + ".py") and not p.startswith("tests/")]
    return any(name in top_level_names(parsed(ROOT / c)) for c in candidates)


# --- the checker ------------------------------------------------------------------------------------------


def unquoted_files(text: str, *, bare: bool) -> list[str]:
    """File names outside backticks and URLs; `bare`: names without a folder too."""
    text = re.sub(r"https?://\S+", " ", QUOTED.sub(" ", text))
    return [f.rstrip(".") for f in UNQUOTED_FILE.findall(text) if bare or "/" in f]


def problems(text: str, *, identifiers: bool, bare_files: bool = True) -> list[str]:
    """The names in `text` that do not exist (the rules are this file's docstring)."""
    out = []
    text = FENCED.sub("", text)
    for name in unquoted_files(text, bare=bare_files):
        if name not in ELSEWHERE and not path_exists(name):
            out.append(name)
    for quoted in QUOTED.findall(text):
        q = quoted.strip()
        if q in ELSEWHERE:
            continue
        if " " in q or "<" in q or "=" in q or q.startswith(("-", "$", "http", ".")):
            continue  # a command line, a placeholder, an override, a URL: not a name
        if q.endswith(FILE_SUFFIXES) or (q.endswith("/") and re.fullmatch(r"[\w./*{},-]+", q)):
            ok = path_exists(q)
        elif re.fullmatch(r"[\w./*-]+/[\w]+\.[A-Za-z_]\w*", q):
            ok = file_attribute_exists(q)
        elif (stale := dotted_problem(q)) is not None:
            ok = not stale
        elif identifiers and re.fullmatch(r"[A-Za-z_]\w*(\(\))?", q) and ("_" in q.strip("_") or q.endswith("()")):
            ok = q.startswith("my_") or q.rstrip("()") in code_words()
        else:
            continue
        if not ok:
            out.append(q)
    return out


def docstrings_and_comments(path: Path) -> str:
    source = path.read_text(encoding="utf-8")
    parts = [line.split("#", 1)[1] for line in source.splitlines() if "#" in line]
    for node in ast.walk(parsed(path)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            parts.append(ast.get_docstring(node) or "")
    return "\n".join(parts)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_names_quoted_in_docs_exist(doc):
    missing = problems(doc.read_text(encoding="utf-8"), identifiers=True)
    assert not missing, f"{doc.relative_to(ROOT)} quotes names the code does not have: {missing}"


def test_names_quoted_in_docstrings_exist():
    missing = {}
    for path in PY:
        # a test's docstring names the files it writes (`base.yaml` in tmp_path): only paths with a folder there
        tests = path.is_relative_to(ROOT / "tests")
        found = problems(docstrings_and_comments(path), identifiers=False, bare_files=not tests)
        if found:
            missing[str(path.relative_to(ROOT))] = found
    assert not missing, f"docstrings/comments quote paths or modules that do not exist: {missing}"


def test_the_checker_reports_planted_stale_names():
    planted = [
        "`sweeps.spec.plan_runs`",  # a module that was renamed (sweep_spec)
        "`posbench.studies.study_report.summarize_all`",  # a function the module does not have
        "`evaluation.runner.run_eval`",  # an old module path without the prefix
        "`stats.no_such_interval`",  # a top-level module's missing function
        "`study_spec.no_such_helper()`",  # a nested module named by its last part
        "`posbench.no_such_module`",
        "`configs/no_such_preset.yaml`",  # a file under a known top-level folder
        "`scripts/no_such_script.py`",
        "`docs/no_such_page.md`",
        "`pe/no_such_pe.py`",  # a path inside the package
        "`no_such_file.py`",  # a bare file name
        "`training/metrics.NO_SUCH_CONSTANT`",
    ]
    text = "\n".join(f"A line naming {p} as a docstring would.  # and a comment: {p}" for p in planted)
    found = problems(text, identifiers=False)
    assert sorted(set(found)) == sorted(p.strip("`") for p in planted)
    # each one alone, so one name cannot hide behind another
    for p in planted:
        assert problems(p, identifiers=False) == [p.strip("`")], p


def test_the_checker_accepts_real_names_and_skips_other_projects():
    real = [
        "`posbench.sweeps.sweep_spec.plan_runs`",
        "`sweeps.sweep_spec.plan_runs`",
        "`stats.decide`",
        "`posbench.config`",
        "`model.seq_len`",  # a config key
        "`configs/base.yaml`" if (ROOT / "configs/base.yaml").exists() else "`configs/`",
        "`tests/docs/test_doc_names.py`",
        "`docs/architecture.md`",
        "`torch.save`",  # another package: not ours to check
        "`megatron/mpu/layers.py`",  # another project's file
        "`pe/my_pe.py`",  # the docs' example of a file to add
    ]
    assert problems("\n".join(real), identifiers=False) == []


def test_a_docstring_cannot_vouch_for_a_file(tmp_path):
    """A name quoted only in a docstring is not a run-time name: the planted file is not found in code strings."""
    assert not written_at_run_time("no_such_file.py")
    assert all("no_such_file.py" not in s for s in code_strings())


def test_no_comment_cites_an_issue_number():
    cite = re.compile(r"\bissues?\s*#?\d+|\(issue\b", re.IGNORECASE)
    found = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for path in PY
        for line in docstrings_and_comments(path).splitlines()
        if cite.search(line)
    ]
    assert not found, "comments and docstrings cite issue numbers (say the reason instead):\n" + "\n".join(found)
