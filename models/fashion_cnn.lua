-- A small convolutional network for Fashion-MNIST on channels-last images
-- (docs/dsl.md): two 3x3 convolutions with max pooling, then two linear layers.
-- sgrt train models/fashion_cnn.lua [--recipe fp8] [--set epochs=4]
local sg = require "sg"
local nn = sg.nn
local cfg = sg.config{ batch = 50, epochs = 10, lr = 1e-3 }

local x = sg.input("image", { cfg.batch, 784 })
local y = sg.input("label", { cfg.batch }, "i32")
local h = sg.reshape(x, { cfg.batch, 28, 28, 1 })
h = nn.max_pool2d(nn.conv2d(h, 32, { kernel = 3, name = "conv1" }):relu())  -- [N, 13, 13, 32]
h = nn.max_pool2d(nn.conv2d(h, 64, { kernel = 3, name = "conv2" }):relu())  -- [N, 5, 5, 64]
h = nn.linear(sg.reshape(h, { cfg.batch, 5 * 5 * 64 }), 128, { name = "fc1" }):relu()
local logits = nn.linear(h, 10, { name = "fc2" })

sg.loss(sg.softmax_cross_entropy(logits, y))
sg.metric("accuracy", sg.accuracy(logits, y))
sg.output("logits", logits)
sg.data.fashion_mnist{ image = x, label = y, shuffle = true }
sg.optimizer.adamw{ lr = cfg.lr, weight_decay = 0.0, schedule = sg.schedule.cosine{ warmup = 100 } }
sg.recipe "fp32"
sg.train{ epochs = cfg.epochs, log_every = 100 }
