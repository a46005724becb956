#!/bin/sh
# cargo test of the Rust binding, for ctest: TARGET_DIR is cargo's target directory. cargo is
# taken from PATH, else from rustup's ~/.cargo/bin (not on PATH in many CI shells, nor under
# sudo); without it the test is skipped. The workspace has no crates.io dependency, so it runs
# offline, and --locked keeps it to the committed Cargo.lock. The tests run twice: with the
# default link (magpie_* names only) and with the `override` feature (the whole process's malloc).
set -e
[ $# -eq 1 ] || { echo "usage: $0 TARGET_DIR" >&2; exit 2; }
cargo=$(command -v cargo || true)
home_cargo="${CARGO_HOME:-$HOME/.cargo}/bin/cargo"
[ -n "$cargo" ] || [ ! -x "$home_cargo" ] || cargo=$home_cargo
if [ -z "$cargo" ]; then
  echo "SKIPPED: rust: no cargo on PATH nor in $home_cargo (install Rust to test the binding)"
  exit 77
fi
export CARGO_TARGET_DIR="$1"
manifest="$(dirname "$0")/Cargo.toml"
"$cargo" test --offline --locked --manifest-path "$manifest"
"$cargo" test --offline --locked --manifest-path "$manifest" --features override
