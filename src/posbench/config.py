"""The run configuration's assembly point: RunConfig from each stage's own config, presets, load_config.

Each stage declares its settings beside its code (model/model_config.py, training/train_config.py, data/data_config.py,
pe/ variants' nested Configs); this module only puts them together, so nothing below it imports it.

    posbench train configs/model/tiny.yaml pe.name=alibi model.dropout=0.1
    posbench train --model-size tiny --pe-type alibi          # the same fields, familiar flags

Sources merge left to right: dataclass defaults <- --model-size preset <- YAML files <- --pe-type <-
dotted overrides <- typed flags (--resume, --branch-from, --budget). The size preset comes first because
it also carries per-size lr, batch and warmup (configs/model/*.yaml): a YAML file that sets optim.lr must
win over it. Unknown keys and wrong types
fail before any work, naming the nearest valid key.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from posbench.config_loader import Override, dump_yaml, load, nested, split_sources
from posbench.data.data_config import (  # noqa: F401  (re-exported: the assembly point scripts import from)
    DEFAULT_MIX_TASKS,
    DataConfig,
    DownloadConfig,
    LoaderConfig,
    TokenizeConfig,
    default_mix,
)
from posbench.errors import ConfigError
from posbench.model.model_config import AttentionChoice, EmbedScale, ModelConfig  # noqa: F401  (re-exported)
from posbench.model.noop_options import refuse_noop_options
from posbench.pe import PES, PEConfig
from posbench.pe.rope import RoPE
from posbench.presets import CONFIG_DIR, preset_names, preset_path  # noqa: F401  (re-exported)
from posbench.training.train_config import (  # noqa: F401  (re-exported)
    DecayShape,
    LoggingConfig,
    OptimConfig,
    ScheduleConfig,
    TrainConfig,
)


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    pe: PEConfig = field(default_factory=RoPE.Config)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    data: DataConfig = field(default_factory=DataConfig)
    seed: int = 42

    def resolve(self, saved: bool = False) -> RunConfig:
        """Cross-field checks and derived values, once, before any work is done. `saved`: the config of a checkpoint
        being read (evaluation, a resume's check), which trained as it is: options that do nothing on its model
        (model/noop_options.py) are refused only when a run is configured."""
        PES.get(self.pe.name).check_model(self.pe, self.model.pe_context())
        self.model.arch.check_model(self.model.pe_context(), self.pe)
        if not saved:
            refuse_noop_options(self.model, self.pe)
        if self.train.compile and self.model.matmul != "torch":  # inductor asserts oneDNN linears' weights are frozen
            raise ConfigError(f"train.compile=true cannot compile model.matmul={self.model.matmul}: inductor lowers "
                              "oneDNN's linear only for frozen (inference) weights. Use model.matmul=torch with "
                              "train.compile=true, or train.compile=false")
        self.model.kernels.check_loss_mode(self.train.loss)
        return self

    def to_yaml(self) -> str:
        return dump_yaml(self)


def load_preset(kind: str, path_or_name: str, cls, where: str):
    """A typed config from a YAML file, or from configs/<kind>/<name>.yaml when given a bare name
    (studies, sweeps): strict, so an unknown key or a mistyped preset name names the nearest valid one."""
    path = Path(path_or_name)
    if not path.suffix:
        path = preset_path(kind, path_or_name)
    return load(cls, [path], where=where)


def load_config(files: list[str | Path] = (), overrides: list[Override] = (), model_size: str | None = None,
                pe_type: str | None = None) -> RunConfig:
    """Merge sources, build the typed config strictly, resolve it.

    `overrides` are dotted text the user typed (`model.d_model=256`) or mappings of typed values (CLI
    flags, study cells); `pe_type` is set as the value it is, ahead of them."""
    files = list(files)
    if model_size:
        files.insert(0, preset_path("model", model_size))
    shortcuts = [nested("pe.name", pe_type)] if pe_type else []
    return load(RunConfig, files, shortcuts + list(overrides)).resolve()


def config_parser(description: str) -> argparse.ArgumentParser:
    """The run config's command-line grammar (train.py, describe_model.py, a WandB trial's command): YAML
    presets and dotted overrides as positionals, `--model-size` and `--pe-type` as familiar shortcuts."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("sources", nargs="*", metavar="FILE.yaml | key.sub=value",
                   help="YAML presets merged left to right, then dotted overrides (an existing file is read as "
                        "YAML even with `=` in its name)")
    p.add_argument("--model-size", help="model preset: nano, tiny, small, medium, large")
    p.add_argument("--pe-type", help="positional encoding (see --list-pe-types); sets pe.name")
    return p


def config_from_args(args: argparse.Namespace, flags: list[dict] = ()) -> RunConfig:
    """Positionals are YAML files and dotted text (parsed once, in the loader); `flags` are mappings of
    the values argparse already holds, applied last, as they are."""
    files, overrides = split_sources(args.sources)
    return load_config(files, overrides + list(flags), model_size=args.model_size, pe_type=args.pe_type)
