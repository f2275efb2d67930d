# gates/lib.sh: what the gates share. Sourced by a gate, never run.
#
#   gate_init NAME         the gate's name, the repository root (cwd), a work dir
#   clink_path [SUBDIR]    the clink a gate runs: $CLINK_BIN when set (and no
#                          SUBDIR), else where cargo puts the release build
#                          (CARGO_TARGET_DIR honoured; SUBDIR: a separate target
#                          for test or defect builds, which CLINK_BIN never is)
#   build_clink [SUBDIR [FEATURES]]   the release clink: with CLINK_BIN set,
#                          only checked (check_release); else built with cargo,
#                          then checked. A SUBDIR or FEATURES build is a variant:
#                          always built with cargo, never checked as a release
#   clink_step             the name of the step that runs build_clink
#   in_variants CMD...     run CMD (a cargo build or test of a defect variant)
#                          with CARGO_TARGET_DIR the variants' own target
#                          directory, <target>/variants (started from
#                          <target>/debug by gates/seed-target the first time),
#                          holding its lock: the default build's target/debug/clink
#                          is never replaced by a variant, and a variant is copied
#                          aside (inside CMD) before the next one takes its name
#   reference_audit_path, build_reference_audit
#                          the same for clink-reference-audit and
#                          $CLINK_REFERENCE_AUDIT_BIN
#   check_release PROGRAM NAME   PROGRAM is an absolute path to a program that
#                          runs and whose --version says exactly NAME and this
#                          source's version (Cargo.toml): a test build or a
#                          defect variant says more, another version otherwise.
#                          (The profile does not show: a debug build with no
#                          test switches passes too.)
#   clink_bin_unused WHY   for a gate that never runs CLINK_BIN: says so
#   step NAME CMD...       run one step, its output to the log; after a failed
#                          step the remaining ones are skipped, not run
#   gate_finish            print the step summary and the verdict, exit with it:
#                          0 PASSED, 1 FAILED, 3 NOT ESTABLISHED (never a pass)
#
# CLINK_BIN (and CLINK_REFERENCE_AUDIT_BIN) name binaries built elsewhere, e.g.
# by Nix (the flake's apps set them to the package's bin/): gates that run the
# release clink then run that binary instead of building one. Gates that need
# another build (a defect variant, a test build, a prior release) build it with
# cargo whether or not CLINK_BIN is set.

# The repository root, for the gates that do not call gate_init.
GATE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

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
    if [[ -z "${1:-}" && -n "${CLINK_BIN:-}" ]]; then echo "$CLINK_BIN"; return; fi
    local base="${CARGO_TARGET_DIR:-$GATE_ROOT/target}"
    if [[ -n "${1:-}" ]]; then base="$base/$1"; fi
    echo "$base/release/clink"
}

build_clink() {
    local sub="${1:-}" features="${2:-}"
    if [[ -z "$sub$features" && -n "${CLINK_BIN:-}" ]]; then
        check_release "$CLINK_BIN" clink
        return
    fi
    local target="${CARGO_TARGET_DIR:-$GATE_ROOT/target}"
    if [[ -n "$sub" ]]; then target="$target/$sub"; fi
    CARGO_TARGET_DIR="$target" cargo build --release --quiet -p clink-harness --bin clink \
        ${features:+--features "$features"} || return 1
    if [[ -z "$sub$features" ]]; then check_release "$(clink_path)" clink; fi
}

in_variants() {
    local base="${CARGO_TARGET_DIR:-$GATE_ROOT/target}"
    mkdir -p "$base" || return 1
    (
        flock 9 || exit 1
        if [[ ! -e "$base/variants/debug" ]]; then
            "$GATE_ROOT/gates/seed-target" "$base/debug" "$base/variants/debug" >/dev/null 2>&1 || true
        fi
        CARGO_TARGET_DIR="$base/variants" "$@"
    ) 9>"$base/variants.lock"
}

clink_step() {
    if [[ -n "${CLINK_BIN:-}" ]]; then
        echo "check CLINK_BIN (runs, this version, no test build)"
    else
        echo "build clink (release)"
    fi
}

reference_audit_path() {
    if [[ -n "${CLINK_REFERENCE_AUDIT_BIN:-}" ]]; then echo "$CLINK_REFERENCE_AUDIT_BIN"; return; fi
    echo "${CARGO_TARGET_DIR:-$GATE_ROOT/target}/release/clink-reference-audit"
}

build_reference_audit() {
    if [[ -z "${CLINK_REFERENCE_AUDIT_BIN:-}" ]]; then
        CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$GATE_ROOT/target}" \
            cargo build --release --quiet -p clink-reference-audit --bin clink-reference-audit || return 1
    fi
    check_release "$(reference_audit_path)" clink-reference-audit
}

# This source's version: [workspace.package] version in Cargo.toml.
workspace_version() {
    awk '/^\[/ { pkg = ($0 == "[workspace.package]") }
         pkg && /^version[ \t]*=/ { sub(/^version[ \t]*=[ \t]*"/, ""); sub(/".*/, ""); print; exit }' \
        "$GATE_ROOT/Cargo.toml"
}

# A release build of this source is what a gate vouches for: positive
# evidence (its own --version, exactly), never the absence of a marker.
check_release() {
    local program="$1" name="$2" version said
    version="$(workspace_version)"
    if [[ -z "$version" ]]; then echo "cannot read the version from $GATE_ROOT/Cargo.toml"; return 1; fi
    if [[ "$program" != /* ]]; then echo "$program: not an absolute path"; return 1; fi
    if [[ ! -f "$program" || ! -x "$program" ]]; then echo "$program: no such program"; return 1; fi
    if ! said="$("$program" --version 2>&1)"; then echo "$program --version failed: $said"; return 1; fi
    if [[ "$said" != "$name $version" ]]; then
        echo "$program says '$said', not '$name $version': not a release build of this source (a test build or defect variant says so after the version)"
        return 1
    fi
    echo "$program: $said"
}

# For a gate that never runs CLINK_BIN: says so, when it is set.
clink_bin_unused() {
    if [[ -n "${CLINK_BIN:-}" ]]; then echo "${GATE_NAME:-gate}: CLINK_BIN ($CLINK_BIN) is not used: $1" >&2; fi
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
