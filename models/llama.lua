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
                       lora_targets = "q,k,v,o,gate,up,down", lora_base = "f32", lora_base_embd = "", instruct = false,
                       kv_cache = false, prefill_chunk = 0, accumulate = 1, checkpoint = false, data = "", steps = 0, eval_every = 0,
                       lr_schedule = "constant", warmup = 0, min_lr_ratio = 0.0 }
local dh = cfg.n_embd // cfg.n_head
-- LoRA fine-tuning (--set lora_rank=8): adapters on the named projections, the
-- rest frozen (docs/lora.md). lora_rank = 0: full training. lora_base = q4_1 or
-- q8_0 keeps the frozen projections and the embedding as GGUF blocks (QLoRA; also
-- sgrt run's weights); lora_base_embd, if set, is the embedding's (SmolLM2's is Q8_0).
local base = cfg.lora_base_embd ~= "" and { cfg.lora_base, ["^token_embd%.weight$"] = cfg.lora_base_embd } or cfg.lora_base
sg.lora{ rank = cfg.lora_rank, alpha = cfg.lora_alpha, dropout = cfg.lora_dropout, targets = cfg.lora_targets,
         base = base,
         aliases = { q = "attn_q%.weight$", k = "attn_k%.weight$", v = "attn_v%.weight$", o = "attn_output%.weight$",
                     gate = "ffn_gate%.weight$", up = "ffn_up%.weight$", down = "ffn_down%.weight$" } }

local tokens = sg.input("tokens", { cfg.batch, cfg.block }, "i32")
local targets = sg.input("targets", { cfg.batch, cfg.block }, "i32")

-- Each parameter once, however many graphs (train, prefill, decode step) read it.
local params = {}
local function param(name, shape, init)
  params[name] = params[name] or sg.param(name, shape, init)
  return params[name]
end

-- x [..., in] @ W^T with W [out, in]: ggml's linear layout (ne = [in, out]).
local function linear(x, name, out)
  return sg.matmul(x, param(name, { out, x:dim(-1) }, { "normal", 0, 0.02 }), { trans_b = true })
end

local function rmsnorm(x, name) return sg.rms_norm(x, param(name, { x:dim(-1) }, "ones"), cfg.eps) end

-- The logits of ids [batch, T]; attend(l, q, k, v) mixes positions in block l,
-- q and k before rope. GGUF llama q/k weights are permuted for interleaved-pair
-- rotation (llama.cpp's rope "normal"), hence rope's `true`.
local embd = param("token_embd.weight", { cfg.vocab, cfg.n_embd }, { "normal", 0, 0.02 })
local function block(l, x, attend, rows)
  local p = "blk." .. l .. "."
  local h = rmsnorm(x, p .. "attn_norm.weight")
  local q = linear(h, p .. "attn_q.weight", cfg.n_head * dh)
  local k = linear(h, p .. "attn_k.weight", cfg.n_kv_head * dh)
  local v = linear(h, p .. "attn_v.weight", cfg.n_kv_head * dh)
  x = x + linear(attend(l, q, k, v), p .. "attn_output.weight", cfg.n_embd)
  if rows then x = x * rows end
  h = rmsnorm(x, p .. "ffn_norm.weight")
  local g = linear(h, p .. "ffn_gate.weight", cfg.ffn):silu() * linear(h, p .. "ffn_up.weight", cfg.ffn)
  return x + linear(g, p .. "ffn_down.weight", cfg.n_embd)
end
-- rows [batch, T, 1], when given: 0 on padding positions, whose rows of the
-- residual stream are zeroed at the embedding and after each attention (which
-- mixed them), so they stay zero (a zero row normalizes and projects to zero)
-- and the CPU's products skip them. The other rows do not change: causal
-- attention lets no earlier position read a later one, and padding comes last.
local function hidden_states(ids, attend, rows)
  local x = sg.embedding(embd, ids)
  if rows then  -- one [batch, T, n_embd] copy for every block, not one each
    rows = sg.broadcast_to(rows, x:shape())
    x = x * rows
  end
  for l = 0, cfg.n_layer - 1 do
    -- --set checkpoint=true: each block's activations are recomputed in backward, not kept
    x = cfg.checkpoint and sg.checkpoint(block, l, x, attend, rows) or block(l, x, attend, rows)
  end
  return rmsnorm(x, "output_norm.weight")
end
local function head(x)
  return cfg.tie and sg.matmul(x, embd, { trans_b = true }) or linear(x, "output.weight", cfg.vocab)
end
local function forward(ids, attend) return head(hidden_states(ids, attend)) end

local function causal(_, q, k, v)
  return sg.attention(sg.rope(q, cfg.n_head, cfg.rope_base, true), sg.rope(k, cfg.n_kv_head, cfg.rope_base, true), v,
                      cfg.n_head, cfg.n_kv_head)
end
local logits = head(hidden_states(tokens, causal))

-- kv_cache = true: programs "prefill" (prefill_chunk tokens of the prompt at
-- position pos, padded; 0: the whole block) and "decode_step" (one token at
-- position pos), both appending to per-layer caches [batch, block, n_kv_head * dh].
-- A prompt is prefilled chunk by chunk: its cost follows its length, not the block's.
-- sgrt run sets kv_cache.
local chunk = cfg.prefill_chunk > 0 and cfg.prefill_chunk or cfg.block
if cfg.kv_cache and cfg.block % chunk ~= 0 then
  error("prefill_chunk=" .. chunk .. " does not divide block=" .. cfg.block)
end
if cfg.kv_cache then
  local pos = sg.input("pos", {}, "i32")
  local caches = {}
  for l = 0, cfg.n_layer - 1 do
    local shape = { cfg.batch, cfg.block, cfg.n_kv_head * dh }
    caches[l] = { sg.cache("blk." .. l .. ".k_cache", shape), sg.cache("blk." .. l .. ".v_cache", shape) }
  end
  local function cached(l, q, k, v)
    return sg.kv_attention(sg.rope_at(q, pos, cfg.n_head, cfg.rope_base, true),
                           sg.rope_at(k, pos, cfg.n_kv_head, cfg.rope_base, true), v, caches[l][1], caches[l][2], pos,
                           cfg.n_head, cfg.n_kv_head)
  end
  sg.program("prefill", { logits = forward(sg.input("prompt", { cfg.batch, chunk }, "i32"), cached) })
  sg.program("decode_step", { logits = forward(sg.input("token", { cfg.batch, 1 }, "i32"), cached) })
end

local n = cfg.batch * cfg.block
if cfg.instruct then  -- sgrt train --data FILE.jsonl: the loss on response tokens only (docs/lora.md)
  local mask, valid = sg.input("mask", { cfg.batch, cfg.block }), sg.input("valid", { cfg.batch, cfg.block })
  sg.data.instruct{ tokens = tokens, targets = targets, mask = mask, valid = valid,
                    path = cfg.data ~= "" and cfg.data or nil }
  -- The loss's own forward pass: padding rows zero (hidden_states), then only
  -- the response's rows into the head (the CPU's product skips the zeroed rows;
  -- masked_cross_entropy never reads them and gives them a zero gradient), [n,
  -- vocab] at once (a reshape of the logits would copy them). The logits output
  -- above is the plain model's, for programs fed tokens alone.
  local hidden = hidden_states(tokens, causal, sg.reshape(valid, { cfg.batch, cfg.block, 1 }))
  sg.loss(sg.nn.masked_cross_entropy(head(sg.reshape(hidden, { n, cfg.n_embd }) * sg.reshape(mask, { n, 1 })),
                                     sg.reshape(targets, { n }), sg.reshape(mask, { n })))
else
  sg.loss(sg.softmax_cross_entropy(sg.reshape(logits, { n, cfg.vocab }), sg.reshape(targets, { n })))
end
sg.output("logits", logits)
-- --set lr_schedule=cosine: warmup steps of linear rise, then cosine down to
-- min_lr_ratio * lr over the run's --steps (e.g. a run from trained adapters,
-- whose AdamW moments start at zero; docs/lora.md); constant: lr throughout.
local schedule
if cfg.lr_schedule == "cosine" then
  schedule = sg.schedule.cosine{ warmup = cfg.warmup, min_lr_ratio = cfg.min_lr_ratio }
elseif cfg.lr_schedule ~= "constant" or cfg.warmup ~= 0 then
  error("lr_schedule is constant (no warmup) or cosine, not " .. tostring(cfg.lr_schedule) ..
        (cfg.warmup ~= 0 and " with warmup " .. cfg.warmup or ""))
end
sg.optimizer.adamw{ lr = cfg.lr, weight_decay = 0.0, schedule = schedule }
-- --set accumulate=k: one optimizer step from k micro-batches of `batch` (docs/lora.md);
-- data, steps, eval_every: what --data, --steps and --eval-every give when omitted (0: their defaults)
sg.train{ accumulate = cfg.accumulate, steps = cfg.steps, eval_every = cfg.eval_every }
sg.recipe "fp32"
