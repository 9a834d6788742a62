"""Argument checks of the command lines (``python -m inkling_ops warmup``, ``demo`` and ``demo
step``): each turns a bad value into an error naming the flag, not a traceback."""

from __future__ import annotations

import argparse

import torch


def int_list(least: int):
    """An argparse ``type``: comma-separated integers, each at least ``least``."""

    def parse(text: str) -> list[int]:
        try:
            values = [int(x) for x in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
        if min(values) < least:
            raise argparse.ArgumentTypeError(f"{text!r}: every entry must be at least {least}")
        return values

    return parse


def missing_cuda_device(device: torch.device) -> str | None:
    """Why ``device`` is a CUDA device this machine does not have (``"this machine has N CUDA
    device(s)"``), or None when it has it or ``device`` is not a CUDA device."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device.type == "cuda" and (device.index or 0) >= count:
        return f"this machine has {count} CUDA device(s)"
    return None


def device(text: str) -> torch.device:
    """An argparse ``type``: a CPU or CUDA device that exists on this machine."""
    try:
        value = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a torch device; expected cpu or cuda[:N]") from None
    if value.type not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"{text!r}: the demo runs on cpu or cuda")
    missing = missing_cuda_device(value)
    if missing is not None:
        raise argparse.ArgumentTypeError(f"{text!r}: {missing}")
    return value
