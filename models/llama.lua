-- A LLaMA-architecture language model (SmolLM2, Llama 2/3 style): token
-- embedding, n_layer pre-norm blocks (RMSNorm; grouped-query causal attention
-- with rotary positions; SwiGLU feed-forward), a final RMSNorm and an output
-- head, tied to the embedding when tie = true. Parameter names and shapes are
-- the GGUF tensors' (ggml's ne reversed), so a llama GGUF binds 1:1:
--   sgrt run models/llama.lua --init-weights SmolLM2-135M-Instruct.Q4_1.gguf --prompt "Hi" --chat
-- reads n_layer, n_embd, ... from the file's metadata (as --set defaults; an
-- explicit --set wins). docs/llama.md.
local sg = require "sg"
local cfg = sg.config{ n_layer = 30, n_embd = 576, n_head = 9, n_kv_head = 3, ffn = 1536, rope_base = 100000.0,
                       eps = 1e-5, vocab = 49152, tie = true, context = 8192, block = 256, batch = 1,
                       lr = 1e-4, lora_rank = 0, lora_alpha = 16.0, lora_dropout = 0.0,
                       lora_targets = "q,k,v,o,gate,up,down", instruct = false }
local dh = cfg.n_embd // cfg.n_head
-- LoRA fine-tuning (--set lora_rank=8): adapters on the named projections, the
-- rest frozen (docs/lora.md). lora_rank = 0: full training.
sg.lora{ rank = cfg.lora_rank, alpha = cfg.lora_alpha, dropout = cfg.lora_dropout, targets = cfg.lora_targets,
         aliases = { q = "attn_q%.weight$", k = "attn_k%.weight$", v = "attn_v%.weight$", o = "attn_output%.weight$",
                     gate = "ffn_gate%.weight$", up = "ffn_up%.weight$", down = "ffn_down%.weight$" } }

local tokens = sg.input("tokens", { cfg.batch, cfg.block }, "i32")
local targets = sg.input("targets", { cfg.batch, cfg.block }, "i32")

-- x [..., in] @ W^T with W [out, in]: ggml's linear layout (ne = [in, out]).
local function linear(x, name, out)
  return sg.matmul(x, sg.param(name, { out, x:dim(-1) }, { "normal", 0, 0.02 }), { trans_b = true })
end

local function rmsnorm(x, name) return sg.rms_norm(x, sg.param(name, { x:dim(-1) }, "ones"), cfg.eps) end

local embd = sg.param("token_embd.weight", { cfg.vocab, cfg.n_embd }, { "normal", 0, 0.02 })
local x = sg.embedding(embd, tokens)
for l = 0, cfg.n_layer - 1 do
  local p = "blk." .. l .. "."
  local h = rmsnorm(x, p .. "attn_norm.weight")
  -- GGUF llama q/k weights are permuted for interleaved-pair rotation (llama.cpp's rope "normal")
  local q = sg.rope(linear(h, p .. "attn_q.weight", cfg.n_head * dh), cfg.n_head, cfg.rope_base, true)
  local k = sg.rope(linear(h, p .. "attn_k.weight", cfg.n_kv_head * dh), cfg.n_kv_head, cfg.rope_base, true)
  local v = linear(h, p .. "attn_v.weight", cfg.n_kv_head * dh)
  x = x + linear(sg.attention(q, k, v, cfg.n_head, cfg.n_kv_head), p .. "attn_output.weight", cfg.n_embd)
  h = rmsnorm(x, p .. "ffn_norm.weight")
  local g = linear(h, p .. "ffn_gate.weight", cfg.ffn):silu() * linear(h, p .. "ffn_up.weight", cfg.ffn)
  x = x + linear(g, p .. "ffn_down.weight", cfg.n_embd)
end
x = rmsnorm(x, "output_norm.weight")
local logits = cfg.tie and sg.matmul(x, embd, { trans_b = true }) or linear(x, "output.weight", cfg.vocab)

local n = cfg.batch * cfg.block
if cfg.instruct then  -- sgrt train --data FILE.jsonl: the loss on response tokens only (docs/lora.md)
  local mask = sg.input("mask", { cfg.batch, cfg.block })
  sg.data.instruct{ tokens = tokens, targets = targets, mask = mask }
  sg.loss(sg.nn.masked_cross_entropy(sg.reshape(logits, { n, cfg.vocab }), sg.reshape(targets, { n }), sg.reshape(mask, { n })))
else
  sg.loss(sg.softmax_cross_entropy(sg.reshape(logits, { n, cfg.vocab }), sg.reshape(targets, { n })))
end
sg.output("logits", logits)
sg.optimizer.adamw{ lr = cfg.lr, weight_decay = 0.0 }
sg.recipe "fp32"
