#!/usr/bin/env python
"""Pretraining entry point (works under torchrun).

    python train.py --list-pe-types
    python train.py --model-size tiny --pe-type rope --print-config
    python train.py configs/model/nano.yaml pe.name=alibi model.dropout=0.1 --print-config
"""

from posbench.cli.train import main_train

if __name__ == "__main__":
    raise SystemExit(main_train())
