#!/usr/bin/env python3
"""Writes the golden files that the CPU backend is checked against (tests/models/golden_test.cc).

For each tiny model (GPT-2, OPT, Llama with grouped-query attention, Llama 3 with scaled RoPE and tied
embeddings, Mistral with a sliding window of half the sequence, Gemma 3 with both of its layer types) this builds the
Hugging Face implementation in float64 with random weights (rounded to float32, which is what the engine computes in),
then records:
  - the logits, the loss and every parameter gradient for one batch (the forward/backward check), and
  - three optimizer steps with torch.optim and clip_grad_norm_ (losses, gradient norms, final weights).
Adam's eps is 1e-6 rather than 1e-8: Adam divides each gradient element by its own magnitude, so with a
tiny eps the float32-versus-float64 rounding of the smallest gradients decides their update's direction and
the comparison would measure conditioning rather than the optimizer's definition.
Weights and gradients are stored under the engine's names and layout (units "embeddings", "block.N",
"final"; fused qkv and gate/up rows; [out, in] weights), so the C++ side needs no knowledge of Hugging Face.

Usage: python3 tests/reference/make_golden.py [output folder, default: this script's folder] [model ...]
(the models named, all of them by default). Needs torch and transformers (CPU is enough; Gemma 3 needs 4.50 or later).
"""
import json, math, os, struct, sys

import torch
import torch.nn.functional as F
import transformers
from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM, MistralConfig, MistralForCausalLM, OPTConfig, OPTForCausalLM)

BATCH, SEQ, STEPS = 2, 16, 3


def tiny_models():
    common = dict(attn_implementation="eager")
    return {
        "gpt2-tiny": (GPT2LMHeadModel, GPT2Config(
            vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=4, activation_function="gelu_new",
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5, bos_token_id=0, eos_token_id=0,
            **common),
            dict(kind="adamw", lr=1e-2, betas=(0.9, 0.95), eps=1e-6, weight_decay=0.1)),
        "opt-tiny": (OPTForCausalLM, OPTConfig(
            vocab_size=256, hidden_size=64, num_hidden_layers=2, ffn_dim=128, num_attention_heads=4,
            max_position_embeddings=64, word_embed_proj_dim=64, do_layer_norm_before=True, dropout=0.0,
            attention_dropout=0.0, activation_dropout=0.0, layerdrop=0.0, enable_bias=True,
            activation_function="relu", pad_token_id=None, **common),
            dict(kind="sgd", lr=0.1, momentum=0.9, weight_decay=0.01)),
        "llama-tiny": (LlamaForCausalLM, LlamaConfig(
            vocab_size=256, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0,
            tie_word_embeddings=False, attention_bias=False, mlp_bias=False, **common),
            dict(kind="adam", lr=1e-2, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.1)),
        "llama3-tiny": (LlamaForCausalLM, LlamaConfig(
            vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=1, max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=True,
            rope_theta=10000.0, rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                              "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
            **common),
            dict(kind="adamw", lr=1e-2, betas=(0.9, 0.95), eps=1e-6, weight_decay=0.1)),
        # The window (8) is half the sequence (16): the later queries attend to a band of keys.
        "mistral-tiny": (MistralForCausalLM, MistralConfig(
            vocab_size=256, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=1000000.0,
            sliding_window=8, tie_word_embeddings=False, attention_dropout=0.0, **common),
            dict(kind="adamw", lr=1e-2, betas=(0.9, 0.95), eps=1e-6, weight_decay=0.1)),
        # Gemma3ForCausalLM with both layer types (pattern 2: sliding, full, sliding, full), a window of 8 over the
        # 16 tokens (the local layers' keys t - 8 < u <= t, as every transformers version's eager mask keeps them),
        # head_dim 32 against a width of 64 over 4 heads, an attention scale of 24^-0.5 (query_pre_attn_scalar, not
        # head_dim), the full layers' rotary scaled linearly, and the embeddings times sqrt(64) = 8 (exact in float32
        # and float64 alike). No pad token: Hugging Face's embedding gives the pad token's row no gradient from the
        # lookup, which the engine does not model (any token trains alike).
        "gemma3-tiny": (Gemma3ForCausalLM, Gemma3TextConfig(
            vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32, max_position_embeddings=64, rms_norm_eps=1e-6,
            hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=24, sliding_window=8,
            sliding_window_pattern=2, rope_theta=1000000.0, rope_local_base_freq=10000.0,
            rope_scaling={"rope_type": "linear", "factor": 2.0}, attention_bias=False, attention_dropout=0.0,
            final_logit_softcapping=None, attn_logit_softcapping=None, tie_word_embeddings=True, pad_token_id=None,
            **common),
            dict(kind="adamw", lr=1e-2, betas=(0.9, 0.95), eps=1e-6, weight_decay=0.1)),
    }


