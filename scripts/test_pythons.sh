#!/usr/bin/env bash
# test_pythons.sh - the test suite under each of several Python interpreters.
#
# Usage (from anywhere):
#     scripts/test_pythons.sh python3.9 /opt/py313/bin/python3 ...   # these interpreters
#     scripts/test_pythons.sh                  # every ~/.pyenv/versions/3.*/bin/python (3.9+)
#     scripts/test_pythons.sh PY -- -k batch   # arguments after -- go to pytest
#
# What it does, for each interpreter: clones this repository's committed HEAD into a
# temporary directory (so the in-tree builds of one version never meet another's), makes a
# venv there, runs the README's test command (`pip install -e ".[test]" && python -m pytest
# -q`) and prints one line: the interpreter, its version and pytest's summary.  Each log is
# kept under $TEST_PYTHONS_LOGS (default: a new temporary directory, printed at the end).
# The vocabularies and corpora are found as the tests find them (../shared next to this
# checkout, or $BPE_CFFI_VOCAB_DIR / $BPE_CFFI_CORPORA_DIR), passed on as absolute paths.
# Exit status: nonzero if any interpreter's install or tests failed.
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
LOGS="${TEST_PYTHONS_LOGS:-$(mktemp -d)}"
mkdir -p "$LOGS"
export BPE_CFFI_VOCAB_DIR="${BPE_CFFI_VOCAB_DIR:-$ROOT/../shared/vocab}"
export BPE_CFFI_CORPORA_DIR="${BPE_CFFI_CORPORA_DIR:-$ROOT/../shared/corpora}"
[ -d "$BPE_CFFI_VOCAB_DIR" ] && BPE_CFFI_VOCAB_DIR="$(cd "$BPE_CFFI_VOCAB_DIR" && pwd)"
[ -d "$BPE_CFFI_CORPORA_DIR" ] && BPE_CFFI_CORPORA_DIR="$(cd "$BPE_CFFI_CORPORA_DIR" && pwd)"

pythons=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    pythons+=("$1")
    shift
done
[ "${1:-}" = "--" ] && shift
if [ ${#pythons[@]} -eq 0 ]; then
    for p in "$HOME"/.pyenv/versions/3.*/bin/python; do
        [ -x "$p" ] && "$p" -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null &&
            pythons+=("$p")
    done
fi
if [ ${#pythons[@]} -eq 0 ]; then
    echo "test_pythons.sh: no interpreter given and none found under ~/.pyenv/versions" >&2
    exit 2
fi

failed=0
for py in "${pythons[@]}"; do
    version="$("$py" -c 'import platform; print(platform.python_version())' 2>/dev/null)"
    if [ -z "$version" ]; then
        echo "$py: cannot run it"
        failed=1
        continue
    fi
    work="$(mktemp -d)"
    log="$LOGS/python-$version.log"
    (
        set -e
        git clone -q "$ROOT" "$work/src"
        cd "$work/src"
        "$py" -m venv "$work/venv"
        . "$work/venv/bin/activate"
        python -m pip install --quiet --upgrade pip
        pip install --quiet -e ".[test]" && python -m pytest -q -p no:cacheprovider "$@"
    ) >"$log" 2>&1
    status=$?
    echo "$py (Python $version): $(tail -n 1 "$log")"
    [ $status -ne 0 ] && failed=1
    rm -rf "$work"
done
echo "logs: $LOGS"
exit $failed
