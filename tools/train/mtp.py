"""Trains a next-token-prediction (MTP) layer for the frozen default model (a qwen3moe GGUF), by distillation.

The layer at position p takes the token at p and the trunk's hidden state after the output norm at p - 1 (zeros at
0), as llama.cpp's glm4moe next-n block does (src/models/glm4-moe.cpp), and learns the trunk's own distribution at
p: what a draft must match to be kept. The trunk runs from the file's own Q8_0 weights, so the layer learns the model
that ships. The layer starts from the trunk's last layer (attention, router, experts), with eh_proj passing the
trunk's state through, and adds a shared expert of its own (glm4moe runs one). It writes the layer's tensors under
llama.cpp's names in blk.<layers>. to a safetensors file (F32), with the held-out agreement in its metadata, for
nextn-export-cli.ts. Runs on the CPU (Debian's python3-torch; tools/train/README.md)."""
import argparse
import json
import math
import struct
import time

import numpy as np
import torch
import torch.nn.functional as F

GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf(path):
    data = memoryview(open(path, "rb").read())
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("<Q")
        s = bytes(data[pos : pos + n]).decode("utf-8", "replace")
        pos += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<I"), take("<Q")
            return [value(et) for _ in range(n)]
        return take(GGUF_SCALARS[t])

    assert bytes(data[:4]) == b"GGUF"
    pos = 4
    take("<I")
    n_tensors, n_kv = take("<Q"), take("<Q")
    meta = {}
    for _ in range(n_kv):
        k = string()
        meta[k] = value(take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        dims = [take("<Q") for _ in range(take("<I"))]
        infos.append((name, dims, take("<I"), take("<Q")))
    align = meta.get("general.alignment", 32)
    start = (pos + align - 1) // align * align
    tensors = {}
    for name, dims, t, off in infos:
        count = math.prod(dims)
        at = start + off
        if t == 0:
            a = np.frombuffer(data, np.float32, count, at)
        elif t == 1:
            a = np.frombuffer(data, np.float16, count, at).astype(np.float32)
        elif t == 8:  # Q8_0: blocks of an f16 scale and 32 int8
            blocks = np.frombuffer(data, np.uint8, count // 32 * 34, at).reshape(-1, 34)
            scale = blocks[:, :2].copy().view(np.float16).astype(np.float32)
            a = (blocks[:, 2:].copy().view(np.int8).astype(np.float32) * scale).reshape(-1)
        else:
            raise SystemExit(f"{name}: GGUF type {t} is not read here (F32, F16, Q8_0)")
        tensors[name] = torch.from_numpy(a.copy()).view(*reversed(dims))  # ggml's ne0 is the innermost
    return meta, tensors


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class Rope:
    def __init__(self, head_dim, theta, n):
        inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
        ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None]
        self.cos = torch.cat([ang, ang], -1).cos().float()
        self.sin = torch.cat([ang, ang], -1).sin().float()
        self.half = head_dim // 2

    def __call__(self, x):  # [B, T, heads, hd], NEOX
        t = x.shape[1]
        x1, x2 = x[..., : self.half], x[..., self.half :]
        return x * self.cos[:t, None] + torch.cat([-x2, x1], -1) * self.sin[:t, None]


def attention(p, h, cfg, rope, mask):
    B, T, _ = h.shape
    nh, nkv, hd, eps = cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["eps"]
    q = rope(rms((h @ p["attn_q"].T).view(B, T, nh, hd), p["attn_q_norm"], eps))
    k = rope(rms((h @ p["attn_k"].T).view(B, T, nkv, hd), p["attn_k_norm"], eps))
    v = (h @ p["attn_v"].T).view(B, T, nkv, hd)
    k, v = k.repeat_interleave(nh // nkv, 2), v.repeat_interleave(nh // nkv, 2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hd) + mask[:T, :T]
    o = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1), v).reshape(B, T, nh * hd)
    return o @ p["attn_output"].T


def moe(p, h, cfg):
    shape = h.shape
    h = h.reshape(-1, shape[-1])
    # softmax over the router, top-k renormalized (the exported selection biases are zeros: no term here)
    probs = torch.softmax(h @ p["ffn_gate_inp"].T, -1)
    top_w, top_e = probs.topk(cfg["experts_used"], -1)
    top_w = top_w / top_w.sum(-1, keepdim=True)
    out = torch.zeros_like(h)
    for e in range(p["ffn_gate_exps"].shape[0]):
        rows, slot = (top_e == e).nonzero(as_tuple=True)
        if rows.numel() == 0:
            continue
        x = h[rows]
        y = (F.silu(x @ p["ffn_gate_exps"][e].T) * (x @ p["ffn_up_exps"][e].T)) @ p["ffn_down_exps"][e].T
        out = out.index_add(0, rows, y * top_w[rows, slot, None])
    if "ffn_gate_shexp" in p:
        out = out + (F.silu(h @ p["ffn_gate_shexp"].T) * (h @ p["ffn_up_shexp"].T)) @ p["ffn_down_shexp"].T
    return out.view(shape)


LAYER = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm", "ffn_norm",
         "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"]


