#!/usr/bin/env bash
# Set up the project's virtual environment (first run, or when pyproject.toml changes)
# and run one of its entry points:
#   bash run.sh example   # examples/quickstart.py
#   bash run.sh example NAME   # examples/NAME.py (installs the optional example extras)
#   bash run.sh test      # the documentation build, the import layers, then the test suite (what CI runs)
#   bash run.sh docs      # the documentation site, into site/
#   bash run.sh bench     # benchmarks/per_iteration.py (installs the optional BlackJAX)
#   bash run.sh python …  # anything else inside the environment
set -euo pipefail
cd "$(dirname "$0")"

find_python() {
  # PyMC 6 needs Python >= 3.12. A version shim may exist and still fail to run, so
  # every candidate is asked to run before it is trusted.
  local candidates=(python3.13 python3.12 python3)
  if command -v pyenv >/dev/null 2>&1; then
    local root; root=$(pyenv root)
    for v in "$root"/versions/3.1[2-9]*; do candidates+=("$v/bin/python3"); done
  fi
  for c in "${candidates[@]}"; do
    if "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; then
      command -v "$c" 2>/dev/null || echo "$c"
      return 0
    fi
  done
  return 1
}

VENV=.venv
extras="test,docs"
[ "${1:-}" = "bench" ] && extras="test,docs,bench"
[ "${1:-}" = "example" ] && [ -n "${2:-}" ] && [ "$2" != quickstart ] && extras="test,docs,examples"
hash=$(sha1sum pyproject.toml | cut -c1-12)
stamp="$VENV/.installed-$hash-${extras//,/-}"
if [ ! -e "$stamp" ]; then
  if [ ! -x "$VENV/bin/python" ]; then
    py=$(find_python) || {
      echo "error: no Python >= 3.12 found (tried python3.13, python3.12, python3 and pyenv's versions)." >&2
      echo "Install Python 3.12 or newer (e.g. 'pyenv install 3.12') and run this again." >&2
      exit 1
    }
    echo "Creating $VENV with $py ($("$py" --version))"
    "$py" -m venv "$VENV"
  fi
  # uv installs the same releases as pip, sooner (~55 s against ~95 s, byte-compiled as
  # pip does, on a 2-core machine); pip is the fallback.
  if "$VENV/bin/python" -m pip install --quiet "uv>=0.5"; then
    "$VENV/bin/python" -m uv pip install --quiet --compile-bytecode \
      --python "$VENV/bin/python" -e ".[$extras]"
  else
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e ".[$extras]"
  fi
  find "$VENV" -maxdepth 1 -name '.installed-*' ! -name ".installed-$hash-*" -delete
  touch "$stamp"
fi

build_docs() {
  # --strict: a broken link or anchor, a page missing from the nav, or a docstring the
  # API generator cannot parse fails the build (see mkdocs.yml).
  NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict "$@"
}

cmd=${1:-test}
[ $# -gt 0 ] && shift
case "$cmd" in
  example) name=${1:-quickstart}; [ $# -gt 0 ] && shift
           exec "$VENV/bin/python" "examples/$name.py" "$@" ;;
  test)    site=$(mktemp -d)
           build_docs --site-dir "$site" || {
             rm -rf "$site"
             echo "error: the documentation does not build (see the warnings above)." >&2
             exit 1
           }
           rm -rf "$site"
           # The layers of docs/architecture.md (import-linter contracts in pyproject.toml).
           imports=$("$VENV/bin/lint-imports" --no-cache 2>&1) || {
             echo "$imports"
             echo "error: an import points up the layers (see docs/architecture.md)." >&2
             exit 1
           }
           exec "$VENV/bin/python" -m pytest -n 2 --dist loadfile -q "$@" ;;
  docs)    build_docs "$@" ;;
  bench)   exec "$VENV/bin/python" benchmarks/per_iteration.py "$@" ;;
  python)  exec "$VENV/bin/python" "$@" ;;
  *) echo "usage: bash run.sh {example|test|docs|bench|python ...}" >&2; exit 2 ;;
esac
