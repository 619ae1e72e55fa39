"""Trains bloomery's default model: a small Qwen3-MoE (transformers' Qwen3MoeForCausalLM) and its
byte-level BPE vocabulary, on the corpus that tools/train/corpus.mjs writes. See tools/train/README.md.

Writes to --out: tokenizer.json, config.json, model-NNNNN.safetensors (the Hugging Face layout that
llama.cpp's converter reads, one tensor per expert, split into parts of at most 15 MB), report.json.
"""

import argparse
import gzip
import json
import math
import os
import random
import time

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2's pre-tokenizer split, so that llama.cpp's "qwen2" pre-tokenizer cuts text the same way.
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PART_BYTES = 15 << 20


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="tools/train/data")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--hidden", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--experts", type=int, default=16)
    p.add_argument("--experts-used", type=int, default=4)
    p.add_argument("--expert-ffn", type=int, default=128)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--limit-docs", type=int, default=0, help="use only this many training documents (smoke runs)")
    p.add_argument("--aux-loss", type=float, default=0.01, help="the router's load-balancing loss coefficient")
    p.add_argument("--max-seconds", type=float, default=0, help="end training after this long (0: run every step)")
    return p.parse_args()


def read_docs(path, limit=0):
    docs = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            docs.append(json.loads(line)["text"])
            if limit and len(docs) == limit:
                break
    return docs


def train_tokenizer(docs, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    # The special tokens are added after training so that they take the last ids, as in Qwen's vocabulary.
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIAL),
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer)
    tok.add_special_tokens(SPECIAL)
    assert tok.get_vocab_size() == vocab_size, tok.get_vocab_size()
    return tok


def token_stream(tok, docs):
    eot = tok.token_to_id("<|endoftext|>")
    ids = []
    for enc in tok.encode_batch(docs):
        ids.extend(enc.ids)
        ids.append(eot)
    return torch.tensor(ids, dtype=torch.int32)


def canonical_weights(model, cfg):
    """The model's tensors under the names and shapes of a Hugging Face Qwen3-MoE checkpoint (one tensor per
    expert), whether this transformers version keeps experts as modules or as fused 3-D parameters."""
    out = {}
    hidden, ffn = cfg.hidden_size, cfg.moe_intermediate_size
    for name, t in model.state_dict().items():
        t = t.detach().float().cpu()
        # transformers 5 stores [experts, out, in]; a shape that also reads as [experts, in, out] (a hidden
        # width of twice the expert's) is taken as the former.
        if name.endswith("mlp.experts.gate_up_proj"):
            prefix = name[: -len("gate_up_proj")]
            if t.shape[1:] != (2 * ffn, hidden) and t.shape[1:] == (hidden, 2 * ffn):
                t = t.transpose(1, 2)
            assert t.shape[1:] == (2 * ffn, hidden), (name, t.shape)
            for e in range(t.shape[0]):
                out[f"{prefix}{e}.gate_proj.weight"] = t[e, :ffn].contiguous()
                out[f"{prefix}{e}.up_proj.weight"] = t[e, ffn:].contiguous()
        elif name.endswith("mlp.experts.down_proj"):
            prefix = name[: -len("down_proj")]
            if t.shape[1:] != (hidden, ffn) and t.shape[1:] == (ffn, hidden):
                t = t.transpose(1, 2)
            assert t.shape[1:] == (hidden, ffn), (name, t.shape)
            for e in range(t.shape[0]):
                out[f"{prefix}{e}.down_proj.weight"] = t[e].contiguous()
        else:
            out[name] = t.contiguous()
    if "lm_head.weight" not in out:
        raise SystemExit("expected untied embeddings (lm_head.weight)")
    return out


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def reference_logits(w, cfg, ids, theta):
    """Qwen3-MoE from the canonical tensors alone, as llama.cpp computes it (NEOX rope, q/k norms, softmax router
    with the top-k weights renormalized): checks that the tensors we export are the model we trained."""
    n, hd, nh, nkv = len(ids), cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    eps = cfg.rms_norm_eps
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None]
    cos, sin = torch.cat([ang, ang], -1).cos().float(), torch.cat([ang, ang], -1).sin().float()

    def rope(x):  # x: [n, heads, hd]
        x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
        return x * cos[:, None] + torch.cat([-x2, x1], -1) * sin[:, None]

    x = w["model.embed_tokens.weight"][ids]
    mask = torch.full((n, n), float("-inf")).triu(1)
    for layer in range(cfg.num_hidden_layers):
        p = f"model.layers.{layer}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = rope(rms_norm((h @ w[p + "self_attn.q_proj.weight"].T).view(n, nh, hd), w[p + "self_attn.q_norm.weight"], eps))
        k = rope(rms_norm((h @ w[p + "self_attn.k_proj.weight"].T).view(n, nkv, hd), w[p + "self_attn.k_norm.weight"], eps))
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(n, nkv, hd)
        k, v = k.repeat_interleave(nh // nkv, 1), v.repeat_interleave(nh // nkv, 1)
        att = torch.softmax(torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd) + mask, -1)
        x = x + torch.einsum("hqk,khd->qhd", att, v).reshape(n, nh * hd) @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        probs = torch.softmax(h @ w[p + "mlp.gate.weight"].T, -1)
        top_w, top_e = probs.topk(cfg.num_experts_per_tok, -1)
        top_w = top_w / top_w.sum(-1, keepdim=True)
        moe = torch.zeros_like(x)
        for t in range(n):
            for wt, e in zip(top_w[t], top_e[t].tolist()):
                ep = f"{p}mlp.experts.{e}."
                a = F.silu(w[ep + "gate_proj.weight"] @ h[t]) * (w[ep + "up_proj.weight"] @ h[t])
                moe[t] += wt * (w[ep + "down_proj.weight"] @ a)
        x = x + moe
    return rms_norm(x, w["model.norm.weight"], eps) @ w["lm_head.weight"].T


