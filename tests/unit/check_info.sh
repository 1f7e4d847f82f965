#!/usr/bin/env bash
# `halcyon info -v` must list cpu:0 and give every configured backend a state, and a reason
# line for each one that is unavailable.  usage: check_info.sh HALCYON_BINARY BACKEND...
set -u
bin=$1
shift
out=$("$bin" info -v) || { echo "halcyon info -v failed"; exit 1; }
echo "$out"
echo "$out" | grep -q '^  cpu:0 ' || { echo "FAIL: cpu:0 is not listed"; exit 1; }
for b in "$@"; do
  line=$(echo "$out" | grep -nE "^  $b +(available|unavailable) " | head -n1)
  [ -n "$line" ] || { echo "FAIL: backend $b is not listed with a state"; exit 1; }
  n=${line%%:*}
  reason=$(echo "$out" | sed -n "$((n + 1))p" | sed 's/^ *//')
  [ -n "$reason" ] || { echo "FAIL: backend $b has no reason line"; exit 1; }
done
echo "info lists cpu:0 and explains: $*"
