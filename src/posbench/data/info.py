"""`prepare_fineweb info`: what is downloaded, which tokenizer, what is tokenized, per split, and the
task mix as measured in the train shards (documents and tokens per task, not the configured ratio)."""

from __future__ import annotations

import numpy as np

from posbench.data.layout import DataLayout
from posbench.data.manifest import Manifest
from posbench.data.shards import open_positions, open_shard, read_header
from posbench.data.tasks.mix import CORPUS, EXAMPLES_PER_FILE, TaskMixer, build_mixer, position_tasks
from posbench.data.token_positions import TEXT_ID, document_positions
from posbench.errors import DataError


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
    _mixer: list[TaskMixer] = []

    def mixer() -> TaskMixer:
        if not _mixer:
            _mixer.append(build_mixer(layout.mix))
        return _mixer[0]

    lines.append(f"task mix    {describe_mix_config(layout.mix)}")
    id_tasks = ", ".join(position_tasks(layout.mix))
    if id_tasks and layout.positions:
        lines.append(f"positions   train and val shards carry the per-token ids of {id_tasks} (text tokens {TEXT_ID})")
    elif id_tasks:
        lines.append(f"positions   none: {id_tasks} define ids, but tokenizer `{kind.cfg.tag()}` can merge task "
                     "symbols (data.tokenizer.name=bytes carries them)")
    for name in splits.ranges():
        entries = sorted(k for k, e in manifest.files.items()
                         if e["split"] == name and splits.split_of(e["index"]) == name)
        tokens, bad, with_ids = 0, [], 0
        for shard_name in entries:
            path = layout.tokens_dir / shard_name
            try:
                if verify:
                    header, ids = open_shard(path, tok.fingerprint if tok else None, check_tokens=True)
                    pos = open_positions(path, header)
                    if name == "train" and layout.mix.active and tok is not None:
                        measured = count_mix(ids, tok, mixer(), manifest.files[shard_name]["index"], path, pos)
                        if measured != manifest.files[shard_name].get("mix"):
                            raise DataError(f"{path}: its task documents differ from the manifest's counts; "
                                            "delete the shard and re-run tokenize")
                    elif pos is not None and np.any(pos != TEXT_ID):
                        raise DataError(f"{path}: a text-only shard with position ids other than {TEXT_ID}; "
                                        "delete the shard and re-run tokenize")
                else:
                    header = read_header(path)
                tokens += header.n_tokens
                with_ids += header.positions
            except DataError as err:
                bad.append(str(err))
        pending = len(by_split[name]) - len(entries)
        split_docs = sum(manifest.files[k].get("split_documents", 0) for k in entries)
        lines.append(f"tokenized   {name:<6} {len(entries)} shards, {tokens:,} tokens"
                     + (f", {with_ids} with position ids (version 2)" if with_ids else "")
                     + (f", {split_docs:,} documents longer than data.tokenize.max_doc_chars="
                        f"{cfg.tokenize.max_doc_chars:,} split into pieces" if split_docs else "")
                     + (f", {pending} files not yet tokenized" if pending > 0 else "")
                     + (f", {len(bad)} BAD: {bad[0]}" if bad else ""))
    if layout.mix.active:
        train = [e for e in manifest.files.values() if e["split"] == "train" and "mix" in e]
        lines += mix_table(train, verified=verify)
    lines.append(f"shards in   {layout.tokens_dir}")
    return "\n".join(lines)


def describe_mix_config(mix) -> str:
    if not mix.active:
        return "none (train shards are corpus text only)"
    tasks = ", ".join(f"{t.name} x{w:g}" if w != 1 else t.name for t, w in zip(mix.tasks, mix.task_weights()))
    return f"{mix.ratio:.1%} of train {mix.unit}, tasks {tasks}, seed {mix.seed} (configured)"


def mix_table(entries: list[dict], verified: bool) -> list[str]:
    """Documents and tokens of each kind summed over train shards, as counted while writing them."""
    totals: dict[str, list[int]] = {}
    for e in entries:
        for kind, c in e["mix"].items():
            t = totals.setdefault(kind, [0, 0])
            t[0] += c["documents"]
            t[1] += c["tokens"]
    docs, toks = sum(t[0] for t in totals.values()), sum(t[1] for t in totals.values())
    if not docs:
        return ["measured    no train shards with the mix yet"]
    how = "recounted from the shards (--verify)" if verified else "counted in the written tokens"
    lines = [f"measured    task mix in {len(entries)} train shards, {how}:",
             f"            {'kind':<18}{'documents':>12}{'doc share':>11}{'tokens':>16}{'token share':>13}"]
    order = sorted(totals, key=lambda k: (k == CORPUS, k))
    for kind in order + ["tasks (all)"]:
        d, t = totals[kind] if kind in totals else (docs - totals.get(CORPUS, [0, 0])[0],
                                                      toks - totals.get(CORPUS, [0, 0])[1])
        lines.append(f"            {kind:<18}{d:>12,}{d / docs:>11.2%}{t:>16,}{t / toks:>13.2%}")
    return lines


def count_mix(ids: np.ndarray, tok, mixer: TaskMixer, file_index: int, path, positions=None) -> dict:
    """Documents and tokens per kind, recounted from a train shard's tokens: the mixing rule is replayed
    over the shard's documents, and every task document must be exactly the example the rule puts there; with
    the shard's `positions`, every document's ids must be what tokenize writes (token_positions.py)."""
    ids = np.asarray(ids)
    starts = np.flatnonzero(ids == tok.bos_id)  # BOS never occurs inside a document
    bounds = list(zip(starts, np.append(starts[1:], len(ids))))
    docs = [ids[a:b] for a, b in bounds]
    counts: dict[str, list[int]] = {}
    replay = mixer.replay_documents(docs, lambda text: tok.encode_documents([text]), file_index * EXAMPLES_PER_FILE)
    for j, (doc, (a, b), (kind, matches, task_doc)) in enumerate(zip(docs, bounds, replay)):
        if not matches:
            raise DataError(f"{path}: document {j} should be the next {kind} example but its tokens differ; "
                            "delete the shard and re-run tokenize")
        if positions is not None and not np.array_equal(positions[a:b], document_positions(tok, doc, task_doc)):
            raise DataError(f"{path}: the position ids of document {j} ({kind}) differ from what its task defines; "
                            "delete the shard and re-run tokenize")
        c = counts.setdefault(kind, [0, 0])
        c[0] += 1
        c[1] += len(doc)
    return {kind: {"documents": d, "tokens": t} for kind, (d, t) in sorted(counts.items())}
