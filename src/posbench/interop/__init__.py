"""Taking checkpoints elsewhere: `hf_export` writes a transformers model directory."""
