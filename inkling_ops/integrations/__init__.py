"""Optional integrations of inkling_ops with other libraries.

Nothing here is imported by ``inkling_ops`` itself: import a submodule explicitly, e.g.
``import inkling_ops.integrations.hf`` for Hugging Face transformers.
"""
