#!/usr/bin/env python3
"""A small instruction set from WordNet glosses (Debian's wordnet-base).

Each line: {"system": ..., "prompt": "What does \"WORD\" mean?", "response": "GLOSS."}
for words with exactly one sense in WordNet (so the answer is unambiguous),
chosen evenly over the alphabet, deterministically. The last tenth of the
lines is what sg.data.instruct holds out (docs/lora.md), so the held-out
words are never trained on.

    python3 scripts/make_wordnet_instructions.py -o wordnet.jsonl [--count 600]
"""
import argparse
import json
import os

POS = ("noun", "verb", "adj", "adv")
SYSTEM = "Answer briefly."


def read_lines(path):
    with open(path, encoding="latin-1") as f:
        return [line for line in f if not line.startswith("  ")]  # the license header is indented


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wordnet", default="/usr/share/wordnet")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--count", type=int, default=600)
    args = ap.parse_args()

    senses = {}  # lemma -> number of synsets over every part of speech
    for pos in POS:
        for line in read_lines(os.path.join(args.wordnet, "index." + pos)):
            f = line.split()
            senses[f[0]] = senses.get(f[0], 0) + int(f[2])
    glosses = {}
    for pos in POS:
        for line in read_lines(os.path.join(args.wordnet, "data." + pos)):
            head, _, gloss = line.partition(" | ")
            f = head.split()
            word = f[4]
            if int(f[3], 16) != 1 or not (word.isalpha() and word.islower()) or len(word) < 4 or senses.get(word) != 1:
                continue  # one word per synset, lower-case letters (no names), unambiguous
            definition = gloss.split(";")[0].strip()
            if definition.startswith("(") or '"' in definition or not 3 <= len(definition.split()) <= 16:
                continue
            glosses[word] = definition[0].upper() + definition[1:].rstrip(".") + "."
    words = sorted(glosses)
    if len(words) < args.count:
        raise SystemExit(f"only {len(words)} usable words, asked for {args.count}")
    step = len(words) / args.count
    picked = [words[int(i * step)] for i in range(args.count)]
    # Interleave so the held-out tenth (the end of the file) spans the alphabet too.
    held = picked[5::10]
    train = [w for i, w in enumerate(picked) if i % 10 != 5]
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        for w in train + held:
            f.write(json.dumps({"system": SYSTEM, "prompt": f'What does "{w}" mean?', "response": glosses[w]}) + "\n")
    os.replace(tmp, args.out)
    print(f"{args.out}: {len(train)} training and {len(held)} held-out definitions from {len(words)} unambiguous words")


if __name__ == "__main__":
    main()
