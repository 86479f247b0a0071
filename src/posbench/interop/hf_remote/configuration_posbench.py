"""Configuration of a pos-enc-bench decoder exported for `transformers` (remote code; no posbench import).

The architecture is posbench's decoder (pre-norm RMSNorm, SwiGLU, optional per-head QK RMSNorm, optionally
tied embeddings, no biases); `pe` is the checkpoint's positional-encoding config as saved by posbench, a
plain dict (nested for `hybrid` and `randomized`), interpreted by modeling_posbench.py; `packing` likewise.
"""

from transformers import PretrainedConfig


class PosbenchConfig(PretrainedConfig):
    model_type = "posbench"

    def __init__(self, vocab_size=256, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                 num_attention_heads=4, max_position_embeddings=64, rms_norm_eps=1e-6, qk_norm=True,
                 init_std=0.02, pe=None, tie_word_embeddings=True, use_cache=True, embed_scale="none",
                 packing=None, attention_window=None, attention_gate="none", attention_sinks=False,
                 attention_temperature=None, attention_chunk=None, qk_norm_weight=True, qk_norm_layers="all",
                 **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_attention_heads  # DynamicCache reads it
        self.head_dim = hidden_size // num_attention_heads
        # the training length: the default extent of fixed tables and the `original` length of RoPE scaling
        self.max_position_embeddings = max_position_embeddings
        self.rms_norm_eps = rms_norm_eps
        self.qk_norm = qk_norm
        self.init_std = init_std
        self.embed_scale = embed_scale  # token embeddings x 1 (none) or x sqrt(hidden_size) (sqrt_d)
        self.pe = pe if pe is not None else {"name": "none"}
        # posbench's model.packing ({mask, positions, bos_id}): rows split into documents at bos_id; None: not split
        self.packing = packing
        # posbench's model.attention_window: None (full), W for every layer, or a list cycling over the layers
        self.attention_window = attention_window
        # posbench's attention options (docs/recipes.md), all off by default: a sigmoid gate on each head's output
        # (none | elementwise | headwise), a learned sink logit per head, a temperature by position ({name, ...}:
        # none | log_n | ssmax | llama4), chunked local attention (like attention_window), a weightless QK-norm and
        # QK-norm on positional layers only
        self.attention_gate = attention_gate
        self.attention_sinks = attention_sinks
        self.attention_temperature = attention_temperature if attention_temperature is not None else {"name": "none"}
        self.attention_chunk = attention_chunk
        self.qk_norm_weight = qk_norm_weight
        self.qk_norm_layers = qk_norm_layers
        self.use_cache = use_cache  # False for randomized positions, which are drawn per whole sequence
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)
