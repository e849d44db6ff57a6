-- Layers built from sg ops. Parameters follow PyTorch's layout and default
-- initialization, so weights move between the two by name.
local nn = {}
local core = require "_sg"
local counter = 0

local function auto_name(kind)
  counter = counter + 1
  return kind .. counter
end

-- y = x @ W^T + b; W [out, in], b [out], both U(-1/sqrt(in), 1/sqrt(in)).
function nn.linear(x, out_features, opts)
  local sg = require "sg"
  opts = sg.check_options("nn.linear", opts, { "name", "bias" })
  local name = opts.name or auto_name("linear")
  local in_features = x:dim(-1)
  local bound = 1 / math.sqrt(in_features)
  local w = sg.param(name .. ".w", { out_features, in_features }, { "uniform", -bound, bound })
  local y = sg.matmul(x, w, { trans_b = true })
  if opts.bias == false then return y end
  local b = sg.param(name .. ".b", { out_features }, { "uniform", -bound, bound })
  return y + b
end

-- Linear layers of the given widths with an activation between them (none after the last).
function nn.mlp(x, widths, opts)
  opts = require("sg").check_options("nn.mlp", opts, { "name", "activation" })
  local name = opts.name or auto_name("mlp")
  local act = opts.activation or "relu"
  for i, w in ipairs(widths) do
    x = nn.linear(x, w, { name = name .. ".fc" .. i })
    if i < #widths then x = x[act](x) end
  end
  return x
end

