-- A GPT-2-style language model on bytes (vocab 256): token and learned position
-- embeddings, n_layer pre-norm blocks (causal attention + GELU MLP), final layer
-- norm, and an output head tied to the token embedding.
-- sgrt train models/gpt.lua [--set n_layer=4 --set n_embd=256 --set n_head=4 --set block=128 --set batch=16]
-- sgrt run models/gpt.lua --checkpoint DIR --prompt "The "
local sg = require "sg"
local nn = sg.nn
local cfg = sg.config{ n_layer = 4, n_embd = 256, n_head = 4, block = 128, batch = 16, vocab = 256,
                       steps = 2000, lr = 1e-3, warmup = 100, dropout = 0.0, tie = true, rope = false }

local tokens = sg.input("tokens", { cfg.batch, cfg.block }, "i32")
local targets = sg.input("targets", { cfg.batch, cfg.block }, "i32")

local wte = sg.param("wte.w", { cfg.vocab, cfg.n_embd }, { "normal", 0, 0.02 })
local x = sg.embedding(wte, tokens)
if not cfg.rope then x = nn.position_embedding(x, cfg.block, { name = "wpe" }) end
x = sg.dropout(x, cfg.dropout)
for l = 0, cfg.n_layer - 1 do
  x = nn.block(x, { name = "h" .. l, n_head = cfg.n_head, rope = cfg.rope, dropout = cfg.dropout })
end
x = nn.layernorm(x, { name = "ln_f" })
local logits = cfg.tie and sg.matmul(x, wte, { trans_b = true })
               or nn.linear(x, cfg.vocab, { name = "lm_head", bias = false })

local n = cfg.batch * cfg.block
sg.loss(sg.softmax_cross_entropy(sg.reshape(logits, { n, cfg.vocab }), sg.reshape(targets, { n })))
sg.output("logits", logits)
sg.data.text{ tokens = tokens, targets = targets }
sg.optimizer.adamw{ lr = cfg.lr, weight_decay = 0.1, beta2 = 0.99,
                    schedule = sg.schedule.cosine{ warmup = cfg.warmup, min_lr_ratio = 0.1 } }
sg.recipe "fp32"
sg.train{ steps = cfg.steps, log_every = 50 }
