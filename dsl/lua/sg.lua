-- The sg module: what model scripts `require "sg"`. Tensors are small tables
-- {id = n} with operator overloads; every call records the script line that
-- made it (the C side walks the stack to the user's file).
local core = require "_sg"

local sg = {}
local Tensor = {}
Tensor.__index = Tensor

local function wrap(id) return setmetatable({ id = id }, Tensor) end
local function is_tensor(x) return getmetatable(x) == Tensor end
sg.is_tensor = is_tensor

local function op(name, inputs, attrs)
  local ids = {}
  for i, t in ipairs(inputs) do
    if not is_tensor(t) then core.fail(name .. ": input " .. i .. " is not a tensor") end
    ids[i] = t.id
  end
  return wrap(core.op(name, ids, attrs))
end
sg.op = op

function Tensor:shape() return core.shape(self.id) end
function Tensor:dtype() return core.dtype(self.id) end
function Tensor:rank() return #core.shape(self.id) end
function Tensor:dim(i)
  local s = core.shape(self.id)
  return s[i < 0 and #s + 1 + i or i]
end

-- Numpy broadcasting from the right: the shape both operands expand to.
local function broadcast_shape(a, b)
  local n = math.max(#a, #b)
  local out = {}
  for i = 1, n do
    local x = a[#a - n + i] or 1
    local y = b[#b - n + i] or 1
    if x ~= y and x ~= 1 and y ~= 1 then
      core.fail("shapes [" .. table.concat(a, ", ") .. "] and [" .. table.concat(b, ", ") .. "] do not broadcast")
    end
    out[i] = math.max(x, y)
  end
  return out
end

local function same(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

function sg.broadcast_to(x, shape)
  if same(x:shape(), shape) then return x end
  return op("broadcast_to", { x }, { shape = shape })
end

local function binary(name)
  return function(a, b)
    if not is_tensor(a) then a, b = b, a; assert(name == "add" or name == "mul") end
    if not is_tensor(b) then
      if name == "mul" then return sg.scale(a, b) end
      core.fail(name .. ": both operands must be tensors")
    end
    local s = broadcast_shape(a:shape(), b:shape())
    return op(name, { sg.broadcast_to(a, s), sg.broadcast_to(b, s) })
  end
end
sg.add, sg.sub, sg.mul, sg.div = binary "add", binary "sub", binary "mul", binary "div"
Tensor.__add, Tensor.__sub, Tensor.__mul, Tensor.__div = sg.add, sg.sub, sg.mul, sg.div
function Tensor.__unm(x) return op("neg", { x }) end
Tensor.add, Tensor.sub, Tensor.mul, Tensor.div = sg.add, sg.sub, sg.mul, sg.div

function sg.scale(x, alpha) return op("scale", { x }, { alpha = alpha + 0.0 }) end
function sg.matmul(a, b, opts)
  opts = opts or {}
  return op("matmul", { a, b }, { trans_a = opts.trans_a or false, trans_b = opts.trans_b or false })
end
Tensor.matmul = sg.matmul

-- relu, gelu, tanh, sigmoid, exp, log, neg, silu, ...: every unary op of ops.def.
for _, name in ipairs(core.unary_ops()) do
  sg[name] = function(x) return op(name, { x }) end
  Tensor[name] = sg[name]
end

function sg.reshape(x, shape)
  local known, hole = 1, nil
  local s = {}
  for i, d in ipairs(shape) do
    if d == -1 then hole = i else known = known * d end
    s[i] = d
  end
  if hole then
    local n = 1
    for _, d in ipairs(x:shape()) do n = n * d end
    s[hole] = n // known
  end
  return op("reshape", { x }, { shape = s })
end
function sg.transpose(x, perm)
  if not perm then
    perm = {}
    local r = x:rank()
    for i = 1, r do perm[i] = i - 1 end
    perm[r - 1], perm[r] = r - 1, r - 2
  end
  return op("transpose", { x }, { perm = perm })
end
Tensor.reshape, Tensor.transpose = sg.reshape, sg.transpose
function Tensor:T() return sg.transpose(self) end

local function reduction(name)
  return function(x, axis, keepdims)
    return op(name, { x }, { axis = axis or -1, keepdims = keepdims or false })
  end
end
sg.reduce_sum, sg.reduce_mean, sg.reduce_max = reduction "reduce_sum", reduction "reduce_mean", reduction "reduce_max"
sg.sum, sg.mean, sg.max = sg.reduce_sum, sg.reduce_mean, sg.reduce_max
Tensor.sum, Tensor.mean, Tensor.max = sg.sum, sg.mean, sg.max

function sg.softmax(x, axis) return op("softmax", { x }, { axis = axis or -1 }) end
function sg.log_softmax(x, axis) return op("log_softmax", { x }, { axis = axis or -1 }) end
Tensor.softmax, Tensor.log_softmax = sg.softmax, sg.log_softmax

-- Mean over the batch of -log softmax(logits)[label]; logits [N, C], labels i32 [N].
function sg.softmax_cross_entropy(logits, labels) return op("softmax_cross_entropy", { logits, labels }) end
-- Fraction of rows whose argmax equals the label.
function sg.accuracy(logits, labels) return op("accuracy", { logits, labels }) end

function sg.input(name, shape, dtype) return wrap(core.input(name, shape, dtype or "f32")) end
-- init: {"uniform", low, high} | {"normal", mean, std} | "zeros" | "ones"
function sg.param(name, shape, init)
  init = init or "zeros"
  if type(init) == "string" then init = { init } end
  return wrap(core.param(name, shape, init[1], init[2] or 0, init[3] or 0))
end

function sg.loss(t) core.loss(t.id); return t end
function sg.metric(name, t) core.metric(name, t.id); return t end
function sg.output(name, t) core.output(name, t.id); return t end
function sg.config(defaults) return core.config(defaults) end
-- recipe(name, {keep = {"fc2"}, plan = true}): keep names layers (or params)
-- that stay in f32; plan = false turns the static scale planner off.
function sg.recipe(name, opts) core.recipe(name, opts) end
function sg.train(opts) core.train(opts or {}) end

sg.schedule = {
  constant = function() return { schedule = "constant" } end,
  cosine = function(o) o = o or {}; return { schedule = "cosine", warmup = o.warmup or 0, min_lr_ratio = o.min_lr_ratio or 0 } end,
}

local function optimizer(kind)
  return function(o)
    local cfg = {}
    for k, v in pairs(o or {}) do cfg[k] = v end
    for k, v in pairs(cfg.schedule or {}) do cfg[k] = v end
    cfg.schedule = (o and o.schedule and o.schedule.schedule) or "constant"
    core.optimizer(kind, cfg)
  end
end
sg.optimizer = { sgd = optimizer "sgd", adamw = optimizer "adamw" }

sg.data = {
  -- fashion_mnist{image = x, label = y, shuffle = true, path = dir}
  fashion_mnist = function(o)
    local fields = {}
    for _, f in ipairs { "image", "label" } do if o[f] then fields[f] = o[f].id end end
    core.data("fashion_mnist", fields, { shuffle = o.shuffle, path = o.path })
  end,
  -- text{tokens = x, targets = y, path = file}: byte-level windows of a UTF-8
  -- file, targets shifted by one byte; x and y are i32 [batch, block].
  text = function(o)
    local fields = {}
    for _, f in ipairs { "tokens", "targets" } do if o[f] then fields[f] = o[f].id end end
    core.data("text", fields, { shuffle = true, path = o.path })
  end,
}

-- Transformer ops (docs/transformers.md). Norms and attention have extra
-- outputs (saved statistics) that only their gradients read.
function sg.embedding(table_, ids) return op("embedding", { table_, ids }) end
function sg.layer_norm(x, gain, bias, eps) return op("layer_norm", { x, gain, bias }, { eps = eps or 1e-5 }) end
function sg.rms_norm(x, gain, eps) return op("rms_norm", { x, gain }, { eps = eps or 1e-5 }) end
-- Causal self-attention over q [B, T, n_head * head_size] and k, v
-- [B, T, n_kv_head * head_size] (grouped-query attention; n_kv_head defaults to n_head).
function sg.attention(q, k, v, n_head, n_kv_head)
  return op("attention", { q, k, v }, { n_head = n_head, n_kv_head = n_kv_head or n_head })
end
-- Rotary positions; interleaved = true pairs elements (2i, 2i+1) as llama.cpp
-- does for GGUF llama weights, else (i, i + head_size/2) as GPT-NeoX and HF.
function sg.rope(x, n_head, base, interleaved)
  return op("rope", { x }, { n_head = n_head, base = (base or 10000) + 0.0, inverse = 0, interleaved = interleaved and 1 or 0 })
end
-- Inverted dropout, a fresh mask each step (seeded by the op's position in the
-- script and the step); the eval and infer programs pass x through.
local dropouts = 0
function sg.dropout(x, p)
  if not p or p == 0 then return x end
  dropouts = dropouts + 1
  return op("dropout", { x, wrap(core.train_state()) }, { p = p + 0.0, seed = dropouts, training = 1 })
end

sg.nn = require "sg.nn"
return sg
