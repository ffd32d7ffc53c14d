# Sourced by the bench scripts, from the repository root: sets $GAVEL, the absolute path of the
# gavel binary to run: $GAVEL_BIN when set (a build of one's own, an older one to compare),
# else a release build made here.
if [[ -z "${GAVEL_BIN:-}" ]]; then
    cargo build --quiet --release --bin gavel
    GAVEL_BIN=target/release/gavel
fi
GAVEL="$(realpath "$GAVEL_BIN")"
