#!/usr/bin/python3
"""Curves of `sgrt train --log` runs, one per run, and the table of their final
values relative to the first run. Needs Debian's python3-matplotlib
(scripts/setup.sh installs it).

    /usr/bin/python3 scripts/plot_gpt_curves.py -o docs/gpt_curves.png \
        fp32=/tmp/gpt_fp32.jsonl fp8=/tmp/gpt_fp8.jsonl fp4=/tmp/gpt_fp4.jsonl
    /usr/bin/python3 scripts/plot_gpt_curves.py -o acc.png --metric accuracy mlp=log.jsonl

A log has one JSON object per logged step ("step", "loss": the training
batch's loss, ...), an {"event": "eval", ...} object per held-out evaluation
and a final {"event": "done", ...} with the test metrics. The y axis is the
metric's name as the log spells it; lines are the logged steps (where the log
has the metric), dots the held-out evaluations, a star the final one. Values a
run wrote as null (NaN or infinite) are left out. Prints one line per run with
what it drew, then a Markdown table of the final values.
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_log(path, metric):
    steps, values, evals, final, split = [], [], [], None, "test"
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{n}: not JSON: {e}")
            value = rec.get(metric)
            event = rec.get("event")
            if event == "done":
                final = value
            elif event == "eval":
                split = rec.get("split", "test")
                if value is not None:
                    evals.append((rec["step"], value))
            elif value is not None:
                steps.append(rec["step"])
                values.append(value)
    if final is None:
        raise SystemExit(f"{path}: no final 'done' record with '{metric}' (did the run finish?)")
    return steps, values, evals, final, split


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="NAME=LOG.jsonl")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    ap.add_argument("--metric", default="loss", help="the log field to draw (default: loss)")
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    rows = []
    for run in args.runs:
        name, path = run.split("=", 1)
        steps, values, evals, final, split = read_log(path, args.metric)
        color = None
        if steps:
            (line,) = ax.plot(steps, values, label=f"{name} (final {final:.4g})", linewidth=1.2)
            color = line.get_color()
        if evals:
            dots = ax.scatter([s for s, _ in evals], [v for _, v in evals], color=color, marker="o", s=14, zorder=3,
                              label=None if steps else f"{name} (final {final:.4g})")
            color = dots.get_facecolor()[0]
        end = max(steps + [s for s, _ in evals], default=0)
        ax.scatter([end], [final], color=color, marker="*", s=80, zorder=4)
        print(f"{name}: {len(steps)} logged steps, {len(evals)} {split} evaluations, final {args.metric} {final:.6g}")
        rows.append((name, final))
    ax.set_xlabel("step")
    ax.set_ylabel(f"{args.metric} (lines: logged steps; dots: held-out; star: final)")
    if args.title:
        ax.set_title(args.title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.output)
    base = rows[0][1]
    print(f"| run | final {args.metric} | vs {rows[0][0]} |")
    print("|---|---|---|")
    for name, final in rows:
        change = f"{100 * (final - base) / base:+.2f}%" if base else ""
        print(f"| {name} | {final:.4f} | {change} |")


if __name__ == "__main__":
    main()
