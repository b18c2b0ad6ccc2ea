//! Links libclade. The search path comes from CLADE_LIB_DIR (default: the
//! checkout's build/ folder, ../../build from this crate). An rpath to the
//! same folder is added to this package's binaries so `cargo test` runs
//! without LD_LIBRARY_PATH.
use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=CLADE_LIB_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let dir = match env::var("CLADE_LIB_DIR") {
        Ok(d) if !d.is_empty() => PathBuf::from(d),
        _ => manifest.join("../../build"),
    };
    let dir = dir.canonicalize().unwrap_or(dir);
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib=clade");
    // Every binary of this package (unit and integration tests, examples);
    // dependents set their own rpath or LD_LIBRARY_PATH.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    println!("cargo:lib_dir={}", dir.display());
}
