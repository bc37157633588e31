"""PyTorch reference trainer, used as a side-by-side performance anchor.

GPT-2 (learned positions, pre-LN, GELU-tanh, tied embeddings) or Llama (RMSNorm, RoPE, SwiGLU,
grouped-query attention), bf16 autocast, flash SDPA, fused AdamW, optional torch.compile, optional
activation checkpointing of every block (torch.utils.checkpoint, non-reentrant: --checkpoint 1), optional LoRA
adapters as plain modules (--lora-rank R, Llama: the fused q/k/v projection's one A shared by q, k and v and one B of
their joint width, and the output projection, as zerobench's --lora-targets attention; the base model frozen in bf16,
the adapters fp32 under autocast).
Or a model of Hugging Face transformers' own classes (--model mistral-7b or gemma-3-1b: MistralForCausalLM and
Gemma3ForCausalLM built from the published configs with random weights, SDPA attention), trained the same way.
Prints one JSON line: tokens/s (median over timed steps), step ms, peak GiB.
Run with torchrun for DDP / FSDP2 (--mode ddp|fsdp).
"""
import argparse, json, math, os, time
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

class Checkpointed(nn.Module):
    """A block whose activations are recomputed in backward. FSDP2 shards this wrapper, so that its hooks (the
    gather, the cast of the inputs to bf16) run outside the recomputed region, as torchtitan applies them: FSDP2
    skips its input cast during the recompute, so a block sharded inside the checkpoint would recompute from fp32
    inputs what its forward saw in bf16, and torch.utils.checkpoint refuses the mismatch."""
    def __init__(s, block):
        super().__init__()
        s.block = block
    def forward(s, *args):
        return checkpoint(s.block, *args, use_reentrant=False)

CONFIGS = {  # layers, heads, width
    "gpt2": (12, 12, 768), "gpt2-medium": (24, 16, 1024),
    "gpt2-large": (36, 20, 1280), "gpt2-xl": (48, 25, 1600),
}
LLAMAS = {  # layers, heads, kv heads, width, ffn width, vocab, tied embeddings, rope theta
    "llama-3.2-1b": (16, 32, 8, 2048, 8192, 128256, True, 500000.0),
    "llama-2-7b": (32, 32, 32, 4096, 11008, 32000, False, 10000.0),
    "llama-2-13b": (40, 40, 40, 5120, 13824, 32000, False, 10000.0),
}

# Hugging Face models, from the published config.json of mistralai/Mistral-7B-v0.3 and google/gemma-3-1b-pt.
HF_MODELS = {
    "mistral-7b": ("MistralConfig", "MistralForCausalLM", dict(
        vocab_size=32768, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-5, sliding_window=None,
        tie_word_embeddings=False)),
    "gemma-3-1b": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        vocab_size=262144, hidden_size=1152, intermediate_size=6912, num_hidden_layers=26, num_attention_heads=4,
        num_key_value_heads=1, head_dim=256, max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1e6,
        rope_local_base_freq=10000.0, sliding_window=512, query_pre_attn_scalar=256,
        hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
        layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(26)])),
}

class HuggingFace(nn.Module):
    """A transformers causal LM whose loss is taken as the other models take it (the logits in fp32)."""
    def __init__(s, name):
        super().__init__()
        import transformers
        config_class, model_class, fields = HF_MODELS[name]
        config = getattr(transformers, config_class)(**fields, attn_implementation="sdpa")
        s.model = getattr(transformers, model_class)(config)
        s.config = config
        object.__setattr__(s, "blocks", s.model.model.layers)  # (not registered twice; FSDP2 shards each)
    def forward(s, idx, tgt):
        logits = s.model(input_ids=idx, use_cache=False).logits
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), tgt.reshape(-1))
    def attention_flops_per_token(s, T):
        """12 x the attention width x the keys each layer's query spans (its sliding window, where narrower)."""
        c = s.config
        width = c.num_attention_heads * getattr(c, "head_dim", c.hidden_size // c.num_attention_heads)
        kinds = getattr(c, "layer_types", None) or ["full_attention"] * c.num_hidden_layers
        spans = [min(T, c.sliding_window) if k == "sliding_attention" and c.sliding_window else T for k in kinds]
        return 12 * width * sum(spans)

def rope(x, cos, sin):  # x: B, H, T, hd (rotate-half convention)
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-b, a), dim=-1) * sin

