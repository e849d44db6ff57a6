-- bench_gemm_graph's model: one n×n×n matmul (the loss only makes it a valid
-- training graph; its O(n²) reduction is noise next to the GEMM).
local sg = require "sg"
local cfg = sg.config{ n = 1024 }
local a = sg.input("a", {cfg.n, cfg.n}, "f32", { range = {-1, 1} })
local b = sg.param("b", {cfg.n, cfg.n}, {"uniform", -1, 1})
local c = sg.output("c", a:matmul(b))
sg.loss(sg.sum(sg.max(c, 1)))
sg.optimizer.sgd{ lr = 0.1 }
