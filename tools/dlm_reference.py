#!/usr/bin/env python3
"""PyTorch reference forwards of the two checkpoint families the engine runs, written from their
published architectures, and the tool that writes random-weight checkpoints in their exact
Hugging Face layouts with goldens for the C++ parity test (tests/gpu/test_parity.cpp).

LLaDA (ML-GSAI/LLaDA modeling_llada.py): pre-RMSNorm blocks, bidirectional attention, RoPE with
the half split, SwiGLU (ff_out(silu(ff_proj(x)) * up_proj(x))), untied head ff_out.
Dream (Dream-org/Dream-v0 modeling_dream.py, Qwen2's layer): the same block with grouped-query
attention (num_key_value_heads), a bias on q_proj/k_proj/v_proj only, RMSNorm eps and RoPE theta
from config.json, an optionally tied head, and the autoregressive shift: the logits of row p - 1
propose token p.

  tools/dlm_reference.py --out tests/golden/parity

writes, for each of llada, dream and dream-tied: DIR/<name>/config.json, the bf16 shards
model-0000k-of-0000n.safetensors and model.safetensors.index.json, as transformers'
save_pretrained lays them out, and DIR/<name>/goldens.json (logits of a refresh and of a dual-cache
reuse step, and temperature-0 decodes for every commit rule, with and without Dream's top_p / top_k
truncation, and cache mode with their step counts; "schedule_decodes" under Dream's linear schedule),
and DIR/dream_schedule.json (Dream's per-step commit counts and p_transfer for up to 14 steps).
CI never runs it; the files it wrote are committed.
"""
import argparse
import json
import math
import os
import struct

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------- shapes and configs

SHAPES = {
    # Small widths, real structure: LLaDA without GQA or bias, Dream with 2 KV heads for 4 query
    # heads, QKV bias and the shift; one Dream copy with a tied head.
    "llada": dict(arch="llada", d=64, layers=2, heads=4, kv_heads=4, ff=176, vocab=256, mask=250, eos=251,
                  theta=500000.0, eps=1e-5, tied=False, seed=11),
    "dream": dict(arch="dream", d=64, layers=2, heads=4, kv_heads=2, ff=176, vocab=256, mask=252, eos=248,
                  theta=1000000.0, eps=1e-6, tied=False, seed=12),
    "dream-tied": dict(arch="dream", d=64, layers=2, heads=4, kv_heads=2, ff=176, vocab=256, mask=252, eos=248,
                       theta=1000000.0, eps=1e-6, tied=True, seed=13),
}


def llada_config(s):
    """LLaDA-8B-Instruct's config.json field names and fixed values, at the given widths."""
    return {
        "activation_type": "silu", "alibi": False, "alibi_bias_max": 8.0, "architectures": ["LLaDAModelLM"],
        "attention_dropout": 0.0, "attention_layer_norm": False, "attention_layer_norm_with_affine": True,
        "auto_map": {"AutoConfig": "configuration_llada.LLaDAConfig", "AutoModel": "modeling_llada.LLaDAModelLM",
                     "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM"},
        "bias_for_layer_norm": False, "block_group_size": 1, "block_type": "llama", "d_model": s["d"],
        "embedding_dropout": 0.0, "embedding_size": s["vocab"], "eos_token_id": s["eos"], "flash_attention": False,
        "include_bias": False, "include_qkv_bias": False, "init_cutoff_factor": None, "init_device": "meta",
        "init_fn": "mitchell", "init_std": 0.02, "input_emb_norm": False, "layer_norm_type": "rms",
        "layer_norm_with_affine": True, "mask_token_id": s["mask"], "max_sequence_length": 4096,
        "mlp_hidden_size": s["ff"], "mlp_ratio": 4, "model_type": "llada", "multi_query_attention": None,
        "n_heads": s["heads"], "n_kv_heads": s["kv_heads"], "n_layers": s["layers"], "pad_token_id": s["eos"],
        "precision": "amp_bf16", "residual_dropout": 0.0, "rms_norm_eps": s["eps"], "rope": True,
        "rope_full_precision": True, "rope_theta": s["theta"], "scale_logits": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.46.3", "use_cache": False, "vocab_size": s["vocab"], "weight_tying": False,
    }


