#!/usr/bin/env bash
# Start N `clade serve` replicas on loopback ports and Debian's nginx in
# front of them (a non-daemon nginx with its own config, pid and logs in a
# temporary folder; no system service is touched). Runs until interrupted
# (SIGINT/SIGTERM stop nginx and every replica).
#
# usage: run.sh N MODEL [--round-robin] [--port P] [--dir DIR] [--clade PATH]
#               [-- FLAGS FOR clade serve...]
#   --round-robin  plain round-robin instead of consistent hashing on the key
#   --port P       nginx's port on 127.0.0.1 (default: a free one)
#   --dir DIR      the folder for nginx.conf, upstream.conf, logs and the
#                  list of replicas (DIR/replicas: "INDEX PORT PID" lines)
#   --clade PATH   the clade executable (default: $CLADE, else clade on PATH)
# Prints "clade scale: nginx on http://127.0.0.1:P ..." once all are up.
# drain.sh DIR INDEX takes replica INDEX out (docs/scaling.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "run.sh: $*" >&2; exit 2; }
[ $# -ge 2 ] || die "usage: run.sh N MODEL [--round-robin] [--port P] [--dir DIR] [--clade PATH] [-- serve flags]"
n=$1 model=$2
shift 2
[[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] || die "N must be 1 to 64, not '$n'"
[ -f "$model" ] || die "no model file '$model'"
mode=hash port="" dir="" clade=${CLADE:-clade}
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --round-robin) mode=rr ;;
    --port) port=${2:?--port needs a value}; shift ;;
    --dir) dir=${2:?--dir needs a value}; shift ;;
    --clade) clade=${2:?--clade needs a value}; shift ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown option '$1'" ;;
  esac
  shift
done
nginx_bin=$(command -v nginx || true)
[ -n "$nginx_bin" ] || nginx_bin=/usr/sbin/nginx
[ -x "$nginx_bin" ] || die "nginx is not installed (apt-get install nginx-light)"
command -v "$clade" >/dev/null || die "no clade executable '$clade' (pass --clade PATH)"
py=/usr/bin/python3
[ -x $py ] || py=python3
free_port() { $py -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
[ -n "$port" ] || port=$(free_port)
[ -n "$dir" ] || dir=$(mktemp -d "${TMPDIR:-/tmp}/clade-scale.XXXXXX")
mkdir -p "$dir/tmp"
dir=$(cd "$dir" && pwd)
: > "$dir/replicas"
pids=()
nginx_pid=""
cleanup() {
  trap - EXIT INT TERM
  [ -n "$nginx_pid" ] && kill -TERM "$nginx_pid" 2>/dev/null || true
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 0' INT TERM

# The replicas, each on a free port that it picks itself (--port 0).
for ((i = 0; i < n; i++)); do
  "$clade" serve -m "$model" --host 127.0.0.1 --port 0 "${extra[@]}" 2> "$dir/replica-$i.log" &
  pids+=($!)
done
for ((i = 0; i < n; i++)); do
  p=""
  for _ in $(seq 600); do
    p=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$dir/replica-$i.log" | head -n1)
    [ -n "$p" ] && break
    kill -0 "${pids[$i]}" 2>/dev/null || die "replica $i did not start: $(cat "$dir/replica-$i.log")"
    sleep 0.1
  done
  [ -n "$p" ] || die "replica $i did not start in 60 s"
  echo "$i $p ${pids[$i]}" >> "$dir/replicas"
done

# upstream.conf: one server line a replica (drain.sh marks one down).
while read -r i p pid; do
  echo "server 127.0.0.1:$p max_fails=1 fail_timeout=2s;  # replica $i"
done < "$dir/replicas" > "$dir/upstream.conf"
if [ "$mode" = hash ]; then balance='hash $clade_key consistent;'; else balance='# round-robin (the default)'; fi
# nginx started as root drops its workers to this user: the same one, so
# that they can write the temporary folders.
user_line="user $(id -un) $(id -gn);"
[ "$(id -u)" = 0 ] || user_line="# (not root: workers run as $(id -un))"
sed -e "s|@DIR@|$dir|g" -e "s|@PORT@|$port|g" -e "s|@BALANCE@|$balance|" -e "s|@USER@|$user_line|" \
  "$here/nginx.conf.template" > "$dir/nginx.conf"
echo "$nginx_bin -p $dir/ -e $dir/error.log -c $dir/nginx.conf" > "$dir/nginx.cmd"
"$nginx_bin" -p "$dir/" -e "$dir/error.log" -c "$dir/nginx.conf" -t -q || die "nginx rejected $dir/nginx.conf"
"$nginx_bin" -p "$dir/" -e "$dir/error.log" -c "$dir/nginx.conf" -g 'daemon off;' &
nginx_pid=$!
for _ in $(seq 100); do
  $py -c "import socket,sys; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null && break
  kill -0 "$nginx_pid" 2>/dev/null || die "nginx did not start: $(cat "$dir/error.log")"
  sleep 0.1
done
echo "clade scale: nginx on http://127.0.0.1:$port in front of $n replicas ($([ $mode = hash ] && echo 'consistent hashing on X-Clade-Prefix-Key' || echo round-robin)), dir $dir"
wait "$nginx_pid"
