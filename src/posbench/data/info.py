"""`prepare_fineweb info`: what is downloaded, which tokenizer, what is tokenized, per split."""

from __future__ import annotations

from posbench.data.errors import DataError
from posbench.data.layout import DataLayout
from posbench.data.manifest import Manifest
from posbench.data.shards import open_shard, read_header


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return ""


def describe(cfg, verify: bool = False) -> str:
    """A plain-text report; with `verify`, every shard is fully validated (token ids included)."""
    layout = DataLayout.from_config(cfg)
    src, splits = layout.source, cfg.splits
    lines = [f"source      {src.describe()}   ({src.summary})",
             "splits      " + "   ".join(f"{n} {r}" for n, r in splits.ranges().items()),
             f"data root   {layout.root.resolve()}"]
    try:
        inputs = src.inputs()
    except DataError as e:
        inputs, lines = [], lines + [f"inputs      error: {e}"]
    by_split = {name: [f for f in inputs if splits.split_of(f.index) == name] for name in splits.ranges()}
    where = layout.raw_dir if src.downloadable else "local files"
    lines.append(f"{'downloaded' if src.downloadable else 'inputs':<12}" + "   ".join(
        f"{n} {len(fs)} files ({_size(sum(f.path.stat().st_size for f in fs))})" for n, fs in by_split.items())
        + f"   [{where}]")
    kind = layout.tokenizer
    if kind.is_ready():
        try:
            tok = kind.build()
            lines.append(f"tokenizer   {kind.cfg.tag()}  vocab {tok.vocab_size}  bos {tok.bos_id}  "
                         f"fingerprint {tok.fingerprint[:16]}  [{kind.folder if kind.needs_training else 'built in'}]")
        except DataError as e:
            tok, lines = None, lines + [f"tokenizer   {kind.cfg.tag()}: error: {e}"]
    else:
        tok = None
        lines.append(f"tokenizer   {kind.cfg.tag()}: not trained yet ({kind.folder}); `tokenize` trains it")
    manifest = Manifest(layout.tokens_manifest, "tokens")
    for name in splits.ranges():
        entries = sorted(k for k, e in manifest.files.items()
                         if e["split"] == name and splits.split_of(e["index"]) == name)
        tokens, bad = 0, []
        for shard_name in entries:
            path = layout.tokens_dir / shard_name
            try:
                if verify:
                    header, _ = open_shard(path, tok.fingerprint if tok else None, check_tokens=True)
                else:
                    header = read_header(path)
                tokens += header.n_tokens
            except DataError as err:
                bad.append(str(err))
        pending = len(by_split[name]) - len(entries)
        lines.append(f"tokenized   {name:<6} {len(entries)} shards, {tokens:,} tokens"
                     + (f", {pending} files not yet tokenized" if pending > 0 else "")
                     + (f", {len(bad)} BAD: {bad[0]}" if bad else ""))
    lines.append(f"shards in   {layout.tokens_dir}")
    return "\n".join(lines)
