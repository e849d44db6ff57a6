#!/usr/bin/env bash
# Two "machines" on one host (docs/distributed.md): 2 ranks in two network
# namespaces joined by a veth pair, OpenMPI over TCP only (no shared memory),
# mpirun in namespace A starting rank 1's daemon in namespace B through a
# launch agent that enters B instead of ssh. Passes when 2 ranks x batch 50
# follow 1 rank x batch 100 to rounding over 50 MLP steps (losses and final
# test loss) and the gradients crossed the veth.
#   usage: test_two_hosts.sh SGRT MPIRUN     (ctest: two_hosts)
# Exit 77 (ctest's skip) with one line where namespaces cannot be made.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 SGRT MPIRUN" >&2; exit 2; }
sgrt=$1 mpirun=$2
cd "$(dirname "$0")/.."

skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
command -v ip >/dev/null || skip "no ip command (iproute2)"

# Unique per run, so parallel runs do not clash; names of links fit in 15 characters.
ns_a=sgrt-a-$$ ns_b=sgrt-b-$$ veth_a=sga$$ veth_b=sgb$$
tmp=$(mktemp -d)
cleanup() {
  for ns in "$ns_a" "$ns_b"; do  # ranks or daemons a failure left behind, then the namespace and its link end
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP  # through the EXIT trap

ip netns add "$ns_a" 2>/dev/null && ip netns exec "$ns_a" true 2>/dev/null ||
  skip "network namespaces are not permitted here (ip netns add or exec failed)"
ip netns add "$ns_b"
ip link add "$veth_a" type veth peer name "$veth_b"
ip link set "$veth_a" netns "$ns_a"
ip link set "$veth_b" netns "$ns_b"
ip -n "$ns_a" addr add 10.99.0.1/24 dev "$veth_a"
ip -n "$ns_b" addr add 10.99.0.2/24 dev "$veth_b"
for end in "$ns_a $veth_a" "$ns_b $veth_b"; do
  set -- $end
  ip -n "$1" link set lo up
  ip -n "$1" link set "$2" up
done

# mpirun calls the agent as "AGENT HOST COMMAND...", as it would call ssh.
cat >"$tmp/agent" <<EOF
#!/bin/sh
[ "\$1" = 10.99.0.2 ] || { echo "agent: unknown host \$1" >&2; exit 1; }
shift
exec ip netns exec $ns_b sh -c "\$*"
EOF
chmod +x "$tmp/agent"

flags=(--set hidden=32 --steps 50 --log-every 10 --threads 1 --quiet)
"$sgrt" train models/fashion_mlp.lua "${flags[@]}" --set batch=100 --log "$tmp/one.jsonl" >/dev/null
# Under ASan (scripts/test.sh SANITIZE=1) OpenMPI's own allocations are reported
# as leaks at exit, as in test_data_parallel; other builds ignore the variable.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=detect_leaks=0
ip netns exec "$ns_a" "$mpirun" -np 2 -H 10.99.0.1:1,10.99.0.2:1 \
  --mca plm_rsh_agent "$tmp/agent" --mca plm_rsh_no_tree_spawn 1 \
  --mca btl tcp,self --mca btl_tcp_if_include 10.99.0.0/24 --mca oob_tcp_if_include 10.99.0.0/24 \
  "$sgrt" train models/fashion_mlp.lua "${flags[@]}" --set batch=50 --comm-timeout 20 --log "$tmp/two.jsonl" >/dev/null

values() { grep -o "\"$1\":[^,}]*" "$2" | cut -d: -f2; }
[ "$(values ranks "$tmp/two.jsonl" | head -1)" = 2 ] || { echo "FAIL: the run did not have 2 ranks"; exit 1; }
# 5 logged losses and the final test loss, each to 1e-5 relative.
paste <(values loss "$tmp/one.jsonl") <(values loss "$tmp/two.jsonl") | awk '
  { d = ($1 - $2) / $1; d = d < 0 ? -d : d; if (d > worst) worst = d; n++ }
  END { printf "2 ranks in 2 namespaces x batch 50 against 1 x 100: %d losses, largest relative difference %.2g\n", n, worst
        exit !(n == 6 && worst < 1e-5) }' || { echo "FAIL: the losses differ"; exit 1; }
# The gradients went over the veth: rank 1 sent at least its 50 steps' exchanges.
sent=$(ip -n "$ns_b" -s -j link show "$veth_b" | grep -o '"tx":{"bytes":[0-9]*' | grep -o '[0-9]*$')
need=$(( $(values comm_bytes "$tmp/two.jsonl" | head -1) * 50 ))
echo "rank 1 sent $sent bytes over the veth (its gradient exchanges: $need)"
[ "$sent" -ge "$need" ] || { echo "FAIL: the gradients did not cross the veth"; exit 1; }
