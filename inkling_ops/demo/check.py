"""The serving demo's check: its greedy tokens against Hugging Face's eager Inkling attention.

Two criteria, both computed on every run:

- exact: each request's tokens equal ``generate(do_sample=False)`` of the same HF model with
  ``attn_implementation="eager"``, run on that prompt alone (no padding), in float32. This is
  the criterion when the loop runs in float32 (the CPU demo).
- teacher-forced: the same float32 eager model reads each request's prompt plus the loop's own
  tokens in one forward; at every generated position the loop's token must be a near-top choice
  of that model, ``max(logits) - logits[token] <= tol * max|logits|``. This is the criterion in
  bfloat16 (the CUDA demo), where bf16 rounding may legitimately flip a near-tie and greedy
  sequences then diverge: the check still fails if a token is clearly not what the exact model
  would choose given the same history (a wrong bias, window or cache shows far above ``tol``).
  A model in bf16 drifts from its float32 original by itself, so the bound is ``tol`` or
  ``CONTROL_FACTOR`` times the gap of a *control*, whichever is larger: the same HF model with
  its own eager attention in the loop's dtype, greedy on the same prompts and scored the same
  way. Our loop's bf16 path (other kernels, another accumulation order) drifts by a comparable
  but not smaller amount; a missing bias drifts several times further (the measured gaps:
  meta/TUNING.md, "Serving demo").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: bf16 logits carry ~2^-8 relative error per rounding; a flipped near-tie stays well under this.
TEACHER_FORCED_TOL = 2e-2
#: how far past the control's gap the loop's may go (measured ratios: meta/TUNING.md, "Serving demo")
CONTROL_FACTOR = 2.0


@dataclass
class CheckResult:
    exact_requests: int  # requests whose tokens equal HF's greedy generation
    num_requests: int
    exact_tokens: int  # positions equal before each request's first divergence, summed
    num_tokens: int
    worst_gap: float  # max over generated positions of (max(logits) - logits[token]) / max|logits|
    criterion: str  # "exact" or "teacher-forced"
    control_gap: float | None = None  # the same gap for HF eager in the loop's dtype (teacher-forced bound)

    @property
    def ok(self) -> bool:
        if self.criterion == "exact":
            return self.exact_requests == self.num_requests
        return self.worst_gap <= self.bound

    @property
    def bound(self) -> float:
        """The teacher-forced criterion's bound: the tolerance, or ``CONTROL_FACTOR`` times the
        control's gap if larger."""
        return max(TEACHER_FORCED_TOL, CONTROL_FACTOR * (self.control_gap or 0.0))

    def __str__(self) -> str:
        verdict = "PASS" if self.ok else "FAIL"
        return (
            f"greedy check vs HF eager (float32): {verdict} [{self.criterion}] -- {self.exact_requests}/{self.num_requests} "
            f"requests token-identical, {self.exact_tokens}/{self.num_tokens} tokens before the first divergence; "
            f"teacher-forced worst gap {self.worst_gap:.2e} of the logit scale (tolerance {TEACHER_FORCED_TOL}"
            + (f"; HF eager in the loop's dtype: {self.control_gap:.2e}, bound {self.bound:.2e} = max(tolerance, "
               f"{CONTROL_FACTOR:g} x that)" if self.control_gap is not None else "")
            + ")"
        )


@torch.inference_mode()
def check_against_hf(reference: torch.nn.Module, prompts: list[list[int]], outputs: list[list[int]],
                     *, exact: bool, control: list[list[int]] | None = None) -> CheckResult:  # fmt: skip
    """``reference``: the float32 HF model with attn_implementation="eager"; ``outputs[i]``: the
    loop's tokens for ``prompts[i]``. ``exact``: require token identity (else the teacher-forced
    gap). ``control``: the tokens of HF eager in the loop's dtype (:func:`greedy`), whose gap
    widens the teacher-forced bound."""
    control_gap = None if control is None else _worst_gap(reference, prompts, control)
    exact_requests = exact_tokens = num_tokens = 0
    worst = 0.0
    for prompt, output in zip(prompts, outputs):
        n = len(output)
        (expected,) = greedy(reference, [prompt], n)
        exact_requests += expected == output
        exact_tokens += next((i for i, (a, b) in enumerate(zip(expected, output)) if a != b), n)
        num_tokens += n
        worst = max(worst, _worst_gap(reference, [prompt], [output]))
    return CheckResult(exact_requests, len(prompts), exact_tokens, num_tokens, worst,
                       "exact" if exact else "teacher-forced", control_gap)  # fmt: skip


@torch.inference_mode()
def greedy(model: torch.nn.Module, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """HF's greedy ``generate`` of ``model`` on each prompt alone: the new tokens."""
    device = next(model.parameters()).device
    outputs = []
    for prompt in prompts:
        ids = torch.tensor([prompt], device=device)
        out = model.generate(input_ids=ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
        outputs.append(out[0, len(prompt) :].tolist())
    return outputs


@torch.inference_mode()
def _worst_gap(reference, prompts, outputs) -> float:
    """The teacher-forced gap of ``outputs`` under ``reference`` (the max over positions)."""
    device = next(reference.parameters()).device
    worst = 0.0
    for prompt, output in zip(prompts, outputs):
        full = torch.tensor([prompt + output[:-1]], device=device)
        logits = reference(input_ids=full).logits[0, len(prompt) - 1 :].float()
        chosen = logits.gather(-1, torch.tensor(output, device=device)[:, None])[:, 0]
        worst = max(worst, ((logits.amax(-1) - chosen) / logits.abs().amax()).max().item())
    return worst