def padded_rows(w, multiple=128):
    rows = (w.shape[0] + multiple - 1) // multiple * multiple
    return torch.cat([w, w.new_zeros(rows - w.shape[0], *w.shape[1:])]) if rows != w.shape[0] else w


def engine_tensors(model, kind, pick):
    """(unit, tensor name, value) in the engine's layout; pick(p) selects the parameter or its gradient."""
    out = []
    if kind == "gpt2":
        t = model.transformer
        out += [("embeddings", "wte", padded_rows(pick(t.wte.weight))), ("embeddings", "wpe", pick(t.wpe.weight))]
        for l, h in enumerate(t.h):
            u = f"block.{l}"
            out += [(u, "ln1.weight", pick(h.ln_1.weight)), (u, "ln1.bias", pick(h.ln_1.bias)),
                    (u, "attn.qkv.weight", pick(h.attn.c_attn.weight).t()), (u, "attn.qkv.bias", pick(h.attn.c_attn.bias)),
                    (u, "attn.proj.weight", pick(h.attn.c_proj.weight).t()), (u, "attn.proj.bias", pick(h.attn.c_proj.bias)),
                    (u, "ln2.weight", pick(h.ln_2.weight)), (u, "ln2.bias", pick(h.ln_2.bias)),
                    (u, "mlp.fc.weight", pick(h.mlp.c_fc.weight).t()), (u, "mlp.fc.bias", pick(h.mlp.c_fc.bias)),
                    (u, "mlp.proj.weight", pick(h.mlp.c_proj.weight).t()), (u, "mlp.proj.bias", pick(h.mlp.c_proj.bias))]
        out += [("final", "ln_f.weight", pick(t.ln_f.weight)), ("final", "ln_f.bias", pick(t.ln_f.bias))]
    elif kind == "opt":
        d = model.model.decoder
        out += [("embeddings", "wte", padded_rows(pick(d.embed_tokens.weight))),
                ("embeddings", "wpe", pick(d.embed_positions.weight))]
        for l, layer in enumerate(d.layers):
            u, a = f"block.{l}", layer.self_attn
            out += [(u, "ln1.weight", pick(layer.self_attn_layer_norm.weight)),
                    (u, "ln1.bias", pick(layer.self_attn_layer_norm.bias)),
                    (u, "attn.qkv.weight", torch.cat([pick(a.q_proj.weight), pick(a.k_proj.weight), pick(a.v_proj.weight)])),
                    (u, "attn.qkv.bias", torch.cat([pick(a.q_proj.bias), pick(a.k_proj.bias), pick(a.v_proj.bias)])),
                    (u, "attn.proj.weight", pick(a.out_proj.weight)), (u, "attn.proj.bias", pick(a.out_proj.bias)),
                    (u, "ln2.weight", pick(layer.final_layer_norm.weight)), (u, "ln2.bias", pick(layer.final_layer_norm.bias)),
                    (u, "mlp.fc.weight", pick(layer.fc1.weight)), (u, "mlp.fc.bias", pick(layer.fc1.bias)),
                    (u, "mlp.proj.weight", pick(layer.fc2.weight)), (u, "mlp.proj.bias", pick(layer.fc2.bias))]
        out += [("final", "ln_f.weight", pick(d.final_layer_norm.weight)), ("final", "ln_f.bias", pick(d.final_layer_norm.bias))]
    else:  # llama, mistral and gemma3_text: the same modules, Gemma 3 adding q/k norms and a norm after each branch
        m, gemma = model.model, kind == "gemma3_text"
        out += [("embeddings", "wte", padded_rows(pick(m.embed_tokens.weight)))]
        for l, layer in enumerate(m.layers):
            u, a, mlp = f"block.{l}", layer.self_attn, layer.mlp
            out += [(u, "ln1.weight", pick(layer.input_layernorm.weight)),
                    (u, "attn.qkv.weight", torch.cat([pick(a.q_proj.weight), pick(a.k_proj.weight), pick(a.v_proj.weight)])),
                    (u, "attn.proj.weight", pick(a.o_proj.weight)),
                    (u, "mlp.fc.weight", torch.cat([pick(mlp.gate_proj.weight), pick(mlp.up_proj.weight)])),
                    (u, "mlp.proj.weight", pick(mlp.down_proj.weight))]
            if gemma:  # Gemma's post_attention_layernorm is the attention branch's post-norm, not the MLP's input norm
                out += [(u, "attn.q_norm.weight", pick(a.q_norm.weight)), (u, "attn.k_norm.weight", pick(a.k_norm.weight)),
                        (u, "attn.post_norm.weight", pick(layer.post_attention_layernorm.weight)),
                        (u, "ln2.weight", pick(layer.pre_feedforward_layernorm.weight)),
                        (u, "mlp.post_norm.weight", pick(layer.post_feedforward_layernorm.weight))]
            else:
                out += [(u, "ln2.weight", pick(layer.post_attention_layernorm.weight))]
        out += [("final", "ln_f.weight", pick(m.norm.weight))]
        if not model.config.tie_word_embeddings:
            out += [("final", "lm_head", padded_rows(pick(model.lm_head.weight)))]
    return out


