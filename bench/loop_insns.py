"""Instructions per element of each function's main loop, from objdump listings.

The main loop of a function is closed by its first branch back to an earlier
address; its instructions are the listing's lines from the target to the branch
(AArch64 and x86-64 alike). The printed address range lets one check it in the
listing. No timing: the counts are static.

Usage: loop_insns.py LABEL=LISTING ... -- NAME[:E1,E2,...] ...
  E1, E2, ...: elements per iteration of NAME's loop in each listing, in the
  listings' order (default 4 for all).
"""
import re
import sys


def loops(path):
    """{function: (instructions, start, end)} of each function's first backward branch."""
    out, fn, done, addrs = {}, None, False, []
    for line in open(path):
        m = re.match(r'^[0-9a-f]+ <(.*)>:$', line)
        if m:
            fn, done, addrs = m.group(1), False, []
            continue
        m = re.match(r'^ *([0-9a-f]+):\t(\S+)', line)
        if not fn or done or not m:
            continue
        addrs.append(int(m.group(1), 16))
        t = re.search(r'[\s,]([0-9a-f]+) <', line)
        if t and re.match(r'^(b\.|cbn?z|tbn?z|b$|j[a-z]+$)', m.group(2)) and int(t.group(1), 16) < addrs[-1]:
            tgt = int(t.group(1), 16)
            out[fn], done = (sum(1 for a in addrs if a >= tgt), tgt, addrs[-1]), True
    return out


def main(argv):
    sep = argv.index('--')
    listings = [a.split('=', 1) for a in argv[:sep]]
    tables = [(label, loops(path)) for label, path in listings]
    print(f"{'loop':<12}" + ''.join(f" {label + ' insns (per element)':>36}" for label, _ in tables))
    for spec in argv[sep + 1:]:
        name, _, elems = spec.partition(':')
        per = [int(e) for e in elems.split(',')] if elems else [4] * len(tables)
        cells = []
        for (label, table), e in zip(tables, per):
            (n, a, b), = [v for k, v in table.items() if re.match(rf'(_ZN.*\d{name}E|.*\b{name}\()', k)]
            cells.append(f"{n} / {e} ({n / e:.2f}) at {a:x}-{b:x}")
        print(f"{name:<12}" + ''.join(f" {c:>36}" for c in cells))


if __name__ == '__main__':
    main(sys.argv[1:])
