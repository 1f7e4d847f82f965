# Sourced by the bench/*_gpu_run.sh scripts (one GPU-machine call each): the environment they
# share. Sets OUT (made), deps (the carried .devdeps/usr: fmt, doctest, dlpack) and the library
# path to it, a fresh PTX JIT cache unless one is given, and unbuffered Python output.
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
deps=$PWD/.devdeps/usr
[ -d "$deps" ] && export LD_LIBRARY_PATH=$deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The halcyon CLI maps HALCYON_CACHE_DIR to the backend option cuda.cache_dir=<dir>/ptx (the
# libraries read no environment: tools/README.md); test programs run without a PTX cache.
export HALCYON_CACHE_DIR=${HALCYON_CACHE_DIR:-$(mktemp -d)}
export PYTHONUNBUFFERED=1
# TREE: the commit this copy was made from. A device copy is a `git archive` with a .commit file
# beside it and no history of its own, so `git log` there would print whatever checkout encloses it
# (or fail); only a real checkout's own HEAD counts.
if [ -f .commit ]; then TREE=$(cat .commit)
elif [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$PWD" ]; then TREE=$(git rev-parse HEAD)
else TREE="unknown (not a checkout, no .commit file)"; fi
export TREE
