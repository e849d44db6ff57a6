-- Layers built from sg ops. Parameters follow PyTorch's layout and default
-- initialization, so weights move between the two by name.
local nn = {}
local counter = 0

local function auto_name(kind)
  counter = counter + 1
  return kind .. counter
end

-- y = x @ W^T + b; W [out, in], b [out], both U(-1/sqrt(in), 1/sqrt(in)).
function nn.linear(x, out_features, opts)
  local sg = require "sg"
  opts = opts or {}
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
  opts = opts or {}
  local name = opts.name or auto_name("mlp")
  local act = opts.activation or "relu"
  for i, w in ipairs(widths) do
    x = nn.linear(x, w, { name = name .. ".fc" .. i })
    if i < #widths then x = x[act](x) end
  end
  return x
end

return nn