def save_parts(weights, out_dir):
    """Router and norms stay float32; matrices are saved as float16 (the export quantizes them to Q8_0)."""
    parts, part, size = [], {}, 0
    for name, t in weights.items():
        t = t if t.dim() == 1 or name.endswith("mlp.gate.weight") else t.half()
        nbytes = t.numel() * t.element_size()
        if part and size + nbytes > PART_BYTES:
            parts.append(part)
            part, size = {}, 0
        part[name] = t
        size += nbytes
    parts.append(part)
    for i, p in enumerate(parts):
        save_file(p, os.path.join(out_dir, f"model-{i + 1:05d}-of-{len(parts):05d}.safetensors"))
    return len(parts)


@torch.no_grad()
def evaluate(model, stream, context, batch):
    model.eval()
    windows = stream[: len(stream) // (context + 1) * (context + 1)].view(-1, context + 1).long()
    total, count = 0.0, 0
    for i in range(0, len(windows), batch):
        w = windows[i : i + batch].cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=w[:, :-1]).logits
        total += F.cross_entropy(logits.float().flatten(0, 1), w[:, 1:].flatten(), reduction="sum").item()
        count += w[:, 1:].numel()
    model.train()
    return total, count


@torch.no_grad()
def chat_sample(model, tok, question, max_new=60):
    """Greedy answer to one question in the chat format, to see the model write before it is exported."""
    prompt = tok.encode(f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n").ids
    ids = torch.tensor([prompt], device="cuda")
    stop = tok.token_to_id("<|im_end|>")
    for _ in range(max_new):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            nxt = model(input_ids=ids).logits[0, -1].argmax().item()
        if nxt == stop:
            break
        ids = torch.cat([ids, torch.tensor([[nxt]], device="cuda")], 1)
    return tok.decode(ids[0, len(prompt) :].tolist())


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    started = time.time()

    train_docs = read_docs(os.path.join(args.data, "train.jsonl.gz"), args.limit_docs)
    heldout_docs = read_docs(os.path.join(args.data, "heldout.jsonl.gz"))
    tok = train_tokenizer(train_docs, args.vocab)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    train_ids, heldout_ids = token_stream(tok, train_docs), token_stream(tok, heldout_docs)
    heldout_bytes = sum(len(d.encode("utf-8")) for d in heldout_docs)
    print(f"tokenizer + data: {time.time() - started:.0f}s, train {len(train_ids)} tokens, heldout {len(heldout_ids)}")

    cfg = Qwen3MoeConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=4 * args.expert_ffn,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=64,
        num_experts=args.experts,
        num_experts_per_tok=args.experts_used,
        moe_intermediate_size=args.expert_ffn,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        max_position_embeddings=args.context,
        rope_theta=1e6,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        attention_bias=False,
        output_router_logits=True,
        router_aux_loss_coef=args.aux_loss,
        bos_token_id=tok.token_to_id("<|endoftext|>"),
        eos_token_id=tok.token_to_id("<|im_end|>"),
    )
    model = Qwen3MoeForCausalLM(cfg).cuda()
    theta = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta") or cfg.rope_theta
    print(f"parameters {sum(p.numel() for p in model.parameters())}, rope theta {theta:.0f}")
    print("experts impl:", type(model.model.layers[0].mlp.experts).__name__, getattr(cfg, "_experts_implementation", None))

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
        fused=True,
    )
    gen = torch.Generator().manual_seed(args.seed)
    span = args.context + 1
    train_started = time.time()
    for step in range(args.steps):
        # The cosine decay follows the steps, or the clock where --max-seconds ends training sooner.
        progress = step / args.steps
        if args.max_seconds > 0:
            progress = max(progress, (time.time() - train_started) / args.max_seconds)
        lr = args.lr * min(1.0, (step + 1) / args.warmup)
        lr *= 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(train_ids) - span, (args.batch,), generator=gen)
        batch = torch.stack([train_ids[s : s + span] for s in starts.tolist()]).long().cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=batch[:, :-1])
        lm_loss = F.cross_entropy(out.logits.float().flatten(0, 1), batch[:, 1:].flatten())
        loss = lm_loss + cfg.router_aux_loss_coef * out.aux_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        elapsed = time.time() - train_started
        out_of_time = args.max_seconds > 0 and elapsed >= args.max_seconds
        if step % 100 == 0 or step == args.steps - 1 or out_of_time:
            print(f"step {step} loss {lm_loss.item():.3f} aux {out.aux_loss.item():.3f} lr {lr:.2e} {elapsed:.0f}s", flush=True)
        if out_of_time:
            break
    steps_run = step + 1
    train_seconds = time.time() - train_started

    nll, count = evaluate(model, heldout_ids, args.context, args.batch)
    report = {
        "heldout_tokens": count,
        "heldout_perplexity": math.exp(nll / count),
        "heldout_bits_per_byte": nll / math.log(2) / heldout_bytes * (count / len(heldout_ids)),
        "train_tokens": len(train_ids),
        "train_seconds": round(train_seconds),
        "steps": steps_run,
        "tokens_seen": steps_run * args.batch * args.context,
        "args": vars(args),
    }
    print(json.dumps(report, indent=1))

    model.eval()
    samples = {}
    for q in ["What does \"happy\" mean?", "What is a dog?", "Tell me a fortune.", "Define computer.", "Say something wise."]:
        samples[q] = chat_sample(model, tok, q)
        print(f"Q: {q}\nA: {samples[q]}\n")
    report["samples"] = samples

    weights = canonical_weights(model, cfg)
    probe = torch.tensor(tok.encode("A dog is a domesticated animal. To run means to move fast.").ids)
    with torch.no_grad():
        ours = reference_logits(weights, cfg, probe, theta)
        theirs = model.float()(input_ids=probe[None].cuda()).logits[0].cpu()
    report["reference_max_abs_diff"] = (ours - theirs).abs().max().item()
    print("reference vs transformers, max |logit diff|:", report["reference_max_abs_diff"])
    assert report["reference_max_abs_diff"] < 1e-2, "the canonical tensors do not reproduce the model"

    report["parts"] = save_parts(weights, args.out)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg.to_dict(), f, indent=1, default=str)
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(f"total {time.time() - started:.0f}s")


if __name__ == "__main__":
    main()
