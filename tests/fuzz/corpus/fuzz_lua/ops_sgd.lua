local sg = require "sg"
local x = sg.input("x", { 3, 4 })
local w = sg.param("w", { 4, 5 })
local b = sg.param("b", { 5 })
local z = sg.matmul(x, w) + b
local t = sg.transpose(sg.reshape(z, { 5, 3 }))
local p = sg.softmax(t) * sg.scale(t, 0.5) - t
sg.loss(sg.mean(sg.mean(p * p)))
sg.optimizer.sgd{ lr = 0.1 }
sg.recipe "bf16"
