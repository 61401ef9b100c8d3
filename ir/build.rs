// Passes the target triple to the tests, which compile generated C with the `cc` crate.
fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rustc-env=GUARDLESS_TARGET={target}");
    println!("cargo:rerun-if-changed=build.rs");
}
