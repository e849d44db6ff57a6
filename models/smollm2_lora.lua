-- LoRA fine-tuning of SmolLM2-135M-Instruct on WordNet definitions: the worked
-- example of docs/lora.md, models/llama.lua with these defaults (--set still
-- overrides any of them):
--   python3 scripts/make_wordnet_instructions.py -o wordnet.jsonl
--   sgrt train models/smollm2_lora.lua --init-weights ~/.cache/sgrt/SmolLM2-135M-Instruct.Q4_1.gguf
-- trains rank-8 adapters on the seven projections of every block (the base
-- frozen), the loss on the answers only, and evaluates the 60 held-out
-- definitions every 20 steps. QLoRA: --set lora_base=q4_1 --set lora_base_embd=q8_0.
local sg = require "sg"
sg.preset{ lora_rank = 8, lora_alpha = 16.0, instruct = true, data = "wordnet.jsonl", block = 64, batch = 4,
           lr = 2e-3, steps = 40, eval_every = 20 }
require "llama"