def dream_config(s):
    """Dream-v0-Instruct-7B's config.json field names (Qwen2's) and fixed values, at the given widths."""
    return {
        "architectures": ["DreamModel"], "attention_dropout": 0.0,
        "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
        "bos_token_id": s["eos"], "eos_token_id": s["eos"], "hidden_act": "silu", "hidden_size": s["d"],
        "initializer_range": 0.02, "intermediate_size": s["ff"], "mask_token_id": s["mask"],
        "max_position_embeddings": 131072, "max_window_layers": s["layers"], "model_type": "Dream",
        "num_attention_heads": s["heads"], "num_hidden_layers": s["layers"], "num_key_value_heads": s["kv_heads"],
        "pad_token_id": s["eos"], "rms_norm_eps": s["eps"], "rope_scaling": None, "rope_theta": s["theta"],
        "sliding_window": None, "tie_word_embeddings": s["tied"], "torch_dtype": "bfloat16",
        "transformers_version": "4.46.2", "use_cache": False, "use_sliding_window": False,
        "vocab_size": s["vocab"],
    }


def tensor_names(s):
    """(name, shape) in the order the checkpoint is written, with each role's key."""
    d, ff, V, hd = s["d"], s["ff"], s["vocab"], s["d"] // s["heads"]
    kv = s["kv_heads"] * hd
    out = []
    if s["arch"] == "llada":
        p = "model.transformer."
        out.append(("wte", p + "wte.weight", (V, d)))
        for i in range(s["layers"]):
            b = f"{p}blocks.{i}."
            out += [(f"{i}.attn_norm", b + "attn_norm.weight", (d,)), (f"{i}.q", b + "q_proj.weight", (d, d)),
                    (f"{i}.k", b + "k_proj.weight", (kv, d)), (f"{i}.v", b + "v_proj.weight", (kv, d)),
                    (f"{i}.o", b + "attn_out.weight", (d, d)), (f"{i}.ff_norm", b + "ff_norm.weight", (d,)),
                    (f"{i}.gate", b + "ff_proj.weight", (ff, d)), (f"{i}.up", b + "up_proj.weight", (ff, d)),
                    (f"{i}.down", b + "ff_out.weight", (d, ff))]
        out += [("norm", p + "ln_f.weight", (d,)), ("head", p + "ff_out.weight", (V, d))]
        return out
    out.append(("wte", "model.embed_tokens.weight", (V, d)))
    for i in range(s["layers"]):
        b = f"model.layers.{i}."
        out += [(f"{i}.attn_norm", b + "input_layernorm.weight", (d,)),
                (f"{i}.q", b + "self_attn.q_proj.weight", (d, d)), (f"{i}.q_bias", b + "self_attn.q_proj.bias", (d,)),
                (f"{i}.k", b + "self_attn.k_proj.weight", (kv, d)), (f"{i}.k_bias", b + "self_attn.k_proj.bias", (kv,)),
                (f"{i}.v", b + "self_attn.v_proj.weight", (kv, d)), (f"{i}.v_bias", b + "self_attn.v_proj.bias", (kv,)),
                (f"{i}.o", b + "self_attn.o_proj.weight", (d, d)),
                (f"{i}.ff_norm", b + "post_attention_layernorm.weight", (d,)),
                (f"{i}.gate", b + "mlp.gate_proj.weight", (ff, d)), (f"{i}.up", b + "mlp.up_proj.weight", (ff, d)),
                (f"{i}.down", b + "mlp.down_proj.weight", (d, ff))]
    out.append(("norm", "model.norm.weight", (d,)))
    if not s["tied"]:
        out.append(("head", "lm_head.weight", (V, d)))
    return out


def random_weights(s):
    """Random weights, rounded to bf16 (what the checkpoint stores), by role key."""
    g = torch.Generator().manual_seed(s["seed"])
    w = {}
    for key, _, shape in tensor_names(s):
        role = key.split(".")[-1]
        if role in ("attn_norm", "ff_norm", "norm"):
            t = 1.0 + 0.1 * torch.randn(shape, generator=g)
        elif role.endswith("bias"):
            t = 0.2 * torch.randn(shape, generator=g)
        elif role == "wte":
            t = torch.randn(shape, generator=g)
        elif role == "head":
            # Scaled up so that many confidences clear 0.9, as a trained model's do.
            t = 4.0 * torch.randn(shape, generator=g) / math.sqrt(shape[1])
        else:
            t = torch.randn(shape, generator=g) / math.sqrt(shape[1])
        w[key] = t.to(torch.bfloat16).float()
    if s["tied"]:
        w["head"] = w["wte"]
    return w

