"""The command line: one thin module per verb over library functions (design rule: commands live together).

    main.py        `posbench VERB ...` / `python -m posbench VERB ...`: the dispatcher
    train.py       train (train.py)                 eval.py     eval (eval.py)
    data.py        data: download, tokenize, train-tokenizer, info, download-eval (prepare_fineweb, prepare_data)
    study.py       study (scripts/study.py)         sweep.py    sweep (scripts/sweep.py)
    export.py      export (scripts/export_hf.py)    app.py      app (posbench-app)
    lm_eval.py     lm-eval (posbench-lm-eval)
    errors_cli.py  the one error handler: a PosbenchError -> `error: ...` and its exit code; anything else a bug

Nothing outside this package imports it (tests/repo/test_import_direction.py), except the shims that keep an old
`python -m` path working (posbench/data/prepare_fineweb.py, posbench/evaluation/prepare_data.py,
posbench/app/__main__.py, posbench/__main__.py).
"""

from posbench.cli.main import main

__all__ = ["main"]