class LlamaBlock(nn.Module):
    def __init__(s, d, h, kv, ff):
        super().__init__()
        s.h, s.kv, s.hd = h, kv, d // h
        s.n1, s.n2 = nn.RMSNorm(d, eps=1e-5), nn.RMSNorm(d, eps=1e-5)
        s.wq, s.wk, s.wv = nn.Linear(d, d, bias=False), nn.Linear(d, kv * s.hd, bias=False), nn.Linear(d, kv * s.hd, bias=False)
        s.wo = nn.Linear(d, d, bias=False)
        s.w1, s.w3, s.w2 = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False), nn.Linear(ff, d, bias=False)
        s.lora_scale = 0.0
    def add_lora(s, rank, alpha):  # A random (PEFT's Kaiming-uniform), B zero
        d, widths = s.wq.in_features, (s.wq.out_features, s.wk.out_features, s.wv.out_features)
        s.lora_scale, s.widths = alpha / rank, widths
        s.qkv_a, s.qkv_b = nn.Linear(d, rank, bias=False), nn.Linear(rank, sum(widths), bias=False)
        s.o_a, s.o_b = nn.Linear(d, rank, bias=False), nn.Linear(rank, d, bias=False)
        for b in (s.qkv_b, s.o_b):
            nn.init.zeros_(b.weight)
    def forward(s, x, cos, sin):
        B, T, C = x.shape
        h = s.n1(x)
        q, k, v = s.wq(h), s.wk(h), s.wv(h)
        if s.lora_scale:
            dq, dk, dv = s.qkv_b(s.qkv_a(h) * s.lora_scale).split(s.widths, dim=-1)
            q, k, v = q + dq, k + dk, v + dv
        q = q.view(B, T, s.h, s.hd).transpose(1, 2)
        k = k.view(B, T, s.kv, s.hd).transpose(1, 2)
        v = v.view(B, T, s.kv, s.hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=s.kv != s.h)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        o = s.wo(y)
        if s.lora_scale:
            o = o + s.o_b(s.o_a(y) * s.lora_scale)
        x = x + o
        h = s.n2(x)
        return x + s.w2(F.silu(s.w1(h)) * s.w3(h))

class Llama(nn.Module):
    def __init__(s, L, H, KV, D, FF, V, tied, theta, T):
        super().__init__()
        s.emb = nn.Embedding(V, D)
        s.blocks = nn.ModuleList(LlamaBlock(D, H, KV, FF) for _ in range(L))
        s.norm = nn.RMSNorm(D, eps=1e-5)
        s.head = nn.Linear(D, V, bias=False)
        if tied:
            s.head.weight = s.emb.weight
        hd = D // H
        inv = 1.0 / theta ** (torch.arange(0, hd, 2).float() / hd)
        f = torch.outer(torch.arange(T).float(), inv)
        s.register_buffer("cos", torch.cat((f, f), -1).cos(), persistent=False)
        s.register_buffer("sin", torch.cat((f, f), -1).sin(), persistent=False)
        for m in s.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
    def forward(s, idx, tgt):
        x = s.emb(idx)
        T = idx.shape[1]
        for b in s.blocks:
            x = b(x, s.cos[:T], s.sin[:T])
        logits = s.head(s.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), tgt.reshape(-1))

class Block(nn.Module):
    def __init__(s, d, h):
        super().__init__()
        s.h = h
        s.ln1, s.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        s.qkv, s.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        s.fc, s.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, s.h, C // s.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + s.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + s.fc2(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))

