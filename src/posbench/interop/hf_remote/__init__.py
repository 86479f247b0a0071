"""The decoder shell written next to an exported checkpoint whose PE has no transformers architecture: every
module of this package but this one (posbench.interop.hf_posbench.REMOTE_FILES), copied verbatim into the export
directory and loaded there by transformers with `trust_remote_code=True`.

They import torch, transformers and each other (relative imports of the form `from .module import name`, the
form transformers follows), never posbench: the PE is posbench's own, written beside them by the export
(posbench.interop.hf_zoo), which the decoder imports from the generated `pe_zoo.py`. The shell is therefore only
importable from an export directory."""
