local sg = require "sg"
local x = sg.input("x", { 8, 32 })
local y = sg.input("y", { 8 }, "i32")
local h = sg.nn.mlp(x, { 32, 16, 4 })
sg.loss(sg.softmax_cross_entropy(h, y))
sg.optimizer.adamw{ lr = 1e-2 }
sg.recipe "fp4"
