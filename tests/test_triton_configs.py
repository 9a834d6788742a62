"""``fwd_config``: the Triton launch configuration as a pure function of compile-key quantities."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inkling_ops.kernels.triton_configs import DECODE_MAX_Q, TWO_PASS_MIN_PAGE, FwdConfig, fwd_config, fwd_constexprs


@given(
    head_dim=st.sampled_from([64, 128, 256]),
    q_per_kv=st.integers(1, 16),
    bucket_log2=st.integers(0, 17),
    window_left=st.integers(-1, 5000),
    rel_extent=st.integers(1, 4096),
    page_size=st.sampled_from([1, 8, 16, 32, 64, 128, 256]),
)
def test_tiles_fit_and_nest(head_dim, q_per_kv, bucket_log2, window_left, rel_extent, page_size):
    """Every configuration holds all query heads of a KV head in one program, and a two-pass
    configuration's tiles divide the plain pass's (launch_rel_attn_fwd requires it)."""
    bucket = 1 << bucket_log2
    config = fwd_config(
        head_dim=head_dim, q_per_kv=q_per_kv, max_seqlen_q_bucket=bucket, window_left=window_left, rel_extent=rel_extent,
        page_size=page_size,
    )  # fmt: skip
    g_pad = 1 << max(0, q_per_kv - 1).bit_length()
    assert config.block_m >= g_pad and config.block_m % g_pad == 0
    if bucket <= DECODE_MAX_Q:
        # decode gathers the bias with tl.load, except 16-row tiles of windows inside E
        band_only_16 = 0 <= window_left < rel_extent and config.block_m == 16 and head_dim <= 128
        assert config.plain is None and config.asm_gather == band_only_16
    if config.plain is not None:
        assert config.plain.block_n % config.block_n == 0
        assert (config.plain.block_m // g_pad) % (config.block_m // g_pad) == 0
    if 0 <= window_left < rel_extent and bucket > DECODE_MAX_Q:
        assert config.plain is None  # every tile is a band tile: one launch
    if page_size < TWO_PASS_MIN_PAGE:
        assert config.plain is None  # plain tiles spanning several pages: one launch


def test_fwd_constexprs_name_the_kernel_constexprs_in_signature_order():
    """The launcher appends ``fwd_constexprs(...)`` to the kernel's arguments as they come: its
    fields must be the kernel's constexpr parameters, in order."""
    pytest.importorskip("triton")
    import inspect

    from inkling_ops.kernels.triton_configs import FwdConstexprs
    from inkling_ops.kernels.triton_fwd import rel_attn_fwd_kernel

    params = inspect.signature(rel_attn_fwd_kernel.fn).parameters.values()
    constexprs = [p.name for p in params if "constexpr" in str(p.annotation)]
    assert list(FwdConstexprs._fields) == constexprs


def test_fwd_constexprs_one_name_per_flag_and_call_facts():
    config = FwdConfig(16, 64, 4, 1, asm_gather=True, kv_prefetch=True, split_strided=True, kv_evict_first=True)
    facts = dict(group=6, head_dim=128, num_kv_heads=2, page_size=16, rel_extent=64, window_left=-1)
    split = fwd_constexprs(config, **facts, num_splits=4)
    assert (split.G, split.G_PAD, split.BLOCK_M, split.SPLIT_KV, split.NUM_SPLITS) == (6, 8, 16, True, 4)
    assert split.SPLIT_STRIDED and split.KV_PREFETCH and split.KV_EVICT_FIRST and split.ASM_GATHER
    assert split.KV_SLOT_SHIFT == 8 and split.DOT_PRECISION == "tf32"  # slot stride 2 x 128
    one = fwd_constexprs(config, **facts, fp32=True, ptx_gather=False, kv_slot_stride=3 * 128)
    assert not one.SPLIT_KV and not one.SPLIT_STRIDED  # strided splits mean nothing unsplit
    assert not one.ASM_GATHER and one.DOT_PRECISION == "ieee" and one.KV_SLOT_SHIFT == -1
    assert fwd_constexprs(config, **facts, kv_row_i32=False).KV_SLOT_SHIFT == -1


@pytest.mark.parametrize(
    "config,kwargs,match",
    [
        (FwdConfig(16, 64, 4, 2, kv_prefetch=True), {}, "kv_prefetch=True with num_stages=2"),
        (FwdConfig(16, 64, 4, 2), dict(num_splits=2, fwd_pass=1), "split-KV runs in one pass"),
        (FwdConfig(16, 64, 4, 2), dict(fwd_pass=2, pass1_config=FwdConfig(64, 32, 4, 2)), "must divide"),
        (FwdConfig(16, 64, 4, 2), dict(fwd_pass=2), "needs pass1_config"),
    ],
    ids=["prefetch_pipelined", "split_two_pass", "tiles_do_not_nest", "no_pass1_config"],
)
def test_fwd_constexprs_rejects_what_the_kernel_cannot_run(config, kwargs, match):
    facts = dict(group=8, head_dim=128, num_kv_heads=1, page_size=16, rel_extent=64, window_left=-1)
    with pytest.raises(ValueError, match=match):
        fwd_constexprs(config, **facts, **kwargs)
