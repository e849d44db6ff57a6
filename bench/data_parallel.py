"""Data-parallel step time and communication time per step, 1 rank against 2.

Runs `sgrt train` on the Fashion-MNIST MLP (models/fashion_mlp.lua, 784-500-10,
AdamW) with the same global batch everywhere: 1 rank x batch 2B, then 2 ranks x
batch B under mpirun for each --grad-comm mode, and fp32 with --zero 1. The
cores are shared out: the single rank gets --threads CORES, each of the 2 ranks
CORES / 2. Repetitions are interleaved (rep 1 of every case, then rep 2, ...).
Each run's figures are medians over its --log windows after the first (start-up
and the first steps excluded): step_s = global batch / samples_per_s and comm_s
(rank 0's seconds per step in the exchanges, waiting for the other rank
included). One JSON line per case: medians over the repetitions, comm_bytes per
rank per step, comm_share = comm_s / step_s, vs_1_rank = 1 rank's step_s /
this one's (> 1: faster than one rank), vs_fp32 = this step_s / 2-rank fp32's.
The load average is printed before and after (docs/distributed.md).

Usage: python3 bench/data_parallel.py [--sgrt build/tools/sgrt] [--mpirun mpirun]
         [--reps 3] [--steps 60] [--batch 100] [--cores 2] [--opt-level fp32]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile


def run(args, ranks, batch, flags, tmp):
    log = os.path.join(tmp, 'log.jsonl')
    if os.path.exists(log):
        os.remove(log)
    threads = max(1, args.cores // ranks)
    cmd = [args.sgrt, 'train', 'models/fashion_mlp.lua', '--set', 'batch=%d' % batch, '--steps', str(args.steps),
           '--log-every', '10', '--threads', str(threads), '--quiet', '--log', log, '--opt-level', args.opt_level] + flags
    env = dict(os.environ)
    if ranks > 1:
        # As root (CI containers), and 2 ranks on fewer cores than slots.
        env.update(OMPI_ALLOW_RUN_AS_ROOT='1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM='1', OMPI_MCA_rmaps_base_oversubscribe='1')
        cmd = [args.mpirun, '-np', str(ranks)] + cmd + ['--comm-timeout', '60']
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    steps = [json.loads(line) for line in open(log) if '"samples_per_s"' in line][1:]
    step_s = statistics.median(ranks * batch / s['samples_per_s'] for s in steps)
    comm_s = statistics.median(s.get('comm_s', 0.0) for s in steps)
    return step_s, comm_s, steps[-1].get('comm_bytes', 0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--sgrt', default='build/tools/sgrt')
    p.add_argument('--mpirun', default='mpirun')
    p.add_argument('--reps', type=int, default=3)
    p.add_argument('--steps', type=int, default=60)
    p.add_argument('--batch', type=int, default=100, help="each of 2 ranks' batch; 1 rank takes twice it")
    p.add_argument('--cores', type=int, default=2)
    p.add_argument('--opt-level', default='fp32')
    args = p.parse_args()
    cases = [('1 rank', 1, 2 * args.batch, [])]
    cases += [('2 ranks, %s' % m, 2, args.batch, ['--grad-comm', m]) for m in ('fp32', 'bf16', 'fp8')]
    cases += [('2 ranks, fp32, zero 1', 2, args.batch, ['--zero', '1'])]
    print(json.dumps({'load_before': os.getloadavg()[0]}))
    got = {c[0]: [] for c in cases}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.reps):
            for name, ranks, batch, flags in cases:
                got[name].append(run(args, ranks, batch, flags, tmp))
    med = {n: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v), v[-1][2]) for n, v in got.items()}
    for name, ranks, batch, _ in cases:
        step_s, comm_s, comm_bytes = med[name]
        print(json.dumps({'case': name, 'ranks': ranks, 'batch_per_rank': batch, 'opt_level': args.opt_level,
                          'step_s': round(step_s, 5), 'comm_s': round(comm_s, 5), 'comm_bytes': comm_bytes,
                          'comm_share': round(comm_s / step_s, 3), 'vs_1_rank': round(med['1 rank'][0] / step_s, 3),
                          'vs_fp32': round(step_s / med['2 ranks, fp32'][0], 3) if ranks > 1 else None}))
    print(json.dumps({'load_after': os.getloadavg()[0]}))


if __name__ == '__main__':
    main()
