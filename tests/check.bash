# check.bash: sourced by the shell tests (tests/*.sh; this file is not one): the failure counter
# and check(), which prints "ok   NAME" or "FAIL NAME" for a status and counts the failures.
fails=0
check() { # check NAME CONDITION-STATUS
    if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
# need_torch: Debian's python3-torch (for /usr/bin/python3, whatever python3 is on PATH) or the
# end of the test: a failure under CI=true, else a skip (CTest's SKIP_RETURN_CODE 77).
need_torch() {
    /usr/bin/python3 -c "import torch" 2> /dev/null && return 0
    if [ "${CI:-}" = true ]; then
        echo "FAIL: CI=true but python3-torch is missing (scripts/setup.sh test installs it)"
        exit 1
    fi
    echo "SKIP: python3-torch is not installed (apt-get install python3-torch)"
    exit 77
}
