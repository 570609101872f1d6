# check.bash: sourced by the shell tests (tests/*.sh; this file is not one): the failure counter
# and check(), which prints "ok   NAME" or "FAIL NAME" for a status and counts the failures.
fails=0
check() { # check NAME CONDITION-STATUS
    if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