@torch.no_grad()
def trunk(w, cfg, ids, rope, mask):
    """The frozen model: its hidden states after the output norm and its logits, [B, T, *]."""
    x = w["token_embd.weight"][ids]
    for l in range(cfg["layers"]):
        p = {n: w[f"blk.{l}.{n}.weight"] for n in LAYER}
        x = x + attention(p, rms(x, p["attn_norm"], cfg["eps"]), cfg, rope, mask)
        x = x + moe(p, rms(x, p["ffn_norm"], cfg["eps"]), cfg)
    h = rms(x, w["output_norm.weight"], cfg["eps"])
    return h, h @ w["output.weight"].T


def mtp_logits(m, w, cfg, ids, h, rope, mask):
    """The next-n block over a window: row p from token p and the trunk's state at p - 1 (zeros at 0)."""
    eps = cfg["eps"]
    prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], 1)
    e = rms(w["token_embd.weight"][ids], m["nextn.enorm"], eps)
    x = torch.cat([e, rms(prev, m["nextn.hnorm"], eps)], -1) @ m["nextn.eh_proj"].T
    x = x + attention(m, rms(x, m["attn_norm"], eps), cfg, rope, mask)
    x = x + moe(m, rms(x, m["ffn_norm"], eps), cfg)
    return rms(x, w["output_norm.weight"], eps) @ w["output.weight"].T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True, help="int32 token ids of the training corpus, documents ended by <|endoftext|>")
    ap.add_argument("--heldout", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--max-seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    meta, w = read_gguf(a.model)
    arch = meta["general.architecture"]
    cfg = dict(layers=meta[f"{arch}.block_count"], heads=meta[f"{arch}.attention.head_count"],
               kv_heads=meta[f"{arch}.attention.head_count_kv"], eps=meta[f"{arch}.attention.layer_norm_rms_epsilon"],
               experts_used=meta[f"{arch}.expert_used_count"])
    cfg["head_dim"] = w["blk.0.attn_q_norm.weight"].shape[0]
    rope = Rope(cfg["head_dim"], meta[f"{arch}.rope.freq_base"], a.context)
    mask = torch.full((a.context, a.context), float("-inf")).triu(1)
    last = cfg["layers"] - 1
    n = w["token_embd.weight"].shape[1]
    ffn = w[f"blk.{last}.ffn_gate_exps.weight"].shape[1]
    # Starts from the last layer's attention and experts; eh_proj passes the trunk's state through.
    m = {k: w[f"blk.{last}.{k}.weight"].clone() for k in LAYER}
    m["nextn.enorm"] = torch.ones(n)
    m["nextn.hnorm"] = torch.ones(n)
    m["nextn.eh_proj"] = torch.cat([torch.zeros(n, n), torch.eye(n)], 1)
    m["ffn_gate_shexp"] = torch.randn(ffn, n) * 0.02
    m["ffn_up_shexp"] = torch.randn(ffn, n) * 0.02
    m["ffn_down_shexp"] = torch.zeros(n, ffn)
    for t in m.values():
        t.requires_grad_(True)
    opt = torch.optim.AdamW(m.values(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
    train = torch.from_numpy(np.fromfile(a.tokens, np.int32))
    held = torch.from_numpy(np.fromfile(a.heldout, np.int32))
    gen = torch.Generator().manual_seed(a.seed)
    span = a.context
    eval_ids = torch.stack([held[s : s + span] for s in range(0, 16 * span, span)]).long()
    eval_h, eval_logits = trunk(w, cfg, eval_ids, rope, mask)
    eval_target = eval_logits.argmax(-1)

    def evaluate():
        with torch.no_grad():
            lg = mtp_logits(m, w, cfg, eval_ids, eval_h, rope, mask)
            return (lg.argmax(-1)[:, 1:] == eval_target[:, 1:]).float().mean().item()

    print(f"held-out agreement with the trunk's next token, before: {evaluate():.3f}", flush=True)
    started, step, log = time.time(), 0, []
    while time.time() - started < a.max_seconds:
        progress = (time.time() - started) / a.max_seconds
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(train) - span, (a.batch,), generator=gen)
        ids = torch.stack([train[s : s + span] for s in starts.tolist()]).long()
        h, logits = trunk(w, cfg, ids, rope, mask)
        student = mtp_logits(m, w, cfg, ids, h, rope, mask)
        loss = -(torch.softmax(logits, -1) * torch.log_softmax(student, -1)).sum(-1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.values(), 1.0)
        opt.step()
        step += 1
        if step % 20 == 0:
            agree = evaluate()
            log.append(dict(step=step, seconds=round(time.time() - started), loss=loss.item(), agreement=agree))
            print(json.dumps(log[-1]), flush=True)
    agree = evaluate()
    print(f"held-out agreement after {step} steps ({step * a.batch * span} tokens): {agree:.3f}", flush=True)
    out = {f"blk.{cfg['layers']}.{k}.weight": v.detach().contiguous() for k, v in m.items()}
    header, blobs, off = {}, [], 0
    for k, v in out.items():
        b = v.numpy().astype(np.float32).tobytes()
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"report": json.dumps(dict(steps=step, agreement=agree, log=log))}
    hb = json.dumps(header).encode()
    with open(a.out, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))


if __name__ == "__main__":
    main()
