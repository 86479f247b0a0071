"""The exported tokenizer adds <|bos|> as training's documents began, and the model card says so."""

import pytest

transformers = pytest.importorskip("transformers")

from posbench.data.tokenizers import TokenizerConfig, build_tokenizer  # noqa: E402
from posbench.interop.hf_export import export  # noqa: E402
from posbench.interop.hf_tokenizer import hf_tokenizer  # noqa: E402
from tests.interop.test_hf_export import checkpoint  # noqa: E402


def test_exported_tokenizer_starts_every_text_with_bos_as_training_did(tmp_path):
    """Item 9: `tokenizer(text)` gives [bos_id, *posbench's ids] (training documents and eval prompts
    start with <|bos|>), saved and loaded back too; add_special_tokens=False leaves it out."""
    tok = build_tokenizer(TokenizerConfig.registry_lookup("bytes")(name="bytes"), tmp_path)
    fast = hf_tokenizer(tok)
    text = "positions, 2024"
    assert fast(text)["input_ids"] == [tok.bos_id, *tok.encode(text)]
    assert fast.encode(text, add_special_tokens=False) == tok.encode(text)
    fast.save_pretrained(tmp_path / "t")
    again = transformers.AutoTokenizer.from_pretrained(tmp_path / "t")
    assert again(text)["input_ids"] == [tok.bos_id, *tok.encode(text)]


def test_model_card_says_the_tokenizer_adds_bos(tmp_path):
    """Item 9: the model card states that the tokenizer adds <|bos|> (with its id), as training did."""
    run = checkpoint(tmp_path, "rope")
    out = export(run, tmp_path / "hf", log=lambda *_: None)
    card = (out / "README.md").read_text()
    assert "adds `<|bos|>`" in card and "add_special_tokens=False" in card