def randomize(model, generator, kind):
    """Weights away from their neutral initial values (norm gains near 1, non-zero biases), in float32 steps.
    Gemma's norms scale by 1 + w: their weights go near 0, the gains near 1."""
    neutral_gain = 0.0 if kind == "gemma3_text" else 1.0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in name or "ln" in name):
                value = neutral_gain + 0.1 * torch.randn(p.shape, generator=generator, dtype=torch.float64)
            elif p.dim() == 1:
                value = 0.05 * torch.randn(p.shape, generator=generator, dtype=torch.float64)
            else:
                value = 0.1 * torch.randn(p.shape, generator=generator, dtype=torch.float64)
            p.copy_(value.float().double())


def logits_and_loss(model, tokens):
    logits = model(input_ids=tokens[:, :-1]).logits
    return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def make_optimizer(model, spec):
    params = list(model.parameters())
    if spec["kind"] == "adamw":
        return torch.optim.AdamW(params, lr=spec["lr"], betas=spec["betas"], eps=spec["eps"],
                                 weight_decay=spec["weight_decay"], foreach=False)
    if spec["kind"] == "adam":
        return torch.optim.Adam(params, lr=spec["lr"], betas=spec["betas"], eps=spec["eps"],
                                weight_decay=spec["weight_decay"], foreach=False)
    return torch.optim.SGD(params, lr=spec["lr"], momentum=spec["momentum"], weight_decay=spec["weight_decay"],
                           foreach=False)


def write_safetensors(path, tensors, metadata):
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    codes = {torch.float32: "F32", torch.float64: "F64", torch.int32: "I32"}
    for name, t in tensors.items():
        data = t.contiguous().numpy().tobytes()
        header[name] = {"dtype": codes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    os.replace(path + ".tmp", path)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    wanted = set(sys.argv[2:])
    torch.set_grad_enabled(True)
    for index, (name, (cls, config, opt_spec)) in enumerate(tiny_models().items()):
        if wanted and name not in wanted:
            continue
        generator = torch.Generator().manual_seed(1000 + index)
        model = cls(config).double().eval()
        kind = config.model_type
        randomize(model, generator, kind)
        tokens = torch.randint(0, config.vocab_size, (STEPS, BATCH, SEQ + 1), generator=generator)

        tensors = {}
        for unit, tname, value in engine_tensors(model, kind, lambda p: p.detach()):
            tensors[f"params/{unit}/{tname}"] = value.float()
        logits, loss = logits_and_loss(model, tokens[0])
        tensors["logits"] = logits.detach().reshape(-1, config.vocab_size).float()  # [batch x seq, vocab]
        loss.backward()
        for unit, tname, value in engine_tensors(model, kind, lambda p: p.grad):
            tensors[f"grads/{unit}/{tname}"] = value.float()
        model.zero_grad(set_to_none=True)

        # Three optimizer steps with clipping; the bound is half the first norm, so clipping acts at step 1.
        optimizer = make_optimizer(model, opt_spec)
        clip = 0.5 * math.sqrt(sum(float(g.double().pow(2).sum()) for k, g in tensors.items() if k.startswith("grads/")))
        losses, norms = [], []
        for step in range(STEPS):
            optimizer.zero_grad(set_to_none=True)
            _, step_loss = logits_and_loss(model, tokens[step])
            step_loss.backward()
            norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item())
            optimizer.step()
            losses.append(step_loss.item())
        for unit, tname, value in engine_tensors(model, kind, lambda p: p.detach()):
            tensors[f"final/{unit}/{tname}"] = value.clone()
        tensors["tokens"] = tokens.to(torch.int32)
        tensors["losses"] = torch.tensor(losses, dtype=torch.float64)
        tensors["grad_norms"] = torch.tensor(norms, dtype=torch.float64)

        optimizer_meta = dict(opt_spec, betas=list(opt_spec.get("betas", (0.9, 0.999))), grad_clip=clip)
        metadata = {"model": name, "hf_config": config.to_json_string(use_diff=False), "optimizer": json.dumps(optimizer_meta),
                    "batch": str(BATCH), "seq": str(SEQ), "loss": repr(float(loss)),
                    "generator": f"torch {torch.__version__}, transformers {transformers.__version__}"}
        path = os.path.join(out_dir, f"golden_{name.replace('-', '_')}.safetensors")
        write_safetensors(path, tensors, metadata)
        print(f"{name}: loss {float(loss):.6f}, step losses {[round(x, 6) for x in losses]}, "
              f"clip {clip:.4f}, norms {[round(x, 4) for x in norms]} -> {path}")


if __name__ == "__main__":
    main()
