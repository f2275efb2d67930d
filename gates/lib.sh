# gates/lib.sh: what the gates share. Sourced by a gate, never run.
#
#   gate_init NAME         the gate's name, the repository root (cwd), a work dir
#   clink_path [SUBDIR]    where cargo puts the release clink (CARGO_TARGET_DIR
#                          honoured; SUBDIR: a separate target for test builds)
#   build_clink [SUBDIR [FEATURES]]   build it there
#   step NAME CMD...       run one step, its output to the log; after a failed
#                          step the remaining ones are skipped, not run
#   gate_finish            print the step summary and the verdict, exit with it:
#                          0 PASSED, 1 FAILED, 3 NOT ESTABLISHED (never a pass)

# The gate's leading comment block, as its --help.
gate_help() {
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$1"
}

gate_init() {
    GATE_NAME="$1"
    GATE_ROOT="$(cd "$(dirname "${BASH_SOURCE[1]}")/.." && pwd)"
    cd "$GATE_ROOT" || exit 2
    GATE_WORK="$(mktemp -d "${TMPDIR:-/tmp}/clink-$GATE_NAME.XXXXXX")"
    GATE_STATUS=0        # 0 passed, 1 failed, 3 not established
    GATE_STOPPED=0
    : >"$GATE_WORK/summary"
    : >"$GATE_WORK/log"
}

clink_path() {
    local base="${CARGO_TARGET_DIR:-$GATE_ROOT/target}"
    if [[ -n "${1:-}" ]]; then base="$base/$1"; fi
    echo "$base/release/clink"
}

build_clink() {
    local sub="${1:-}" features="${2:-}"
    local target="${CARGO_TARGET_DIR:-$GATE_ROOT/target}"
    if [[ -n "$sub" ]]; then target="$target/$sub"; fi
    CARGO_TARGET_DIR="$target" cargo build --release --quiet -p clink-harness --bin clink \
        ${features:+--features "$features"}
}

# The verdict of a step that could not establish anything (exit 3) is kept
# apart from a failure: the gate then ends NOT ESTABLISHED unless something failed.
step() {
    local name="$1"; shift
    if (( GATE_STOPPED )); then
        printf '%-52s %-9s\n' "$name" "skipped" | tee -a "$GATE_WORK/summary"
        return 1
    fi
    local start end verdict rc=0
    start=$(date +%s%N)
    echo "== $name" >>"$GATE_WORK/log"
    "$@" >>"$GATE_WORK/log" 2>&1 || rc=$?
    end=$(date +%s%N)
    case "$rc" in
        0) verdict=passed ;;
        3) verdict=UNAVAILABLE; (( GATE_STATUS == 0 )) && GATE_STATUS=3; GATE_STOPPED=1 ;;
        *) verdict=FAILED; GATE_STATUS=1; GATE_STOPPED=1 ;;
    esac
    local ms=$(( (end - start) / 1000000 ))
    printf '%-52s %-9s %4d.%03ds\n' "$name" "$verdict" $((ms / 1000)) $((ms % 1000)) | tee -a "$GATE_WORK/summary"
    [[ $verdict == passed ]]
}

gate_finish() {
    echo
    echo "$GATE_NAME: summary"
    cat "$GATE_WORK/summary"
    case "$GATE_STATUS" in
        0) echo "$GATE_NAME: PASSED" ;;
        3) echo "$GATE_NAME: NOT ESTABLISHED (exit 3): something required could not be checked; this is not a pass (log: $GATE_WORK/log)"
           tail -20 "$GATE_WORK/log" ;;
        *) echo "$GATE_NAME: FAILED (log: $GATE_WORK/log)"
           tail -40 "$GATE_WORK/log" ;;
    esac
    exit "$GATE_STATUS"
}

# Test-only settings make a run something other than what a gate vouches for.
refuse_test_settings() {
    local set
    set="$(env | grep -o '^CLINK_TEST_[A-Z_]*' | paste -sd' ')"
    if [[ -n "$set" ]]; then
        echo "$GATE_NAME: refused: test-only settings are set ($set); a gate runs the product as shipped" >&2
        exit 2
    fi
}