-- LoRA (Hu et al. 2021, in PEFT's layout): x W^T + (alpha / rank) dropout(x) A^T B^T
-- for the base weight w [out, in], which it freezes. Adapters NAME.lora_A
-- [rank, in] and NAME.lora_B [out, rank], NAME being w's name less a final
-- ".weight" or ".w"; B starts at zero, so the adapted layer starts as the base.
-- opts: rank (8), alpha (rank: scale 1), dropout (0), init "kaiming" (PEFT's
-- default, A ~ U(±1/sqrt(in))) or "gaussian" (A ~ N(0, 1/rank)). A weight
-- adapted twice (a tied projection) shares one adapter.
local adapters = {}  -- w.id -> {A, B}
function nn.lora(x, w, opts)
  local sg = require "sg"
  opts = sg.check_options("nn.lora", opts, { "rank", "alpha", "dropout", "init", "name" })
  local wname = sg.param_name(w)
  if not wname then core.fail("nn.lora: the weight must be an sg.param") end
  local out, inf = w:dim(1), w:dim(2)
  if w:rank() ~= 2 or x:dim(-1) ~= inf then core.fail("nn.lora: " .. wname .. " must be [out, in] with in = x's last dimension") end
  local r = opts.rank or 8
  if math.type(r) ~= "integer" or r <= 0 then core.fail("nn.lora: rank must be a positive integer") end
  local ab = adapters[w.id]
  if not ab then
    local name = opts.name or wname:gsub("%.weight$", ""):gsub("%.w$", "")
    local init = opts.init or "kaiming"
    local a_init
    if init == "kaiming" then a_init = { "uniform", -1 / math.sqrt(inf), 1 / math.sqrt(inf) }
    elseif init == "gaussian" then a_init = { "normal", 0, 1 / r }
    else core.fail("nn.lora: unknown init '" .. tostring(init) .. "' (kaiming, gaussian)") end
    ab = { sg.param(name .. ".lora_A", { r, inf }, a_init, { requires_grad = true }),
           sg.param(name .. ".lora_B", { out, r }, "zeros", { requires_grad = true }) }
    adapters[w.id] = ab
    core.freeze(w.id)
  end
  local function mm(a, b) return sg.op("matmul", { a, b }, { trans_a = false, trans_b = true }) end
  local low = mm(sg.dropout(x, opts.dropout), ab[1]) * ((opts.alpha or r) / r)  -- [..., rank]
  return sg.matmul_t(x, w) + mm(low, ab[2])
end

-- Mean softmax cross-entropy over the rows where mask = 1: logits [N, C],
-- labels i32 [N], mask f32 [N] of 0/1 (or weights >= 0) with at least one
-- nonzero. One op: the rows of mask 0 are never read (their labels may be
-- anything) and get a zero gradient.
function nn.masked_cross_entropy(logits, labels, mask)
  local sg = require "sg"
  return sg.op("masked_cross_entropy", { logits, labels, mask }, {})
end

-- Recurrent cells, one time step, with PyTorch's gate equations, gate order and
-- init (every param U(-1/sqrt(hidden), 1/sqrt(hidden))): x [B, in], h, c [B, hidden].
-- Params NAME.w_ih [G hidden, in], NAME.w_hh [G hidden, hidden], NAME.b_ih,
-- NAME.b_hh [G hidden] (opts.bias = false: none): PyTorch's weight_ih, weight_hh,
-- bias_ih, bias_hh, the gates stacked in its order. Returns x W_ih^T + b_ih and
-- h W_hh^T + b_hh, each cut into the G gates' [B, hidden] pieces. A name used
-- again shares the cell's params: the next time step of an unrolled sequence.
local cells = {}  -- NAME.ih / NAME.hh -> {w = W, b = b or nil, fn = the layer that made them}
local function cell_gates(fn, kind, x, h, hidden, opts, g)
  local sg = require "sg"
  opts = sg.check_options(fn, opts, { "name", "bias" })
  local name = opts.name or auto_name(kind)
  local bound = 1 / math.sqrt(hidden)
  local function affine(v, suffix)
    local p = cells[name .. "." .. suffix]
    if not p then
      p = { fn = fn, w = sg.param(name .. ".w_" .. suffix, { g * hidden, v:dim(-1) }, { "uniform", -bound, bound }) }
      if opts.bias ~= false then p.b = sg.param(name .. ".b_" .. suffix, { g * hidden }, { "uniform", -bound, bound }) end
      cells[name .. "." .. suffix] = p
    elseif p.fn ~= fn or p.w:dim(1) ~= g * hidden or p.w:dim(2) ~= v:dim(-1) or (p.b ~= nil) ~= (opts.bias ~= false) then
      core.fail(fn .. ": '" .. name .. "' was made by " .. p.fn .. " with other sizes or bias (" .. name .. ".w_" .. suffix ..
                " is [" .. table.concat(p.w:shape(), ", ") .. "]); give this cell another name")
    end
    local y = sg.matmul(v, p.w, { trans_b = true })
    return p.b and y + p.b or y
  end
  local gi, gh = affine(x, "ih"), affine(h, "hh")
  local pi, ph = {}, {}
  for k = 1, g do
    pi[k], ph[k] = sg.slice(gi, -1, (k - 1) * hidden, hidden), sg.slice(gh, -1, (k - 1) * hidden, hidden)
  end
  return pi, ph
end

-- GRU (gates r, z, n): r = sigmoid(x_r + h_r), z = sigmoid(x_z + h_z),
-- n = tanh(x_n + r * h_n), h' = (1 - z) * n + z * h. Returns h'.
function nn.gru_cell(x, h, hidden, opts)
  local i, g = cell_gates("nn.gru_cell", "gru", x, h, hidden, opts, 3)
  local r, z = (i[1] + g[1]):sigmoid(), (i[2] + g[2]):sigmoid()
  local n = (i[3] + r * g[3]):tanh()
  return n + z * (h - n)
end

-- LSTM (gates i, f, g, o): i, f, o = sigmoid(x_* + h_*), g = tanh(x_g + h_g),
-- c' = f * c + i * g, h' = o * tanh(c'). Returns h', c'.
function nn.lstm_cell(x, h, c, hidden, opts)
  local a, b = cell_gates("nn.lstm_cell", "lstm", x, h, hidden, opts, 4)
  local function gate(k) return a[k] + b[k] end
  local c2 = gate(2):sigmoid() * c + gate(1):sigmoid() * gate(3):tanh()
  return gate(4):sigmoid() * c2:tanh(), c2
end

-- Transformer layers (docs/transformers.md). Names follow the PyTorch reference
-- (scripts/make_gpt_reference.py) so weights move between the two.

-- PyTorch's nn.LayerNorm: gain .w = 1, bias .b = 0, over the last axis.
function nn.layernorm(x, opts)
  local sg = require "sg"
  opts = sg.check_options("nn.layernorm", opts, { "name", "eps" })
  local name = opts.name or auto_name("ln")
  local d = x:dim(-1)
  local w = sg.param(name .. ".w", { d }, "ones")
  local b = sg.param(name .. ".b", { d }, "zeros")
  return sg.layer_norm(x, w, b, opts.eps or 1e-5)
end

-- PyTorch's BatchNorm over the last (channel) axis of x [N, C] or [N, H, W, C]:
-- training normalizes with this batch's mean and biased variance over every
-- other axis and moves the running ones toward them (momentum 0.1, the variance
-- unbiased: PyTorch's rule); eval, infer and declared programs use the running
-- ones. Gain .w = 1, bias .b = 0 (affine = false: none), running statistics
-- .running_mean = 0 and .running_var = 1, saved in checkpoints and exports.
function nn.batch_norm(x, opts)
  local sg = require "sg"
  opts = sg.check_options("nn.batch_norm", opts, { "name", "eps", "momentum", "affine" })
  local name = opts.name or auto_name("bn")
  local momentum, eps = opts.momentum or 0.1, opts.eps or 1e-5
  if type(momentum) ~= "number" or momentum < 0 or momentum > 1 then core.fail("nn.batch_norm: momentum must lie in [0, 1]") end
  if type(eps) ~= "number" or eps <= 0 then core.fail("nn.batch_norm: eps must be a positive number") end
  local c, rows = x:dim(-1), 1
  for i = 1, x:rank() - 1 do rows = rows * x:dim(i) end
  if x:rank() < 2 or rows < 2 then
    core.fail("nn.batch_norm: '" .. name .. "' needs more than one value per channel (x is [" .. table.concat(x:shape(), ", ") .. "])")
  end
  local x2 = sg.reshape(x, { rows, c })
  local mean = sg.reduce_mean(x2, 0)                                   -- [C]
  local centered = x2 - mean
  local var = sg.reduce_mean(centered * centered, 0)                   -- [C], biased
  local function stat(value, suffix, init, unbias)
    local running = sg.statistic(name .. suffix, { c }, init)
    return sg.op("running_stat", { value, running }, { momentum = momentum + 0.0, unbias = unbias, training = 1 })
  end
  local m = stat(mean, ".running_mean", "zeros", 1.0)
  local v = stat(var, ".running_var", "ones", rows / (rows - 1))
  local y = (x2 - m) / sg.sqrt(v + eps)
  if opts.affine ~= false then
    y = y * sg.param(name .. ".w", { c }, "ones") + sg.param(name .. ".b", { c }, "zeros")
  end
  return sg.reshape(y, x:shape())
end

-- x / rms(x) * w over the last axis.
function nn.rmsnorm(x, opts)
  local sg = require "sg"
  opts = sg.check_options("nn.rmsnorm", opts, { "name", "eps" })
  local name = opts.name or auto_name("rmsnorm")
  return sg.rms_norm(x, sg.param(name .. ".w", { x:dim(-1) }, "ones"), opts.eps or 1e-5)
end

-- Token embedding: ids i32 [...] -> [..., dim], table .w [vocab, dim] ~ N(0, 0.02).
function nn.embedding(ids, vocab, dim, opts)
  local sg = require "sg"
  opts = sg.check_options("nn.embedding", opts, { "name", "std" })
  local name = opts.name or auto_name("embedding")
  return sg.embedding(sg.param(name .. ".w", { vocab, dim }, { "normal", 0, opts.std or 0.02 }), ids)
end

-- Learned positions: x [B, T, C] + .w [block, C] (T <= block).
function nn.position_embedding(x, block, opts)
  local sg = require "sg"
  opts = sg.check_options("nn.position_embedding", opts, { "name", "std" })
  local name = opts.name or auto_name("wpe")
  local t, c = x:dim(2), x:dim(3)
  if t > block then core.fail("the sequence (" .. t .. " tokens) is longer than the block (" .. block .. ")") end
  if t < block then core.fail("the sequence (" .. t .. " tokens) must fill the block (" .. block .. ")") end
  return x + sg.param(name .. ".w", { block, c }, { "normal", 0, opts.std or 0.02 })
end

-- Causal multi-head self-attention on x [B, T, C]: projections .q .k .v .proj
-- (nn.linear), opts.n_head heads, opts.rope = true for rotary positions,
-- opts.dropout on the output.
function nn.attention(x, opts)
  local sg = require "sg"
  opts = sg.check_options("nn.attention", opts, { "name", "n_head", "rope", "dropout" })
  local name = opts.name or auto_name("attn")
  local c, h = x:dim(-1), opts.n_head
  if not h or h <= 0 or c % h ~= 0 then
    core.fail("n_embd " .. c .. " is not divisible by n_head " .. tostring(h))
  end
  local q = nn.linear(x, c, { name = name .. ".q" })
  local k = nn.linear(x, c, { name = name .. ".k" })
  local v = nn.linear(x, c, { name = name .. ".v" })
  if opts.rope then q, k = sg.rope(q, h), sg.rope(k, h) end
  local y = nn.linear(sg.attention(q, k, v, h), c, { name = name .. ".proj" })
  return sg.dropout(y, opts.dropout)
end

-- silu(x W_gate^T) * (x W_up^T), then W_down: LLaMA's feed-forward, no biases.
function nn.swiglu(x, hidden, opts)
  opts = require("sg").check_options("nn.swiglu", opts, { "name" })
  local name = opts.name or auto_name("swiglu")
  local g = nn.linear(x, hidden, { name = name .. ".gate", bias = false }):silu()
  local u = nn.linear(x, hidden, { name = name .. ".up", bias = false })
  return nn.linear(g * u, x:dim(-1), { name = name .. ".down", bias = false })
end

-- A pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x)).
-- opts: name, n_head, rope, dropout, norm = "layer" | "rms", mlp = "gelu" | "swiglu", hidden (4 C).
function nn.block(x, opts)
  local sg = require "sg"
  opts = sg.check_options("nn.block", opts, { "name", "n_head", "rope", "dropout", "norm", "mlp", "hidden" })
  local name = opts.name or auto_name("block")
  local norm = opts.norm == "rms" and nn.rmsnorm or nn.layernorm
  local c = x:dim(-1)
  local hidden = opts.hidden or 4 * c
  x = x + nn.attention(norm(x, { name = name .. ".ln1" }),
                       { name = name .. ".attn", n_head = opts.n_head, rope = opts.rope, dropout = opts.dropout })
  local h = norm(x, { name = name .. ".ln2" })
  local m = opts.mlp == "swiglu" and nn.swiglu(h, hidden, { name = name .. ".mlp" })
            or nn.mlp(h, { hidden, c }, { name = name .. ".mlp", activation = "gelu" })
  return x + sg.dropout(m, opts.dropout)
end

-- Convolution and pooling on channels-last images x [N, H, W, C] (docs/dsl.md):
-- sg.im2col's patches, then a GEMM (conv2d: nn.linear, so every recipe
-- quantizes it as any linear layer) or a reduction over each window.

