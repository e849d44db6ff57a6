#!/usr/bin/python3
"""Loss curves of `sgrt train --log` runs, one per recipe, and the table of
final validation losses relative to the first run (Debian's python3-matplotlib).

    /usr/bin/python3 scripts/plot_gpt_curves.py -o docs/gpt_curves.png \
        fp32=/tmp/gpt_fp32.jsonl fp8=/tmp/gpt_fp8.jsonl fp4=/tmp/gpt_fp4.jsonl

Each log has one JSON object per logged step ("step", "loss": the training
batch's loss) and a final {"event": "done", "loss": validation loss}. Prints a
Markdown table (recipe, validation loss, difference to the first run).
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_log(path):
    steps, losses, final = [], [], None
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("event") == "done":
                final = rec["loss"]
            elif "event" not in rec:
                steps.append(rec["step"])
                losses.append(rec["loss"])
    if final is None:
        raise SystemExit(f"{path}: no final 'done' record (did the run finish?)")
    return steps, losses, final


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="RECIPE=LOG.jsonl")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    ap.add_argument("--title", default="GPT on the Jargon File (byte level)")
    args = ap.parse_args()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    rows = []
    for run in args.runs:
        name, path = run.split("=", 1)
        steps, losses, final = read_log(path)
        (line,) = ax.plot(steps, losses, label=f"{name} (validation {final:.3f})", linewidth=1.2)
        ax.scatter([steps[-1]], [final], color=line.get_color(), marker="o", zorder=3)
        rows.append((name, final))
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats per byte); dots: final validation loss")
    ax.set_title(args.title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.output)
    base = rows[0][1]
    print("| recipe | validation loss | vs " + rows[0][0] + " |")
    print("|---|---|---|")
    for name, final in rows:
        print(f"| {name} | {final:.4f} | {100 * (final - base) / base:+.2f}% |")


if __name__ == "__main__":
    main()