class GPT(nn.Module):
    def __init__(s, L, H, D, V=50304, T=1024):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        s.blocks = nn.ModuleList(Block(D, H) for _ in range(L))
        s.lnf = nn.LayerNorm(D)
        s.head = nn.Linear(D, V, bias=False)
        s.head.weight = s.wte.weight
        for m in s.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
    def forward(s, idx, tgt):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in s.blocks:
            x = b(x)
        logits = s.head(s.lnf(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), tgt.reshape(-1))

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="gpt2", choices=sorted(CONFIGS) + sorted(LLAMAS) + sorted(HF_MODELS))
    p.add_argument("-B", type=int, default=16)
    p.add_argument("-T", type=int, default=1024); p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=10); p.add_argument("--compile", type=int, default=1)
    p.add_argument("--mode", default="single", choices=["single", "ddp", "fsdp"])
    p.add_argument("--offload", type=int, default=0, help="FSDP2 CPUOffloadPolicy (params, grads, optimizer on CPU)")
    p.add_argument("--checkpoint", type=int, default=0, help="recompute every block's activations in backward")
    p.add_argument("--lora-rank", type=int, default=0, help="Llama: train LoRA adapters of this rank, the rest frozen")
    p.add_argument("--lora-alpha", type=float, default=0, help="the adapters' scale is alpha / rank (default 2 x rank)")
    a = p.parse_args()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    if a.mode != "single":
        torch.distributed.init_process_group("nccl")
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    if a.model in HF_MODELS:
        model = HuggingFace(a.model).cuda()
        V = model.config.vocab_size
    elif a.model in LLAMAS:
        L, H, KV, D, FF, V, tied, theta = LLAMAS[a.model]
        model = Llama(L, H, KV, D, FF, V, tied, theta, a.T).cuda()
    else:
        (L, H, D), V = CONFIGS[a.model], 50257
        model = GPT(L, H, D).cuda()
    nparams = sum(p.numel() for p in model.parameters())
    trainable = nparams
    if a.lora_rank:
        assert a.model in LLAMAS, "LoRA is built into the Llama blocks here"
        model.requires_grad_(False)
        for p in model.parameters():  # the frozen base in bf16, as a LoRA run loads it (the RoPE tables stay fp32)
            p.data = p.data.to(torch.bfloat16)
        for b in model.blocks:
            b.add_lora(a.lora_rank, a.lora_alpha or 2.0 * a.lora_rank)
        model.blocks.cuda()
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if a.checkpoint:  # (after the adapters, which the wrapped blocks would hide)
        assert a.model not in HF_MODELS, "checkpointing wraps this script's own blocks"
        model.blocks = nn.ModuleList(Checkpointed(b) for b in model.blocks)
    if a.mode == "ddp":
        model = nn.parallel.DistributedDataParallel(model)
    elif a.mode == "fsdp":
        from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy
        kw = {"mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)}
        if a.offload:
            kw["offload_policy"] = CPUOffloadPolicy(pin_memory=True)
        for b in model.blocks:
            fully_shard(b, **kw)
        fully_shard(model, **kw)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-4, fused=not a.offload,
                            foreach=bool(a.offload))
    step_fn = torch.compile(model) if a.compile else model
    times = []
    for i in range(a.warmup + a.steps):
        idx = torch.randint(0, V, (a.B, a.T + 1), device="cuda")
        torch.cuda.synchronize(); t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(idx[:, :-1], idx[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        opt.step(); opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    times.sort(); ms = times[len(times) // 2] * 1e3
    tok = a.B * a.T * world / (ms / 1e3)
    # Frozen weights count 4 FLOPs a token (forward and the input's gradient), trained ones 6, as zerobench counts.
    weights = 4 * nparams + 6 * trainable if a.lora_rank else 6 * nparams
    attention = model.attention_flops_per_token(a.T) if a.model in HF_MODELS else 12 * L * D * a.T
    flops = weights * a.B * a.T * world + attention * a.B * a.T * world
    if rank == 0:
        print(json.dumps({"anchor": "pytorch", "mode": a.mode, "model": a.model, "params": nparams,
              "B": a.B, "T": a.T, "world": world, "compile": a.compile, "offload": a.offload,
              "checkpoint": a.checkpoint, "lora_rank": a.lora_rank, "trainable": trainable, "step_ms": round(ms, 2),
              "tok_s": round(tok), "tflops_per_gpu": round(flops / (ms / 1e3) / world / 1e12, 1),
              "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2), "loss": round(loss.item(), 3)}))
    if a.mode != "single":
        torch.distributed.destroy_process_group()

if __name__ == "__main__":
    main()
