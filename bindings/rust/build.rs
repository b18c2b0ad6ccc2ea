//! Links libclade, found (std only) in the first of:
//!   1. CLADE_LIB_DIR, a folder holding libclade.so;
//!   2. `pkg-config --variable=libdir clade` (the pkg-config program, run
//!      here: an install to /usr/local, or a private prefix through
//!      PKG_CONFIG_PATH);
//!   3. the checkout's build/ folder (../../build from this crate);
//! else the linker's default folders.
//!
//! This package's own binaries (tests, examples) get an rpath to that
//! folder. Cargo passes a dependency's link arguments to no one else, so a
//! dependent gets the folder as DEP_CLADE_LIB_DIR (this crate `links =
//! "clade"`) and records it in its binaries with a two-line build.rs:
//!
//! ```ignore
//! let dir = std::env::var("DEP_CLADE_LIB_DIR").unwrap();
//! println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
//! ```
//!
//! (nothing is needed for a library the loader finds itself: /usr/local
//! after `ldconfig`). README: Install, Bindings.
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn pkg_config_libdir() -> Option<PathBuf> {
    let out = Command::new(env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into()))
        .args(["--variable=libdir", "clade"])
        .output()
        .ok()?;
    let dir = String::from_utf8(out.stdout).ok()?.trim().to_string();
    if out.status.success() && !dir.is_empty() {
        Some(PathBuf::from(dir))
    } else {
        None
    }
}

fn main() {
    for var in ["CLADE_LIB_DIR", "PKG_CONFIG", "PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let checkout = manifest.join("../../build");
    let dir = match env::var("CLADE_LIB_DIR") {
        Ok(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => pkg_config_libdir().or_else(|| checkout.join("libclade.so").exists().then_some(checkout)),
    };
    println!("cargo:rustc-link-lib=dylib=clade");
    let Some(dir) = dir else {
        println!("cargo:warning=libclade not found through CLADE_LIB_DIR, pkg-config or ../../build: linking with -lclade from the linker's default folders");
        return;
    };
    let dir = dir.canonicalize().unwrap_or(dir);
    if !Path::new(&dir).join("libclade.so").exists() {
        println!("cargo:warning=no libclade.so in {}", dir.display());
    }
    println!("cargo:rustc-link-search=native={}", dir.display());
    // Every binary of this package (unit and integration tests, examples).
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    println!("cargo:lib_dir={}", dir.display());
}
