"""The files written next to an exported checkpoint whose PE has no transformers architecture: every module of
this package but this one (posbench.interop.hf_export.REMOTE_FILES).

They are copied verbatim into the export directory and loaded there by transformers with
`trust_remote_code=True`, so they import only torch, transformers and each other (relative imports of the form
`from .module import name`, the form transformers follows), never posbench."""
