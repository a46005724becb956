//! Builds the C library from the repository this crate lives in, with the project's own CMake
//! build (one list of sources, one set of flags: those of the top-level CMakeLists.txt), into
//! OUT_DIR, and links the static archive.
//!
//! Which archive: by default `magpie_core`, the allocator under its magpie_* names only, so the
//! Rust heap is magpie (through `magpie::Magpie`) and C code in the process keeps glibc's malloc;
//! a pointer never crosses between the two because Rust frees only what its allocator returned.
//! With the `override` feature, `libmagpie.a` whole: its interposed malloc, free and C++
//! operators replace the system allocator for the entire process, as they do when a C program
//! links libmagpie.a; whole-archive so that this does not depend on link order (and not bundled
//! into the rlib, which rustc before 1.64 refuses with whole-archive: the final link reads the
//! archive from OUT_DIR). The C++ operators reference the C++ runtime only weakly, so neither
//! archive needs libstdc++.
//!
//! The CMake build directory persists in OUT_DIR: a rebuild after a change in src/ or include/
//! recompiles only what changed.
use std::env;
use std::path::PathBuf;
use std::process::Command;

fn run(cmd: &mut Command) {
    // The jobs come from -j below; a make above cargo (ctest under `make test`) must not hand
    // its jobserver down to CMake's make.
    cmd.env_remove("MAKEFLAGS").env_remove("MFLAGS").env_remove("MAKELEVEL");
    let status = cmd.status().unwrap_or_else(|e| {
        panic!("magpie-sys: cannot run {:?}: {} (is cmake installed?)", cmd, e)
    });
    assert!(status.success(), "magpie-sys: {:?} failed: {}", cmd, status);
}

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.join("../../..").canonicalize().unwrap();
    let header = root.join("include/magpie.h");
    assert!(
        header.is_file(),
        "magpie-sys: no {} (the crate builds magpie from the repository around it)",
        header.display()
    );
    for input in ["src", "include", "CMakeLists.txt"] {
        println!("cargo:rerun-if-changed={}", root.join(input).display());
    }
    println!("cargo:rerun-if-env-changed=CC");

    let build = PathBuf::from(env::var_os("OUT_DIR").unwrap()).join("cmake");
    // Configured every time the script runs (when the C sources changed): a second configure
    // takes a second, and it repairs a build directory that an interrupted one left behind.
    run(Command::new("cmake")
        .arg("-S")
        .arg(&root)
        .arg("-B")
        .arg(&build)
        .arg("-DCMAKE_BUILD_TYPE=RelWithDebInfo"));
    let whole = env::var_os("CARGO_FEATURE_OVERRIDE").is_some();
    let (target, link) = if whole {
        ("magpie_static", "static:+whole-archive,-bundle=magpie")
    } else {
        ("magpie_core", "static=magpie_core")
    };
    let jobs = env::var("NUM_JOBS").unwrap_or_else(|_| "2".into());
    run(Command::new("cmake").arg("--build").arg(&build).args(["--target", target, "-j", &jobs]));

    println!("cargo:rustc-link-search=native={}", build.display());
    println!("cargo:rustc-link-lib={}", link);
    println!("cargo:rustc-link-lib=dylib=pthread");
    // For crates that compile C against magpie: DEP_MAGPIE_INCLUDE.
    println!("cargo:include={}", root.join("include").display());
}
