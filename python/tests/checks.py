"""What the Python tests share: ok/FAIL lines, errors expected with a given text, and the
closing 'N passed, N failed' line with the exit status."""
import sys

import halcyon

_passed, _failed = [], []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    (_passed if cond else _failed).append(what)


def expect_error(fn, needle, what):
    try:
        fn()
    except (halcyon.HalcyonError, TypeError, ValueError) as e:
        check(needle in str(e), f"{what}: {e}")
        return
    check(False, f"{what}: no error")


def finish():
    print(f"{len(_passed)} passed, {len(_failed)} failed")
    sys.exit(1 if _failed else 0)