-- An integer or {rows, cols} option as {rows, cols}.
local function pair(fn, key, v, default)
  if v == nil then v = default end
  if math.type(v) == "integer" then v = { v, v } end
  if type(v) ~= "table" or #v ~= 2 or math.type(v[1]) ~= "integer" or math.type(v[2]) ~= "integer" then
    core.fail(fn .. ": " .. key .. " must be an integer or {rows, cols}, got " .. tostring(v))
  end
  return v
end

-- sg.im2col's patches of x [N, Ho, Wo, KH*KW*C] and the kernel. Defaults: a
-- pool's kernel 2 and stride = kernel, a convolution's kernel 3 and stride 1.
local function patches(fn, x, opts, pool)
  if x:rank() ~= 4 then core.fail(fn .. ": x must be [N, H, W, C] (channels last), got rank " .. x:rank()) end
  local k = pair(fn, "kernel", opts.kernel, pool and 2 or 3)
  return require("sg").im2col(x, k, pair(fn, "stride", opts.stride, pool and k or 1), pair(fn, "padding", opts.padding, 0)), k
end

-- The patches as windows [N, Ho, Wo, KH*KW, C, ...extra].
local function windows(p, k, c, extra)
  return require("sg").reshape(p, { p:dim(1), p:dim(2), p:dim(3), k[1] * k[2], c, extra })
