#!/usr/bin/env python3
"""Reference ids for sgrt's tokenizer, from Hugging Face `tokenizers`.

Needs (PyPI): tokenizers, gguf, jinja2; transformers is used for the chat
prompts when installed (apply_chat_template). Not run by CI.

    pip install tokenizers gguf jinja2 transformers
    python3 scripts/make_tokenizer_reference.py [--gguf FILE] [-o tests/data/tokenizer_reference.txt]

The GGUF defaults to $SGRT_SMOLLM2_GGUF or ${SGRT_CACHE:-~/.cache/sgrt}/
SmolLM2-135M-Instruct.Q4_1.gguf (scripts/get_models.sh fetches it). The
reference tokenizer is built from the file's own vocabulary and merges (read
with the `gguf` package) and configured as SmolLM2's tokenizer.json: BPE, no
normalizer, pre-tokenizer Sequence[Digits(individual_digits=true),
ByteLevel(add_prefix_space=false, use_regex=true)], ByteLevel decoder, the
control tokens as special added tokens, no BOS added, no unknown token (bytes
the vocabulary lacks are dropped). Chat prompts are rendered from the file's
chat template by transformers' apply_chat_template (or, without transformers,
the Jinja environment it uses: sandboxed, trim_blocks, lstrip_blocks).

Dump format (text; every string is UTF-8 written as hex so that any bytes fit
on one line):
    case HEX            a string, then
    ids I I ...         its ids (add_special_tokens=False), and only when
    decoded HEX         decoding them does not give the string back
    chat N G            a chat of N messages, G = add_generation_prompt (0/1), then
    msg HEXROLE HEXCONTENT   N times, then
    text HEX            the rendered prompt, and
    ids I I ...         its ids
    decode I I ...      ids whose bytes may cut a character, then
    text HEX            tokenizers' decode (invalid UTF-8 replaced by U+FFFD)

Bench (JSON lines on stdout):

    python3 scripts/make_tokenizer_reference.py --bench /usr/share/doc/jargon-text/jargon.txt.gz \
        [--reps 5] [--paragraphs] [--sgrt-bench build/bench/bench_tokenizer]

encodes FILE (UTF-8 text, .gz accepted; invalid UTF-8 replaced by U+FFFD) with
one thread and prints the median tokens/s and the CRC-32 of the ids (int32 LE);
with --sgrt-bench, first runs sgrt's bench on the same file (one thread too),
then prints a line comparing the two: speed ratio (> 1: sgrt is faster) and
whether the ids are identical. --paragraphs encodes each paragraph (split at
"\n\n") on its own (encode_batch, still one thread) instead of one string.
"""
import argparse
import gzip
import json
import os
import statistics
import struct
import subprocess
import sys
import time
import zlib

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

import gguf  # noqa: E402
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers  # noqa: E402

CONTROL = 3
USER_DEFINED = 4


def default_gguf():
    path = os.environ.get("SGRT_SMOLLM2_GGUF")
    if path:
        return path
    cache = os.environ.get("SGRT_CACHE", os.path.expanduser("~/.cache/sgrt"))
    return os.path.join(cache, "SmolLM2-135M-Instruct.Q4_1.gguf")


def read_gguf(path):
    r = gguf.GGUFReader(path)
    f = r.fields
    return {
        "tokens": list(f["tokenizer.ggml.tokens"].contents()),
        "types": list(f["tokenizer.ggml.token_type"].contents()),
        "merges": list(f["tokenizer.ggml.merges"].contents()),
        "pre": f["tokenizer.ggml.pre"].contents(),
        "model": f["tokenizer.ggml.model"].contents(),
        "template": f["tokenizer.chat_template"].contents(),
        "bos": f["tokenizer.ggml.bos_token_id"].contents(),
        "eos": f["tokenizer.ggml.eos_token_id"].contents(),
    }


