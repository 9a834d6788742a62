"""A small serving loop over :class:`~inkling_ops.demo.model.PagedInkling`: a paged KV cache, a
scheduler with chunked prefill, greedy decoding, and CUDA graphs for decode steps.

Each step the scheduler gives every running request that has finished its prompt one decode token,
then spends what is left of the token budget (``max_num_batched_tokens``) on prompt chunks, in
admission order: a long prompt is prefilled over several steps while the others decode, in one
packed batch. A request samples (argmax) when its step reaches the last token it knows. Blocks come
from a shuffled free list (block 0 is scratch for padding), so requests' pages are not contiguous.

On CUDA (``cuda_graphs=True``) a step made only of decodes runs as the replay of a CUDA graph
captured for its batch-size bucket (1, 2, 4, ... up to ``bucket_pow2(max_num_seqs)``): the step's metadata are
copied into the graph's static inputs (padding requests read and write the scratch block and the
scratch conv state), and the graph replays the whole compiled model, our op in every layer.
Steps with prompt chunks run the compiled model directly.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import torch

from ..heuristics import bucket_max_seqlen_q, bucket_pow2
from .model import PagedInkling


@dataclass
class Request:
    """A prompt and what the loop has done with it."""

    rid: int
    prompt: list[int]
    max_new_tokens: int
    output: list[int] = field(default_factory=list)
    num_computed: int = 0  # tokens whose K/V (and conv inputs) are in the cache
    blocks: list[int] = field(default_factory=list)
    slot: int = -1  # conv-state slot

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output

    @property
    def prefilling(self) -> bool:
        return self.num_computed < len(self.prompt)

    @property
    def done(self) -> bool:
        return len(self.output) >= self.max_new_tokens


def graph_buckets(max_num_seqs: int) -> list[int]:
    """The decode batch sizes the engine captures a CUDA graph for: 1, 2, 4, ... up to
    ``bucket_pow2(max_num_seqs)``, so that a step of any 1 to ``max_num_seqs`` decodes replays the
    graph of its power-of-two bucket (with padding requests on the scratch block). Pure."""
    buckets = [1]
    while buckets[-1] < bucket_pow2(max_num_seqs):
        buckets.append(buckets[-1] * 2)
    return buckets


@dataclass
class Stats:
    """What a run did."""

    steps: int = 0
    mixed_steps: int = 0  # steps with prompt chunks (compiled model called directly)
    decode_steps: int = 0  # decode-only steps
    graph_replays: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    prefill_chunks: int = 0
    max_batch: int = 0
    seconds: float = 0.0
    buckets_used: set = field(default_factory=set)


class Engine:
    """Greedy serving of a :class:`PagedInkling` (see the module docstring)."""

    def __init__(self, model: PagedInkling, forward, *, max_num_seqs: int, max_num_batched_tokens: int,
                 max_model_len: int, cuda_graphs: bool = False, seed: int = 0):  # fmt: skip
        self.model, self.forward = model, forward  # forward: the compiled model (or model itself)
        self.page = model.page_size
        self.max_num_seqs, self.budget, self.max_model_len = max_num_seqs, max_num_batched_tokens, max_model_len
        self.max_blocks = -(-max_model_len // self.page)
        self.device = model.key_cache_0.device
        num_blocks = model.key_cache_0.shape[0]
        self.free_blocks = list(range(1, num_blocks))  # block 0: scratch for padding requests
        random.Random(seed).shuffle(self.free_blocks)
        self.free_slots = list(range(max_num_seqs))
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.finished: list[Request] = []
        self.stats = Stats()
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, dict, torch.Tensor]] = {}
        self.cuda_graphs = cuda_graphs

    def add_request(self, rid: int, prompt: list[int], max_new_tokens: int) -> None:
        if not prompt or len(prompt) + max_new_tokens > self.max_model_len:
            raise ValueError(
                f"add_request: prompt of {len(prompt)} tokens + {max_new_tokens} new; expected 1 <= total <= "
                f"max_model_len {self.max_model_len}"
            )
        self.waiting.append(Request(rid, list(prompt), max_new_tokens))

    # -- scheduling -------------------------------------------------------------------------------

    def _admit(self) -> None:
        while self.waiting and self.free_slots:
            req = self.waiting.pop(0)
            req.slot = self.free_slots.pop(0)
            self.model.reset_states([req.slot])
            self.running.append(req)

    def schedule(self) -> list[tuple[Request, int]]:
        """This step's (request, new tokens): one per decoding request, then prompt chunks."""
        self._admit()
        budget = self.budget
        batch = []
        for req in self.running:
            if not req.prefilling and budget > 0:
                batch.append((req, 1))
                budget -= 1
        for req in self.running:
            if req.prefilling and budget > 0:
                n = min(len(req.prompt) - req.num_computed, budget)
                batch.append((req, n))
                budget -= n
        return batch

    def _blocks_for(self, req: Request, kv_len: int) -> None:
        while len(req.blocks) * self.page < kv_len:
            if not self.free_blocks:
                raise RuntimeError("the KV cache is full (the demo sizes it for its requests; no preemption)")
            req.blocks.append(self.free_blocks.pop())

    # -- one step ---------------------------------------------------------------------------------

    def metadata(self, batch: list[tuple[Request, int]], padding: list[int] = ()) -> dict[str, torch.Tensor]:
        """The step's tensors (PagedInkling.forward's arguments but max_seqlen_q), on the host.
        ``padding``: query lengths of padding requests appended after ``batch``; they live on the
        scratch block 0 (every position maps into it) and the scratch conv state."""
        ids, pos, slots, lens, cu, table, state, last = [], [], [], [], [0], [], [], []

        def add(tokens, positions, slot_ids, blocks, slot):
            ids.extend(tokens), pos.extend(positions), slots.extend(slot_ids)
            lens.append(positions[-1] + 1), cu.append(cu[-1] + len(tokens))
            table.append(blocks + [0] * (self.max_blocks - len(blocks))), state.append(slot), last.append(cu[-1] - 1)

        for req, n in batch:
            start = req.num_computed
            self._blocks_for(req, start + n)
            positions = list(range(start, start + n))
            add(req.tokens[start : start + n], positions,
                [req.blocks[p // self.page] * self.page + p % self.page for p in positions], req.blocks, req.slot)  # fmt: skip
        for n in padding:
            add([0] * n, list(range(n)), [p % self.page for p in range(n)], [], self.model.scratch_slot)
        i64, i32 = torch.int64, torch.int32
        return dict(
            input_ids=torch.tensor(ids, dtype=i64), positions=torch.tensor(pos, dtype=i64),
            slot_mapping=torch.tensor(slots, dtype=i64), block_table=torch.tensor(table, dtype=i32),
            cache_seqlens=torch.tensor(lens, dtype=i32), cu_seqlens_q=torch.tensor(cu, dtype=i32),
            state_slots=torch.tensor(state, dtype=i64), logits_indices=torch.tensor(last, dtype=i64),
        )  # fmt: skip

    def warmup(self, shapes: list[list[int]]) -> None:
        """Run the forward once per entry of ``shapes`` (query lengths of padding requests, which
        touch only the scratch block and conv state), so the compiler has seen those shapes."""
        for q_lens in shapes:
            self._call(self.metadata([], padding=q_lens), max(q_lens))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def step(self) -> list[tuple[Request, int]]:
        batch = self.schedule()
        if not batch:
            return batch
        decode_only = all(n == 1 and not req.prefilling for req, n in batch)
        if decode_only and self.cuda_graphs:
            bucket = bucket_pow2(len(batch))  # the graph of the next power of two
            meta = self.metadata(batch, padding=[1] * (bucket - len(batch)))
            logits = self._replay(bucket, meta)[: len(batch)]
            self.stats.graph_replays += 1
            self.stats.buckets_used.add(bucket)
        else:  # at least two requests: a 1-token padding request joins a lone one (see _call)
            meta = self.metadata(batch, padding=[1] * (len(batch) < 2))
            logits = self._call(meta, max(n for _, n in batch))
        next_tokens = logits.argmax(-1).tolist()
        st = self.stats
        st.steps += 1
        st.max_batch = max(st.max_batch, len(batch))
        st.decode_steps += decode_only
        st.mixed_steps += not decode_only
        for (req, n), token in zip(batch, next_tokens):
            if req.prefilling:
                st.prefill_tokens += n
                st.prefill_chunks += 1
            else:
                st.decode_tokens += n
            req.num_computed += n
            if req.num_computed == len(req.tokens):  # the step reached the last known token: sample
                req.output.append(token)
        for req in [r for r in self.running if r.done]:
            self.running.remove(req)
            self.free_blocks += req.blocks
            self.free_slots.append(req.slot)
            req.blocks = []
            self.finished.append(req)
        return batch

    def _call(self, meta: dict[str, torch.Tensor], max_q: int) -> torch.Tensor:
        """The forward on one step's metadata. For torch.compile(dynamic=True) to need one graph,
        the block table's width (fixed: cdiv(max_model_len, page)) is marked static, so it is never
        tied to a batch size that happens to equal it, and steps have at least two requests (sizes
        0 and 1 specialize a graph of their own)."""
        meta = {k: v.to(self.device, non_blocking=True) for k, v in meta.items()}
        torch._dynamo.mark_static(meta["block_table"], 1)
        return self.forward(**meta, max_seqlen_q=bucket_max_seqlen_q(max_q))

    def run(self) -> Stats:
        start = time.perf_counter()
        while self.waiting or self.running:
            self.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.stats.seconds = time.perf_counter() - start
        return self.stats

    # -- CUDA graphs ------------------------------------------------------------------------------

    def capture_graphs(self) -> list[int]:
        """Capture one decode-step graph per batch bucket (:func:`graph_buckets`; largest first,
        sharing one memory pool). The padding-only inputs they are captured with write nothing
        but the scratch block and the scratch conv state. Returns the buckets."""
        buckets = graph_buckets(self.max_num_seqs)
        pool = torch.cuda.graph_pool_handle()
        for bucket in reversed(buckets):
            static = {k: v.to(self.device) for k, v in self.metadata([], padding=[1] * bucket).items()}
            torch._dynamo.mark_static(static["block_table"], 1)
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(2):
                    self.forward(**static, max_seqlen_q=1)
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                logits = self.forward(**static, max_seqlen_q=1)
            self.graphs[bucket] = (graph, static, logits)
        torch.cuda.synchronize(self.device)
        return buckets

    def _replay(self, bucket: int, meta: dict[str, torch.Tensor]) -> torch.Tensor:
        graph, static, logits = self.graphs[bucket]
        for name, value in meta.items():
            static[name].copy_(value, non_blocking=True)
        graph.replay()
        return logits

