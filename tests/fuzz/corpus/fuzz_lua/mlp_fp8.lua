local sg = require "sg"
local nn = sg.nn
local cfg = sg.config{ batch = 4, hidden = 8 }
local x = sg.input("image", { cfg.batch, 16 })
local y = sg.input("label", { cfg.batch }, "i32")
local h = nn.linear(x, cfg.hidden, { name = "fc1" }):relu()
local logits = nn.linear(h, 10, { name = "fc2" })
sg.loss(sg.softmax_cross_entropy(logits, y))
sg.metric("accuracy", sg.accuracy(logits, y))
sg.output("logits", logits)
sg.optimizer.adamw{ lr = 1e-3, schedule = sg.schedule.cosine{ warmup = 10 } }
sg.recipe("fp8", { keep = { "fc2" } })
sg.train{ steps = 10 }