def build_reference(meta):
    assert meta["model"] == "gpt2" and meta["pre"] == "smollm", (meta["model"], meta["pre"])
    vocab = {t: i for i, t in enumerate(meta["tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in meta["merges"]]
    tok = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = [t for t, ty in zip(meta["tokens"], meta["types"]) if ty in (CONTROL, USER_DEFINED)]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return tok


def chat_renderer(tok, template):
    """transformers' apply_chat_template(tokenize=False) when it is installed,
    else the Jinja environment it uses (sandboxed, trim_blocks, lstrip_blocks)."""
    try:
        from transformers import PreTrainedTokenizerFast
        hf = PreTrainedTokenizerFast(tokenizer_object=tok, chat_template=template)
        return "transformers", lambda messages, gen: hf.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=gen)
    except ImportError:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        compiled = env.from_string(template)
        return "jinja2", lambda messages, gen: compiled.render(messages=messages, add_generation_prompt=gen)


def test_strings():
    s = []
    # ASCII prose, punctuation, case.
    s += ["", "a", "A", "Hello", "Hello world", "Hello, world!", "hello world", "HELLO WORLD",
          "The quick brown fox jumps over the lazy dog.", "Once upon a time, there was a little robot.",
          "What is the capital of France?", "I'm fine, thanks. And you?", "e.g. i.e. etc. vs. Mr. Dr.",
          "!!!", "???", "...", "--", "a-b_c.d/e\\f", "(parenthesis) [brackets] {braces} <angles>",
          "\"double\" 'single' `back`", "@user #tag $5 %p ^ & * ~", "x", " ", "  ", "   ",
          "supercalifragilisticexpialidocious", "antidisestablishmentarianism", "aaaaaaaaaaaaaaaaaaaaaaaa",
          "abababababababababab", "The the THE tHe", "mixedCaseIdentifierName", "snake_case_name_here"]
    # Contractions (case-sensitive in the regex), apostrophes elsewhere.
    s += ["don't", "I'm", "you're", "we've", "he'll", "she'd", "it's", "they'RE", "DON'T", "I'M",
          "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "''s", "' s", "rock'n'roll", "o'clock",
          "the '90s", "'quoted'", "it’s (curly)", "ma'am's", "y'all'd've"]
    # Digits and numbers: each digit is its own piece.
    s += ["0", "7", "42", "123", "2024", "3.14159", "1,000,000", "-17", "+1 (555) 123-4567",
          "v1.2.3", "x2", "2x", "abc123def", "100%", "1e-5", "0x1F", "12:30 pm", "2026-11-30",
          "١٢٣ (Arabic-Indic)", "٣.١٤", "१२३ (Devanagari)", "½ ¾ ² ³ ⅷ Ⅻ", "①②③", "一二三 (CJK numerals)",
          " 1", "  12", "a 1 b 2", "The year 1984 and 2001."]
    # Whitespace runs: spaces, tabs, newlines, mixed, trailing, leading.
    s += ["\n", "\n\n", "\n\n\n", "\t", "\t\t", "\r\n", "\r\n\r\n", "a\nb", "a\n\nb", "a \nb", "a\n b",
          "a  b", "a   b", "a    b", "a\tb", "a\t\tb", "a \tb", "a\t b", "a \t b", "  leading", "trailing  ",
          "trailing\n", "trailing \n", "   \n   ", " \t \n ", "x\u000by\u000cz", "a\u00a0b",
          "a\u2003b", "a\u3000b", "a\u2028b", "a\u2029b", "a\u0085b", "a\u001cb", "a\u200bb", "a\u180eb",
          "a \u00a0 b", "word \u00a0word", "line1\nline2\nline3\n", "para one.\n\npara two.\n\n\n",
          "    indented", "\tindented with tab", "end with spaces   ", "x" + " " * 20 + "y", "\n" * 10]
    # Unicode: accents, scripts, symbols.
    s += ["café", "naïve résumé", "Ångström", "über straße", "Crème brûlée", "ñandú", "Łódź", "São Paulo",
          "e\u0301 (combining)", "ﬁ ligature", "Ǆ Dž dž", "ΑΒΓ αβγ Ωμέγα", "Привет, мир!", "Ελληνικά",
          "日本語のテキスト", "中文文本，标点。", "한국어 텍스트", "こんにちは世界", "漢字かなカナ",
          "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "हिन्दी भाषा", "தமிழ்", "ไทย ภาษา", "ქართული",
          "Հայերեն", "አማርኛ", "ᚠᚢᚦ runes", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math", "𝟙𝟚𝟛", "™ © ® ° ± × ÷", "€100 £50 ¥1000 ₹20",
          "→ ← ↑ ↓ ⇒", "∀x∈ℝ: x²≥0", "♠♣♥♦", "«quotes» „German“ ‹›", "em—dash en–dash", "…ellipsis",
          "\u00ad soft hyphen", "\ufeffBOM", "\ufffd replacement", "\u0000 nul", "\u007f del",
          "\U0010ffff max", "\ue000 private use", "Zalgo: Z̴̧a̵l̶g̷o̸", "Ǳ Ǉ ǈ ǉ", "ſ long s"]
    # Emoji and ZWJ sequences, flags, skin tones, variation selectors.
    s += ["😀", "😀😃😄", "Hello 👋 world 🌍", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷🇯🇵", "❤️", "☺︎", "1️⃣",
          "👩🏻‍💻 coding", "🤖🤖🤖", "emoji at end 🎉", "🎉 emoji at start", "a😀b", " 😀", "😀 "]
    # Code snippets.
    s += ["def foo(x):\n    return x + 1\n",
          "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
          "#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); return 0; }",
          "if x == 1 and y != 2:\n        pass",
          "const f = (a, b) => a ?? b;",
          "SELECT * FROM users WHERE id = 42;",
          "<div class=\"x\">Hello</div>",
          "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
          "    # comment\n    x = [i**2 for i in range(10)]",
          "fn main() { let v: Vec<u8> = vec![0xFF; 16]; }",
          "$ ls -la | grep '.txt' > out.log 2>&1",
          "a += b; c -= d; e *= f; g /= h;",
          "x->y::z<T>&& w",
          "// TODO: fix\n/* block */",
          "https://example.com/path?q=1&r=two#frag",
          "user@example.org",
          "C:\\Windows\\System32",
          "==== ---- ____ ****",
          "\\n \\t \\\\",
          "lambda x: x**2 if x>0 else -x"]
    # The special tokens inline, adjacent, partial.
    s += ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im_start|>user\nHi<|im_end|>\n",
          "text<|endoftext|>more", "<|im_start|><|im_end|>", " <|im_end|> ", "<|im_end", "|im_end|>",
          "<|im_start|assistant", "<repo_name>sgrt<file_sep>main.c", "<reponame>", "<filename>x.py",
          "<gh_stars>100", "<issue_start>bug<issue_comment>ok<issue_closed>",
          "<jupyter_start><jupyter_text>t<jupyter_code>c<jupyter_output>o<jupyter_script><empty_output>",
          "<<|im_start|>>", "<|endoftext|><|endoftext|>", "a<|im_end|>b<|im_start|>c",
          "<|IM_START|>", "< |im_start| >"]
    # Longer mixed texts.
    s += ["The 3 little pigs built 3 houses: one of straw, one of sticks, and one of bricks.\n" * 3,
          "Tokenization is the process of splitting text into tokens. " * 8,
          "日本語 and English mixed, with numbers 123 and emoji 😀, plus code `x=1`.",
          "  Multiple   spaces\tand\ttabs\n\nand newlines  \n",
          "\n".join(f"{i}. item number {i}" for i in range(1, 12)),
          "Q: What's 2+2?\nA: It's 4.\n",
          "ALL CAPS SENTENCE WITH NUMBERS 1 2 3 AND PUNCTUATION!!!",
          "Le cœur a ses raisons que la raison ne connaît point.",
          "Ich heiße Max und wohne in München.",
          "¿Dónde está la biblioteca? ¡Aquí!"]
    # Edge cases.
    s += ["'", "''", "'''", "' ", " '", "\"", "\\", "-" * 64, "=" * 100, "a" * 300, " " * 100,
          "\t" * 30, "ab" * 150, "1" * 50, "😀" * 20, "é" * 40, "\r", "\r\r\n", " \n", "\n ", "\n  x",
          " x", "  x", "\tx", "x ", "x  ", "🙂\n", "\u200d", "\u200d\u200d", "\ufe0f", "\U0001f3fb",
          # characters with bytes the vocabulary lacks (0x04, 0x1D; 0xF1 leads planes 4-7): dropped
          "a\x04b", "!\x04!", "x\x1dy", "\U00040000", "ok \U00050000!"]
    return s


def chat_cases():
    return [
        ([{"role": "user", "content": "Hi!"}], True),
        ([{"role": "user", "content": "What is 2+2?"}], False),
        ([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello"}], True),
        ([{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi, how can I help?"},
          {"role": "user", "content": "Tell me a joke.\nA short one."}], True),
        ([{"role": "system", "content": ""}, {"role": "user", "content": ""}], True),
        ([{"role": "user", "content": "Écris un poème 😀 sur la mer, 3 lignes."}], True),
        ([{"role": "user", "content": "code:\n```py\nprint('hi')\n```"},
          {"role": "assistant", "content": "It prints hi."}], False),
    ]


def decode_cases(tok):
    """Id sequences cutting multi-byte characters: tokenizers' lossy decode."""
    cases = []
    for text in ["日本語", "😀👍🏽", "é", "👨‍👩‍👧"]:
        ids = tok.encode(text, add_special_tokens=False).ids
        cases.append(ids[:1])
        cases.append(ids[:-1] if len(ids) > 1 else ids)
    # Single byte-level tokens of bytes that are never valid alone.
    for b in (0x80, 0xBF, 0xC3, 0xE6, 0xF0, 0xF4):
        cases.append([tok.token_to_id(BYTE_TO_CHAR[b])])
    cases.append([tok.token_to_id(BYTE_TO_CHAR[0xE6]), tok.token_to_id(BYTE_TO_CHAR[0x97])])
    cases.append([tok.token_to_id(BYTE_TO_CHAR[0xED]), tok.token_to_id(BYTE_TO_CHAR[0xA0]),
                  tok.token_to_id(BYTE_TO_CHAR[0x80])])
    cases.append([1, 2, 0])
    return [c for c in cases if c]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_TO_CHAR = bytes_to_unicode()


def hexs(text):
    return text.encode("utf-8").hex()


def write_dump(path, tok, meta):
    strings = test_strings()
    assert len(set(strings)) == len(strings), "duplicate test strings"
    renderer, render = chat_renderer(tok, meta["template"])
    lines = [f"# scripts/make_tokenizer_reference.py: tokenizers {__import__('tokenizers').__version__}, "
             f"{len(strings)} strings, chats rendered by {renderer}"]
    lossy = 0
    for text in strings:
        ids = tok.encode(text, add_special_tokens=False).ids
        lines += [f"case {hexs(text)}", "ids " + " ".join(map(str, ids))]
        decoded = tok.decode(ids, skip_special_tokens=False)
        if decoded != text:  # bytes without a token were dropped
            lines.append(f"decoded {hexs(decoded)}")
            lossy += 1
    chats = chat_cases()
    for messages, gen in chats:
        text = render(messages, gen)
        ids = tok.encode(text, add_special_tokens=False).ids
        lines.append(f"chat {len(messages)} {int(gen)}")
        lines += [f"msg {hexs(m['role'])} {hexs(m['content'])}" for m in messages]
        lines += [f"text {hexs(text)}", "ids " + " ".join(map(str, ids))]
    decodes = decode_cases(tok)
    for ids in decodes:
        lines += ["decode " + " ".join(map(str, ids)), f"text {hexs(tok.decode(ids, skip_special_tokens=False))}"]
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)
    print(f"{path}: {len(strings)} strings ({lossy} not round-tripping), {len(chats)} chats "
          f"(rendered by {renderer}), {len(decodes)} decodes", file=sys.stderr)


def bench(tok, path, reps, paragraphs, sgrt_bench, gguf_path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        text = f.read()
    inputs = text.split("\n\n") if paragraphs else [text]
    rates, ids = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        ids = [i for e in tok.encode_batch(inputs, add_special_tokens=False) for i in e.ids]
        rates.append(len(ids) / (time.perf_counter() - t0))
    crc = zlib.crc32(struct.pack(f"<{len(ids)}i", *ids))
    ours = None
    if sgrt_bench:
        cmd = [sgrt_bench, "--gguf", gguf_path, "--reps", str(reps)] + (["--paragraphs"] if paragraphs else [])
        out = subprocess.run(cmd + [path], check=True, capture_output=True, text=True).stdout
        ours = json.loads(out.strip().splitlines()[-1])
        print(json.dumps(ours))
    hf = {"impl": "hf_tokenizers", "version": __import__("tokenizers").__version__,
          "bytes": len(text.encode("utf-8")), "inputs": len(inputs), "tokens": len(ids), "ids_crc32": crc,
          "reps": reps,
          "tokens_per_s": round(statistics.median(rates))}
    print(json.dumps(hf))
    if ours:
        print(json.dumps({"file": os.path.basename(path), "paragraphs": paragraphs, "ratio_sgrt_over_hf":
                          round(ours["tokens_per_s"] / hf["tokens_per_s"], 2),
                          "ids_identical": ours["ids_crc32"] == crc and ours["tokens"] == len(ids)}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", default=default_gguf())
    ap.add_argument("-o", "--out", default="tests/data/tokenizer_reference.txt")
    ap.add_argument("--bench", help="encode this text file and print tokens/s")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--paragraphs", action="store_true", help="bench: encode each paragraph on its own")
    ap.add_argument("--sgrt-bench", help="sgrt's bench_tokenizer, run first on the same file")
    args = ap.parse_args()
    meta = read_gguf(args.gguf)
    tok = build_reference(meta)
    if args.bench:
        bench(tok, args.bench, args.reps, args.paragraphs, args.sgrt_bench, args.gguf)
        return 0
    write_dump(args.out, tok, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