# ---------------------------------------------------------------- the forward


class Reference:
    def __init__(self, s, w):
        self.s, self.w = s, w
        self.shift = 1 if s["arch"] == "dream" else 0

    def rms(self, x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.s["eps"]) * g

    def rope(self, x, pos):
        hd = x.shape[-1]
        inv = (1.0 / (self.s["theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))).float()
        f = pos.float()[:, None] * inv[None, :]
        emb = torch.cat([f, f], dim=-1)
        cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    def forward_rows(self, ids, q0, q1, kv):
        """Queries are rows [q0, q1) of the canvas `ids`; keys are every row, from `kv` (per layer
        post-RoPE K, V of shape (L, kv_heads, hd)) with rows [q0, q1) replaced by fresh values;
        kv=None is a refresh (q0 = 0, q1 = L). Returns (logits of rows [q0, q1), new kv)."""
        s, w = self.s, self.w
        L, H, KH = ids.shape[0], s["heads"], s["kv_heads"]
        hd = s["d"] // H
        T = q1 - q0
        pos = torch.arange(q0, q1)
        x = w["wte"][ids[q0:q1]]
        new_kv = []
        for i in range(s["layers"]):
            h = self.rms(x, w[f"{i}.attn_norm"])
            q, k, v = h @ w[f"{i}.q"].T, h @ w[f"{i}.k"].T, h @ w[f"{i}.v"].T
            if s["arch"] == "dream":
                q, k, v = q + w[f"{i}.q_bias"], k + w[f"{i}.k_bias"], v + w[f"{i}.v_bias"]
            q = self.rope(q.view(T, H, hd), pos)
            k = self.rope(k.view(T, KH, hd), pos)
            v = v.view(T, KH, hd)
            if kv is None:
                assert q0 == 0 and q1 == L
                K, V = k, v
            else:
                K, V = kv[i][0].clone(), kv[i][1].clone()
                K[q0:q1], V[q0:q1] = k, v
            new_kv.append((K, V))
            rep = H // KH  # query head h reads KV head h // rep (repeat_kv)
            Kr, Vr = K.repeat_interleave(rep, dim=1), V.repeat_interleave(rep, dim=1)
            att = torch.einsum("qhd,khd->hqk", q, Kr) / math.sqrt(hd)
            o = torch.einsum("hqk,khd->qhd", att.softmax(-1), Vr).reshape(T, s["d"])
            x = x + o @ w[f"{i}.o"].T
            m = self.rms(x, w[f"{i}.ff_norm"])
            x = x + (F.silu(m @ w[f"{i}.gate"].T) * (m @ w[f"{i}.up"].T)) @ w[f"{i}.down"].T
        return self.rms(x, w["norm"]) @ w["head"].T, new_kv

# ---------------------------------------------------------------- the decoder


def select_commits(conf, rule, tau, quota, factor):
    """conf: (score, position) of the block's masked positions; ties toward the lower position.
    margin and entropy (Dream's topk_margin and entropy algorithms) commit a quota per step like
    quota, ranked by their own score."""
    order = sorted(conf, key=lambda cp: (-cp[0], cp[1]))
    if rule in ("quota", "margin", "entropy"):
        n = max(1, min(quota, len(order)))
    elif rule == "threshold":
        n = max(1, sum(1 for c, _ in order if c >= tau))
    elif rule == "factor":
        n = 1
        for i in range(2, len(order) + 1):
            if order[i - 1][0] >= 1.0 - factor / (i + 1):
                n = i
            else:
                break
    else:
        raise ValueError(rule)
    return [p for _, p in order[:n]]


def score(p, tok, rule, eps):
    """What a rule ranks positions by: the top-1 probability; p1 - p2 (margin); sum p log(p + eps)
    (entropy; eps is Dream's 1e-10 from sample_tokens, 0 for LLaDA)."""
    if rule == "margin":
        top = torch.topk(p, 2).values
        return float(top[0] - top[1])
    if rule == "entropy":
        return float(torch.where(p > 0, p * torch.log(p + eps), torch.zeros_like(p)).sum())
    return float(p[tok])


def truncate(rows, top_p, top_k):
    """Dream's top_p_logits then top_k_logits (its generation_utils.py, temperature 0): outside
    the nucleus, and below the k-th largest logit, a logit becomes -inf."""
    if top_p < 1.0:
        sorted_logits, sorted_idx = torch.sort(rows, descending=True)
        cum = torch.cumsum(torch.softmax(sorted_logits, dim=-1), dim=-1)
        remove = cum > top_p
        remove[..., 1:] = remove[..., :-1].clone()
        remove[..., 0] = False
        rows = rows.masked_fill(torch.zeros_like(remove).scatter(-1, sorted_idx, remove), -float("inf"))
    if top_k > 0:
        kth = torch.topk(rows, min(top_k, rows.shape[-1])).values[..., -1, None]
        rows = rows.masked_fill(rows < kth, -float("inf"))
    return rows


def dream_transfer_count(mask_index, steps, i, eps=1e-3):
    """How many positions step i of `steps` commits under Dream's maskgit_plus, topk_margin and
    entropy, as its diffusion_generate (generation_utils.py) computes it: mask_index is the
    (batch, length) mask of the still-masked positions, timesteps float32."""
    timesteps = torch.linspace(1, eps, steps + 1)
    t, s = timesteps[i], timesteps[i + 1]
    num_mask_token = mask_index.sum() / mask_index.shape[0]
    return int(num_mask_token * (1 - s / t)) if i < steps - 1 else int(num_mask_token)


@torch.no_grad()
def decode(ref, prompt, gen, block, rule, tau=0.9, steps_per_block=0, factor=1.0, cache="none", top_p=1.0, top_k=0,
           schedule="even"):
    """Temperature-0 semi-autoregressive decode. A reuse step's queries start `shift` rows before the
    block (Dream: row p - 1 proposes token p), in both cache modes; the prefix cache keeps the
    refresh's keys, the dual cache also stores the rows it recomputes. schedule "even" spreads a
    block's masks over its steps (LLaDA's get_num_transfer_tokens); "dream_linear" counts each
    step as Dream does over the block's still-masked positions (one block: Dream's whole answer),
    and a step may commit none."""
    MASK, EOS, sh = ref.s["mask"], ref.s["eos"], ref.shift
    P, L = len(prompt), len(prompt) + gen
    x = torch.tensor(prompt + [MASK] * gen, dtype=torch.long)
    steps = refresh = reuse = 0
    for b in range((gen + block - 1) // block):
        s, e = P + b * block, min(P + (b + 1) * block, L)
        m0 = int((x[s:e] == MASK).sum())
        spb = steps_per_block or (e - s)
        k_in = 0
        kv = None
        while bool((x[s:e] == MASK).any()):
            if cache == "none" or k_in == 0:
                logits, kv_new = ref.forward_rows(x, 0, L, None)
                kv = kv_new if cache != "none" else None
                rows = logits[s - sh:e - sh]
                refresh += 1
            else:
                q0, q1 = s - sh, (e if cache == "dual" else L)
                logits, kv_new = ref.forward_rows(x, q0, q1, kv)
                if cache == "dual":
                    kv = kv_new
                rows = logits[:e - s]
                reuse += 1
            rows = rows.clone()
            rows[:, MASK] = -float("inf")
            rows = truncate(rows.double(), top_p, top_k)
            probs = torch.softmax(rows, dim=-1)
            conf, prop = [], {}
            for j in range(e - s):
                if int(x[s + j]) == MASK:
                    tok = int(torch.argmax(rows[j]))
                    prop[s + j] = tok
                    conf.append((score(probs[j], tok, rule, 1e-10 if sh else 0.0), s + j))
            if schedule == "dream_linear":
                quota = dream_transfer_count((x[s:e] == MASK).unsqueeze(0), spb, k_in)
                chosen = select_commits(conf, rule, tau, quota, factor) if quota > 0 else []
            else:
                quota = m0 // spb + (1 if k_in < m0 % spb else 0)
                chosen = select_commits(conf, rule, tau, quota, factor)
            for p in chosen:
                x[p] = prop[p]
            steps += 1
            k_in += 1
        if bool((x[P:e] == EOS).any()):
            break
    ans = []
    for t in x[P:].tolist():
        if t in (EOS, MASK):
            break
        ans.append(t)
    return ans, steps, refresh, reuse

# ---------------------------------------------------------------- the checkpoint writer


def bf16_bytes(t):
    """Little-endian bf16 bytes of a tensor whose values are already bf16-representable."""
    return t.to(torch.bfloat16).contiguous().view(torch.int16).numpy().astype("<i2").tobytes()


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors:
        data = bf16_bytes(t)
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    return off


def write_checkpoint(out, s, w, shards):
    """config.json, `shards` bf16 shards in order and the index, named as save_pretrained names them."""
    os.makedirs(out, exist_ok=True)
    cfg = llada_config(s) if s["arch"] == "llada" else dream_config(s)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    names = tensor_names(s)
    per = (len(names) + shards - 1) // shards
    weight_map, total = {}, 0
    for k in range(shards):
        part = names[k * per:(k + 1) * per]
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        total += write_safetensors(os.path.join(out, fname), [(n, w[key]) for key, n, _ in part])
        for _, n, _ in part:
            weight_map[n] = fname
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
        f.write("\n")

# ---------------------------------------------------------------- goldens


def goldens(s, ref):
    g = torch.Generator().manual_seed(s["seed"] + 1000)
    specials = {s["mask"], s["eos"]}

    def prompt(n):
        out = []
        while len(out) < n:
            t = int(torch.randint(0, s["vocab"], (1,), generator=g))
            if t not in specials:
                out.append(t)
        return out

    prompts = [prompt(n) for n in (5, 8, 11)]
    gen, block = 16, 8
    # Logits: a refresh of a canvas with a half-decoded first block, then a dual reuse step of the
    # same block (shifted rows) against that refresh's cache after two more tokens changed.
    P = len(prompts[1])
    ids = prompts[1] + [s["mask"]] * gen
    for j in (0, 2, 3):
        ids[P + j] = prompt(1)[0]
    x = torch.tensor(ids)
    full, kv = ref.forward_rows(x, 0, len(ids), None)
    y = x.clone()
    y[P + 1], y[P + 5] = prompt(1)[0], prompt(1)[0]
    q0, q1 = P - ref.shift, P + block
    part, _ = ref.forward_rows(y, q0, q1, kv)
    forward = {"ids": ids, "logits": [round(float(v), 6) for v in full.flatten()],
               "reuse": {"ids": y.tolist(), "q0": q0, "q1": q1, "logits": [round(float(v), 6) for v in part.flatten()]}}
    decodes = []
    rules = [("quota", dict(rule="quota", steps_per_block=4)), ("one/step", dict(rule="quota")),
             ("tau0.9", dict(rule="threshold", tau=0.9)), ("tau0.5", dict(rule="threshold", tau=0.5)),
             ("factor1", dict(rule="factor", factor=1.0)), ("margin", dict(rule="margin", steps_per_block=4)),
             ("entropy", dict(rule="entropy", steps_per_block=4)),
             ("top_p0.5", dict(rule="quota", steps_per_block=4, top_p=0.5)),
             ("tau0.9 top_p0.8", dict(rule="threshold", tau=0.9, top_p=0.8)),
             ("entropy top_k3", dict(rule="entropy", steps_per_block=4, top_k=3)),
             ("margin top_p0.9 top_k2", dict(rule="margin", steps_per_block=4, top_p=0.9, top_k=2))]
    for p in prompts:
        for label, kw in rules:
            for cache in ("none", "prefix", "dual"):
                ans, steps, rf, ru = decode(ref, p, gen, block, cache=cache, **kw)
                decodes.append({"prompt_ids": p, "label": label, "gen_length": gen, "block_length": block,
                                "rule": kw["rule"], "threshold": kw.get("tau", 0.9),
                                "steps_per_block": kw.get("steps_per_block", 0), "factor": kw.get("factor", 1.0),
                                "top_p": kw.get("top_p", 1.0), "top_k": kw.get("top_k", 0),
                                "cache": cache, "answer_ids": ans, "steps": steps, "refresh_steps": rf,
                                "reuse_steps": ru})
    # Dream's schedule: maskgit_plus (the quota rule), topk_margin and entropy. 12 steps over a block
    # of 8 commit nothing on some steps; block 16 is the whole answer, Dream's own decode.
    schedule_rules = [("maskgit_plus 4", dict(rule="quota", steps_per_block=4)),
                      ("maskgit_plus 12", dict(rule="quota", steps_per_block=12)),
                      ("topk_margin 5", dict(rule="margin", steps_per_block=5)),
                      ("entropy 3", dict(rule="entropy", steps_per_block=3)),
                      ("maskgit_plus 6 whole answer", dict(rule="quota", steps_per_block=6, block=16)),
                      ("entropy 10 whole answer top_p0.9", dict(rule="entropy", steps_per_block=10, block=16,
                                                                top_p=0.9))]
    schedule_decodes = []
    for p in prompts:
        for label, kw in schedule_rules:
            kw = dict(kw)
            blk = kw.pop("block", block)
            for cache in ("none", "prefix", "dual"):
                ans, steps, rf, ru = decode(ref, p, gen, blk, cache=cache, schedule="dream_linear", **kw)
                schedule_decodes.append({"prompt_ids": p, "label": label, "gen_length": gen, "block_length": blk,
                                         "rule": kw["rule"], "threshold": 0.9, "schedule": "dream_linear",
                                         "steps_per_block": kw["steps_per_block"], "factor": 1.0,
                                         "top_p": kw.get("top_p", 1.0), "top_k": 0, "cache": cache,
                                         "answer_ids": ans, "steps": steps, "refresh_steps": rf, "reuse_steps": ru})
    return {"producer": "tools/dlm_reference.py", "arch": s["arch"], "forward": forward, "decodes": decodes,
            "schedule_decodes": schedule_decodes}


def fused_linspace(steps, eps=1e-3):
    """linspace(1, eps, steps + 1) point by point as torch's CUDA kernel computes it: start + step * i
    below the halfway point, end - step * (n - 1 - i) from it, each a float32 fused multiply-add.
    Emulated in float64, where the product of two float32 values is exact; the float64 sum may
    round before the float32 rounding, which the comparison with torch would show."""
    import numpy as np
    f = np.float32
    n = steps + 1
    step = (f(eps) - f(1.0)) / f(steps)
    out = []
    for i in range(n):
        if i < n // 2:
            v = np.float64(1.0) + np.float64(step) * i
        else:
            v = np.float64(f(eps)) - np.float64(step) * (n - 1 - i)
        out.append(float(f(v)))
    return out


def schedule_table(max_steps=14, max_masks=40):
    """Dream's commit counts step by step for every (steps, masks) pair: torch's own float32
    arithmetic, which the engine's must equal. Up to 14 steps (15 points) torch's CPU linspace
    computes each point alone, as its CUDA kernel does; longer schedules go through vector lanes
    on the CPU that round some points differently, so they are not torch-on-CPU goldens."""
    rows = []
    for steps in range(1, max_steps + 1):
        ts = torch.linspace(1, 1e-3, steps + 1)
        assert ts.tolist() == fused_linspace(steps), f"torch's CPU linspace is not the per-point formula at {steps}"
        for masks in range(0, max_masks + 1):
            left, counts = masks, []
            for i in range(steps):
                n = dream_transfer_count(torch.ones(1, left, dtype=torch.bool), steps, i)
                counts.append(n)
                left -= n
            p = [float(1 - ts[i + 1] / ts[i]) if i < steps - 1 else 1.0 for i in range(steps)]
            rows.append({"steps": steps, "masks": masks, "counts": counts, "p_transfer": p})
    return {"producer": "tools/dlm_reference.py", "eps": 1e-3,
            "timesteps": {str(n): [float(v) for v in torch.linspace(1, 1e-3, n + 1)] for n in range(1, max_steps + 1)},
            "table": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--shards", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    for name, s in SHAPES.items():
        w = random_weights(s)
        d = os.path.join(a.out, name)
        write_checkpoint(d, s, w, a.shards)
        gold = goldens(s, Reference(s, w))
        with open(os.path.join(d, "goldens.json"), "w") as f:
            json.dump(gold, f, separators=(",", ":"))
            f.write("\n")
        n_answers = sum(len(x["answer_ids"]) for x in gold["decodes"])
        print(f"{name}: {len(gold['decodes'])} + {len(gold['schedule_decodes'])} decodes, {n_answers} answer tokens"
              f" -> {d}")
    with open(os.path.join(a.out, "dream_schedule.json"), "w") as f:
        json.dump(schedule_table(), f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
