"""The export's tokenizer (tokenizer.json + tokenizer_config.json): the checkpoint's tokenizer as a
PreTrainedTokenizerFast with the same ids, which adds `<|bos|>` before every text as training did."""

from __future__ import annotations

import tempfile
from base64 import b64encode
from pathlib import Path

from posbench.data.tokenizers import BOS, Tokenizer


def hf_tokenizer(tokenizer: Tokenizer):
    """A PreTrainedTokenizerFast with the same ids as `tokenizer`: its rank table, split pattern and special
    tokens go through transformers' own tiktoken converter (byte-level BPE, merges recovered from ranks)."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    enc = tokenizer.encoding
    with tempfile.TemporaryDirectory() as tmp:
        ranks = Path(tmp) / "ranks.tiktoken"
        ranks.write_text("".join(f"{b64encode(tok).decode()} {rank}\n"
                                 for tok, rank in sorted(enc._mergeable_ranks.items(), key=lambda kv: kv[1])))
        specials = sorted(enc._special_tokens, key=enc._special_tokens.get)
        converted = TikTokenConverter(vocab_file=str(ranks), pattern=enc._pat_str,
                                      extra_special_tokens=specials).converted()
    # <|bos|> first, as every training document and evaluation prompt began: `tokenizer(text)` gives what the model
    # saw (add_special_tokens=False leaves it out); kept in tokenizer.json, so any loader of it does the same
    template = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B",
                                             special_tokens=[(BOS, tokenizer.bos_id)])
    converted.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False), template])
    return PreTrainedTokenizerFast(tokenizer_object=converted, bos_token=BOS, eos_token=BOS)
