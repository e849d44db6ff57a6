-- A two-layer perceptron for Fashion-MNIST: the README's default model.
-- sgrt train models/fashion_mlp.lua [--set hidden=256] [--set epochs=5]
local sg = require "sg"
local nn = sg.nn
local cfg = sg.config{ batch = 100, hidden = 500, epochs = 12, lr = 1e-3 }

local x = sg.input("image", { cfg.batch, 784 })
local y = sg.input("label", { cfg.batch }, "i32")
local h = nn.linear(x, cfg.hidden, { name = "fc1" }):relu()
local logits = nn.linear(h, 10, { name = "fc2" })

sg.loss(sg.softmax_cross_entropy(logits, y))
sg.metric("accuracy", sg.accuracy(logits, y))
sg.output("logits", logits)
sg.data.fashion_mnist{ image = x, label = y, shuffle = true }
sg.optimizer.adamw{ lr = cfg.lr, weight_decay = 0.0, schedule = sg.schedule.cosine{ warmup = 100 } }
sg.recipe "fp32"
sg.train{ epochs = cfg.epochs, log_every = 100 }
