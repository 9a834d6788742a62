"""The one case matrix every backend is checked on (tests/test_conformance.py).

Each case has a CPU form (fp32, head_dim 32, small enough for Triton's interpreter) and a GPU
form (bf16, head_dim 128, Inkling-sized); both exercise the same feature. Every case is built
by ``inkling_ops.testing.make_case``, so its pages are a random permutation of the cache's
blocks, unused blocks and slots past each request's length hold NaN / inf, unused block-table
entries hold huge ids, and rows past cu_seqlens_q[-1] exist (``extra_tokens``).

The CPU form fixes its page size and K/V layout; the GPU form runs at each of ``gpu_pages``,
with separate and packed K/V.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Page sizes of the GPU forms unless a case says otherwise.
GPU_PAGES = (16, 64, 128)
#: Split counts forced on CPU, beside the heuristic's choice, on the cases a backend splits
#: (short queries: its split policy's max_split_q). 3 splits go through the combine kernel, 4 merge in the
#: forward kernel (triton_configs.merges_splits).
CPU_FORCED_SPLITS = (1, 3, 4)


@dataclass(frozen=True)
class ConformanceCase:
    """``cpu`` / ``gpu``: make_case keyword arguments of the two forms (without dtype, device,
    head_dim and, for the GPU form, page_size and packed_kv)."""

    id: str
    cpu: dict
    gpu: dict
    gpu_pages: tuple[int, ...] = GPU_PAGES
    #: split counts forced on GPU for backends that split, beside the heuristic's (0)
    gpu_splits: tuple[int, ...] = ()
    note: str = field(default="", compare=False)


def _c(id, cpu, gpu, **kw) -> ConformanceCase:
    return ConformanceCase(id, cpu, gpu, **kw)


CASES = [
    # ragged prefill, q_len == kv_len
    _c("prefill_ragged_g8",
       dict(q_lens=[17, 3, 1], kv_lens=[17, 3, 1], num_heads=8, num_kv_heads=1, rel_extent=16),
       dict(q_lens=[1500, 7], kv_lens=[1500, 7], num_heads=8, num_kv_heads=1, rel_extent=1024)),
    # Inkling's sliding layers: window 511 with E 512 (CPU: 31 with 32)
    _c("sliding_w_E_minus_1_g4",
       dict(q_lens=[40], kv_lens=[200], rel_extent=32, window_left=31, num_heads=8, num_kv_heads=2),
       dict(q_lens=[1300], kv_lens=[1300], num_heads=8, num_kv_heads=2, rel_extent=512, window_left=511)),
    # prefill chunks (q_len < kv_len) and decodes mixed in one call
    _c("chunks_and_decodes_g8",
       dict(q_lens=[24, 9, 1, 1], kv_lens=[90, 40, 33, 1], num_heads=8, num_kv_heads=1, rel_extent=24),
       dict(q_lens=[300, 129, 1], kv_lens=[2000, 700, 1500], num_heads=16, num_kv_heads=2, rel_extent=1024)),
    _c("chunks_and_decodes_sliding_g4_packed",
       dict(q_lens=[40, 2, 1], kv_lens=[90, 33, 70], window_left=15, rel_extent=16, num_heads=8, num_kv_heads=2,
            packed_kv=True),
       dict(q_lens=[200, 64, 1], kv_lens=[1800, 600, 900], num_heads=16, num_kv_heads=4, rel_extent=512,
            window_left=511)),
    # decode (q_len 1), E smaller than kv_len
    _c("decode_E_lt_kv_g8",
       dict(q_lens=[1, 1, 1], kv_lens=[300, 7, 64], rel_extent=16, num_heads=8, num_kv_heads=1),
       dict(q_lens=[1] * 5, kv_lens=[3000, 17, 1024, 1025, 2], num_heads=64, num_kv_heads=8, rel_extent=1024),
       gpu_splits=(2, 7)),
    # decode with E larger than every kv_len, page 64 (GPU: one long and one short decode, a spec verify)
    _c("decode_E_gt_kv_page64",
       dict(q_lens=[1, 1], kv_lens=[100, 3], rel_extent=128, page_size=64),
       dict(q_lens=[1, 4, 1], kv_lens=[5000, 300, 3], num_heads=8, num_kv_heads=1, rel_extent=1024),
       gpu_splits=(1, 2, 7, 64)),
    # many sliding decodes, window inside E: kv shorter than the window, one key, windows
    # starting mid-tile and mid-page
    _c("decode_sliding_batch_g4",
       dict(q_lens=[1] * 7, kv_lens=[300, 1, 31, 32, 33, 50, 77], rel_extent=32, window_left=31, num_heads=8,
            num_kv_heads=2),
       dict(q_lens=[1] * 64, kv_lens=[8192, 1, 511, 512, 513, 700, 1000, 77] * 8, num_heads=8, num_kv_heads=2,
            rel_extent=512, window_left=511),
       gpu_pages=(16, 128), gpu_splits=(1, 2, 4, 5)),
    # speculative verify: q_len 2 to 16
    _c("spec_verify_2_to_16",
       dict(q_lens=[9, 2, 16, 4], kv_lens=[150, 9, 40, 16], rel_extent=32, num_heads=2, num_kv_heads=1),
       dict(q_lens=[16, 9, 3, 2], kv_lens=[2100, 9, 40, 300], num_heads=4, num_kv_heads=1, rel_extent=1024)),
    # E much smaller than kv_len
    _c("E_small_g2",
       dict(q_lens=[30], kv_lens=[120], rel_extent=4, num_heads=4, num_kv_heads=2),
       dict(q_lens=[200], kv_lens=[900], num_heads=8, num_kv_heads=1, rel_extent=16)),
    # E larger than every kv_len, extend and decode
    _c("E_gt_kv_g2",
       dict(q_lens=[20, 1], kv_lens=[60, 40], rel_extent=128, num_heads=4, num_kv_heads=2),
       dict(q_lens=[100, 1], kv_lens=[300, 200], num_heads=8, num_kv_heads=4, rel_extent=1024)),
    # window wider than E (MHA: group size 1), page 128
    _c("window_wider_than_E_mha_page128",
       dict(q_lens=[40], kv_lens=[170], rel_extent=16, window_left=40, num_heads=4, num_kv_heads=4, page_size=128),
       dict(q_lens=[300], kv_lens=[1000], num_heads=8, num_kv_heads=8, rel_extent=64, window_left=200)),
    _c("window0",
       dict(q_lens=[6, 1], kv_lens=[20, 5], window_left=0, rel_extent=4),
       dict(q_lens=[100, 1], kv_lens=[500, 300], window_left=0, rel_extent=16, num_heads=8, num_kv_heads=1)),
    # GQA group 16
    _c("gqa16",
       dict(q_lens=[5, 1], kv_lens=[80, 30], rel_extent=24, num_heads=16, num_kv_heads=1),
       dict(q_lens=[40, 1], kv_lens=[700, 300], num_heads=16, num_kv_heads=1, rel_extent=128)),
    # requests with no query rows, first and in the middle (group 3 on CPU)
    _c("empty_requests",
       dict(q_lens=[0, 20, 0, 12], kv_lens=[5, 100, 9, 12], rel_extent=64, num_heads=6, num_kv_heads=2),
       dict(q_lens=[0, 50, 0, 1], kv_lens=[10, 400, 0, 77], num_heads=8, num_kv_heads=1, rel_extent=128)),
    # the same on a sliding layer (the CuTe kernel's compact grid: its scan skips requests of no rows)
    _c("empty_requests_sliding",
       dict(q_lens=[0, 20, 0, 12], kv_lens=[5, 100, 9, 12], rel_extent=16, window_left=15, num_heads=6, num_kv_heads=2),
       dict(q_lens=[0, 50, 0, 300, 1], kv_lens=[10, 400, 0, 900, 77], num_heads=8, num_kv_heads=2, rel_extent=512,
            window_left=255)),
    # group 3 (the CuTe kernel stages its bias rows by bulk copies, with zeros past E): E a few
    # key tiles below the diagonal, so a wholly visible key tile has d crossing E
    _c("gqa3_e_edge",
       dict(q_lens=[30, 1], kv_lens=[120, 50], rel_extent=24, num_heads=6, num_kv_heads=2),
       dict(q_lens=[200, 1], kv_lens=[1200, 700], num_heads=6, num_kv_heads=2, rel_extent=320)),
    # pages that neither divide nor are a multiple of the kernels' tiles: a tile spans pages unevenly
    _c("odd_pages_chunks",
       dict(q_lens=[3, 1], kv_lens=[150, 70], page_size=3, rel_extent=20, num_heads=2, num_kv_heads=1),
       dict(q_lens=[300, 129, 1], kv_lens=[2000, 700, 1500], num_heads=16, num_kv_heads=2, rel_extent=1024),
       gpu_pages=(24, 48, 96)),
    _c("odd_pages_decode_g8",
       dict(q_lens=[1, 1], kv_lens=[300, 100], page_size=48, rel_extent=40, num_heads=8, num_kv_heads=1),
       dict(q_lens=[1] * 5, kv_lens=[3000, 17, 1024, 1025, 2], num_heads=64, num_kv_heads=8, rel_extent=1024),
       gpu_pages=(24, 48, 96)),
    _c("odd_pages_sliding_packed",
       dict(q_lens=[2, 1], kv_lens=[130, 60], rel_extent=20, window_left=40, num_heads=4, num_kv_heads=2,
            page_size=24, packed_kv=True),
       dict(q_lens=[1] * 4, kv_lens=[3000, 17, 512, 513], num_heads=64, num_kv_heads=16, rel_extent=512,
            window_left=511),
       gpu_pages=(24, 48, 96)),
    # block table, lengths and cu_seqlens_q as views (every other column of wider tensors, garbage
    # between): valid input the kernels must read as the reference does
    _c("strided_index_chunks_decodes_g4",
       dict(q_lens=[24, 1, 1], kv_lens=[90, 40, 7], rel_extent=16, window_left=20, num_heads=8, num_kv_heads=2,
            strided_index=True),
       dict(q_lens=[300, 1, 1], kv_lens=[2000, 900, 17], num_heads=8, num_kv_heads=2, rel_extent=512,
            window_left=511, strided_index=True)),
    _c("odd_pages_spec_verify",
       dict(q_lens=[40, 1], kv_lens=[250, 130], page_size=96, rel_extent=24, num_heads=4, num_kv_heads=1),
       dict(q_lens=[9, 3, 1], kv_lens=[2100, 9, 40], num_heads=4, num_kv_heads=1, rel_extent=1024),
       gpu_pages=(24, 48, 96)),
]  # fmt: skip

BY_ID = {c.id: c for c in CASES}