end

-- y [N, Ho, Wo, out]. opts: kernel (3), stride (1), padding (0), bias (true),
-- groups (1, or C: depthwise, out a multiple of C), name. Weights .w
-- [out, KH*KW*C] in (kh, kw, c) order (depthwise: [KH*KW, C, out / C]) and .b
-- [out], U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = KH*KW*C / groups.
function nn.conv2d(x, out_channels, opts)
  local sg = require "sg"
  opts = sg.check_options("nn.conv2d", opts, { "name", "kernel", "stride", "padding", "bias", "groups" })
  local name = opts.name or auto_name("conv")
  local p, k = patches("nn.conv2d", x, opts)
  local n, ho, wo, kk, c = p:dim(1), p:dim(2), p:dim(3), k[1] * k[2], x:dim(4)
  local groups = opts.groups or 1
  if groups == 1 then
    local y = nn.linear(sg.reshape(p, { n * ho * wo, kk * c }), out_channels, { name = name, bias = opts.bias })
    return sg.reshape(y, { n, ho, wo, out_channels })
  end
  if groups ~= c or out_channels % c ~= 0 then
    core.fail("nn.conv2d: groups must be 1 or the input's " .. c .. " channels (depthwise, out_channels a multiple of " .. c ..
              "), got groups = " .. tostring(groups) .. ", out_channels = " .. out_channels)
  end
  local m, bound = out_channels // c, 1 / math.sqrt(kk)
  local w = sg.param(name .. ".w", { kk, c, m }, { "uniform", -bound, bound })
  local y = sg.reduce_sum(windows(p, k, c, 1) * w, 3)  -- [N, Ho, Wo, C, M]: channel c * M + j
  y = sg.reshape(y, { n, ho, wo, out_channels })
  if opts.bias == false then return y end
  return y + sg.param(name .. ".b", { out_channels }, { "uniform", -bound, bound })
end

-- Max over each window. opts: kernel (2), stride (kernel), padding (0 only: the
-- zero padding would win over negative inputs).
function nn.max_pool2d(x, opts)
  opts = require("sg").check_options("nn.max_pool2d", opts, { "kernel", "stride", "padding" })
  local p = pair("nn.max_pool2d", "padding", opts.padding, 0)
  if p[1] ~= 0 or p[2] ~= 0 then core.fail("nn.max_pool2d: padding must be 0 (zero padding would be a wrong maximum for negative inputs)") end
  local w, k = patches("nn.max_pool2d", x, opts, true)
  return require("sg").reduce_max(windows(w, k, x:dim(4)), 3)
end

-- Mean over each window, padding counted as zeros (PyTorch's count_include_pad).
-- opts: kernel (2), stride (kernel), padding (0).
function nn.avg_pool2d(x, opts)
  opts = require("sg").check_options("nn.avg_pool2d", opts, { "kernel", "stride", "padding" })
  local w, k = patches("nn.avg_pool2d", x, opts, true)
  return require("sg").reduce_mean(windows(w, k, x:dim(4)), 3)
end

return nn
