//! The symbolic engine on what a compiler meets in `torch.split` + `torch.cat` with data-dependent
//! sizes: declare the sizes, record the asserts the graph carries, and ask guard-free questions.
//!
//! Run: `cargo run --example split_cat`

use guardless::ir::sym::{CPrinter, ShapeEnv, SymError};

fn main() -> Result<(), SymError> {
    let mut env = ShapeEnv::new();
    // A backed batch dimension (example value 512) and three unbacked split sizes.
    env.backed("s0", 512, Some(2), Some(65536))?;
    for name in ["u0", "u1", "u2"] {
        env.unbacked_size(name, None, None, None)?;
    }
    env.unbacked_size("u3", None, Some(1 << 20), Some(4096))?; // num_tokens, with a user hint

    // What split_with_sizes asserts, and a user's divisibility promise.
    env.check_text("u0 + u1 + u2 == s0")?;
    env.check_text("u3 % 16 == 0")?;
    env.check_text("u3 <= s0*128")?;

    let show = |env: &mut ShapeEnv, text: &str| -> Result<(), SymError> {
        let e = env.parse(text)?;
        let s = env.simplify(e);
        println!(
            "{text:<28} = {:<24} range {:<22} hint {}",
            env.text(s),
            env.bound(e).to_string(),
            env.optimization_hint(e)
        );
        Ok(())
    };
    show(&mut env, "u0 + u1 + u2")?;
    show(&mut env, "s0 - u0 - u1")?;
    show(&mut env, "(4*u3 + 64)//16")?;
    show(&mut env, "u3 % 8")?;
    show(&mut env, "Max(1, u3)*4096")?;

    let cond = env.parse("u2 == 0")?;
    println!(
        "guard_or_false(u2 == 0)      = {} (an unbacked size: no guard, no error)",
        env.guard_or_false(cond)
    );
    let cond = env.parse("s0 > 256")?;
    println!(
        "guard_or_false(s0 > 256)     = {} (backed: decided by the hint, guarded)",
        env.guard_or_false(cond)
    );
    let u3 = env.parse("u3*4096")?;
    println!(
        "multiple of 16 (vectorize)   = {}",
        env.statically_known_multiple_of(u3, 16)
    );
    println!("fits in i32 (index type)     = {}", env.fits_in_i32(u3));
    let idx = env.parse("(u3*4096 + s0) // 8 % 512")?;
    println!(
        "as C                         = {}",
        env.to_c(idx, &CPrinter::c_i64())
    );
    let guards: Vec<String> = env.guards().iter().map(|g| env.text(g.cond)).collect();
    let asserts: Vec<String> = env.runtime_asserts().iter().map(|&a| env.text(a)).collect();
    println!("guards: {guards:?}");
    println!("deferred runtime asserts: {asserts:?}");
    Ok(())
}
