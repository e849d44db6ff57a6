"""Time and peak memory of the commands around a LoRA fine-tune's checkpoint.

For each sgrt binary given (e.g. the build before a change and the one after),
runs on SmolLM2-135M with models/smollm2_lora.lua, --threads THREADS:

  train   sgrt train --init-weights G --data DATA --steps 2 --checkpoint CK
  export  sgrt export --checkpoint CK --merge (a chat file: batch 1, block 1024,
          a KV cache, 64-token prefill chunks)
  run     sgrt run --checkpoint CK --chat --prompt ... --tokens 200
  eval    sgrt eval --checkpoint CK --data DATA

each under /usr/bin/time (wall seconds, peak RSS), the binaries alternating
round by round. Prints one JSON line per (binary, command): medians over the
rounds, or the error of a command the binary refuses; then whether every
binary's export is the same bytes and its run the same text, and the load
average before and after.

Usage: python3 bench/fine_tune_files.py --gguf G --data wordnet.jsonl
         [--rounds 3] [--threads 2] SGRT [SGRT ...]
"""
import argparse
import filecmp
import json
import os
import shutil
import statistics
import subprocess
import tempfile

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'models', 'smollm2_lora.lua')
PROMPT = 'What does "lucid" mean?'


def timed(cmd, out_path):
    """(seconds, peak KiB, stderr's last line) of cmd, or None and the error."""
    with open(out_path, 'w') as out:
        p = subprocess.run(['/usr/bin/time', '-f', 'TIME %e %M'] + cmd, stdout=out, stderr=subprocess.PIPE, text=True)
    lines = p.stderr.strip().splitlines()
    time_line = [l for l in lines if l.startswith('TIME ')][-1].split()
    if p.returncode != 0:
        return None, [l for l in lines if 'error' in l][-1:] or lines[-1:]
    return (float(time_line[1]), int(time_line[2])), None


def commands(sgrt, args, ck, tag, tmp):
    chat = os.path.join(tmp, 'chat_%s.sg' % tag)
    return {
        'train': [sgrt, 'train', MODEL, '--init-weights', args.gguf, '--data', args.data, '--steps', '2',
                  '--checkpoint', ck, '--threads', str(args.threads), '--quiet'],
        'export': [sgrt, 'export', MODEL, '--checkpoint', ck, '--merge', '--set', 'batch=1', '--set', 'block=1024',
                   '--set', 'kv_cache=true', '--set', 'prefill_chunk=64', '-o', chat],
        'run': [sgrt, 'run', MODEL, '--checkpoint', ck, '--chat', '--prompt', PROMPT, '--tokens', '200',
                '--threads', str(args.threads)],
        'eval': [sgrt, 'eval', MODEL, '--checkpoint', ck, '--data', args.data, '--threads', str(args.threads)],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--gguf', required=True)
    ap.add_argument('--data', required=True)
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('sgrt', nargs='+')
    args = ap.parse_args()
    print(json.dumps({'load_before': os.getloadavg()}))
    figures = {}  # (binary, command) -> list of (s, KiB) or an error
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for i, sgrt in enumerate(args.sgrt):
                ck = os.path.join(tmp, 'ck%d' % i)
                shutil.rmtree(ck, ignore_errors=True)
                for name, cmd in commands(sgrt, args, ck, str(i), tmp).items():
                    got, err = timed(cmd, os.path.join(tmp, '%s_%d.out' % (name, i)))
                    key = (sgrt, name)
                    if err is not None:
                        figures[key] = {'error': err}
                    elif not isinstance(figures.get(key), dict):
                        figures.setdefault(key, []).append(got)
        for (sgrt, name), v in figures.items():
            line = {'sgrt': sgrt, 'command': name}
            if isinstance(v, dict):
                line.update(v)
            else:
                line['seconds'] = statistics.median(s for s, _ in v)
                line['peak_mb'] = round(statistics.median(k for _, k in v) * 1024 / 1e6, 1)
            print(json.dumps(line))
        def same(pattern):  # None where a binary wrote no such file
            paths = [os.path.join(tmp, pattern % i) for i in range(len(args.sgrt))]
            if not all(os.path.exists(p) for p in paths):
                return None
            return all(filecmp.cmp(paths[0], p, shallow=False) for p in paths[1:])
        print(json.dumps({'exports_identical': same('chat_%d.sg'), 'run_text_identical': same('run_%d.out'),
                          'load_after': os.getloadavg()}))


if __name__ == '__main__':
    main()
