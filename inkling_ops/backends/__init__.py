"""Kernel backends of rel_attn. Each module holds one backend; none imports the dispatcher."""
