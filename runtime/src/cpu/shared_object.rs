//! The CPU backend's disk cache: a program's optimized kernels as a shared object, kept in the
//! kernel cache (`codegen::cache`, beside the NVRTC entries) under a key of the module's IR
//! before optimization, the host CPU and its features, and the LLVM and guardless versions. A
//! warm process loads it instead of running LLVM's optimizer and code generator.
//!
//! The object is linked by the system's C compiler driver (`$CC`, else `cc`): without one, or
//! when anything on the way fails, the program runs on LLVM's in-process JIT and the reason is
//! kept ([`CacheUse::Off`]). The math helpers (`gl_expf`, …) are Rust functions of this
//! process, which a shared object cannot link against: in the object, each helper the optimizer
//! left is a small function calling through a pointer (`gl_expf_address`) that the loader fills
//! in, so cached and JIT-compiled code compute the same values.

use std::path::Path;
use std::process::Command;

use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::targets::{FileType, TargetMachine};
use inkwell::values::BasicMetadataValueEnum;
use inkwell::AddressSpace;
use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use sha2::{Digest, Sha256};

use guardless_codegen::cache::Cache;

/// Marks an entry of this kind (and its format).
const MAGIC: &[u8; 8] = b"GLCPUSO1";
/// The cache file extension of these entries.
const EXTENSION: &str = "cpuso";

/// How a program's native code was obtained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheUse {
    /// Loaded from the disk cache: LLVM's optimizer and code generator did not run.
    Hit,
    /// Compiled, linked into a shared object, stored in the cache and loaded from it.
    Stored,
    /// Compiled by LLVM's in-process JIT, not cached; why.
    Off(String),
}

/// The key of a module: its IR text (before optimization), the target and its features, and
/// the versions of LLVM and of this crate (whose code generation the IR does not show).
pub fn key(module_ir: &str, machine: &TargetMachine) -> String {
    let (major, minor, patch) = inkwell::support::get_llvm_version();
    let mut h = Sha256::new();
    for part in [
        "guardless-cpu-shared-object-1",
        env!("CARGO_PKG_VERSION"),
        &format!("llvm {major}.{minor}.{patch}"),
        &machine.get_triple().as_str().to_string_lossy(),
        &machine.get_cpu().to_string(),
        &machine.get_feature_string().to_string_lossy(),
        module_ir,
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The global a helper's stand-in calls through.
fn address_global(helper: &str) -> String {
    format!("{helper}_address")
}

/// Defines each of `helpers` that `module` still declares as a function calling through its
/// address global; returns the helpers so defined.
fn define_helper_stand_ins<'c>(
    cx: &'c Context,
    module: &Module<'c>,
    helpers: &[&str],
) -> Result<Vec<String>, String> {
    let ptr = cx.ptr_type(AddressSpace::default());
    let builder = cx.create_builder();
    let mut defined = Vec::new();
    for &name in helpers {
        let Some(f) = module.get_function(name) else {
            continue;
        };
        if f.count_basic_blocks() > 0 {
            continue;
        }
        let global = module.add_global(ptr, None, &address_global(name));
        global.set_initializer(&ptr.const_null());
        // It now reads memory: the declaration's `memory(none)` would make that undefined.
        f.remove_enum_attribute(
            AttributeLoc::Function,
            Attribute::get_named_enum_kind_id("memory"),
        );
        f.set_linkage(Linkage::Internal);
        builder.position_at_end(cx.append_basic_block(f, "entry"));
        let target = builder
            .build_load(ptr, global.as_pointer_value(), "target")
            .map_err(|e| e.to_string())?
            .into_pointer_value();
        let args: Vec<BasicMetadataValueEnum> = f.get_param_iter().map(Into::into).collect();
        let call = builder
            .build_indirect_call(f.get_type(), target, &args, "value")
            .map_err(|e| e.to_string())?;
        call.set_tail_call(true);
        let value = call
            .try_as_basic_value()
            .basic()
            .ok_or("a helper returns a value")?;
        builder
            .build_return(Some(&value))
            .map_err(|e| e.to_string())?;
        defined.push(name.to_string());
    }
    Ok(defined)
}

/// Runs `$CC` (else `cc`) to link `object` into the shared object `out`.
fn link(object: &Path, out: &Path) -> Result<(), String> {
    let cc = std::env::var_os("CC")
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "cc".into());
    let run = Command::new(&cc)
        .arg("-shared")
        .arg("-o")
        .arg(out)
        .arg(object)
        .output()
        .map_err(|e| format!("running the linker {}: {e}", cc.to_string_lossy()))?;
    if !run.status.success() {
        return Err(format!(
            "the linker {} failed ({}): {}",
            cc.to_string_lossy(),
            run.status,
            String::from_utf8_lossy(&run.stderr).trim()
        ));
    }
    Ok(())
}

/// The optimized `module` (left as it is) as a shared object: the helpers' stand-ins defined in
/// a copy, compiled by `machine` (position-independent) and linked.
pub fn build<'c>(
    cx: &'c Context,
    module: &Module<'c>,
    machine: &TargetMachine,
    helpers: &[&str],
    cache: &Cache,
) -> Result<Vec<u8>, String> {
    let copy = module.clone();
    define_helper_stand_ins(cx, &copy, helpers)?;
    copy.verify().map_err(|e| e.to_string())?;
    let object = machine
        .write_to_memory_buffer(&copy, FileType::Object)
        .map_err(|e| format!("LLVM's code generator: {e}"))?;
    let paths = (
        cache.scratch_path("object", "o"),
        cache.scratch_path("shared", "so"),
    );
    let (Ok(Some(o)), Ok(Some(so))) = paths else {
        return Err("the cache's directory cannot be written".into());
    };
    let result = std::fs::write(&o, object.as_slice())
        .map_err(|e| format!("writing {}: {e}", o.display()))
        .and_then(|()| link(&o, &so))
        .and_then(|()| std::fs::read(&so).map_err(|e| format!("reading {}: {e}", so.display())));
    let _ = std::fs::remove_file(&o);
    let _ = std::fs::remove_file(&so);
    result
}

/// Stores a shared object under `key`.
pub fn store(cache: &Cache, key: &str, shared_object: &[u8]) -> std::io::Result<()> {
    cache.put_parts(key, EXTENSION, MAGIC, &[shared_object])
}

/// The shared object stored under `key`, if any, intact and its own.
pub fn lookup(cache: &Cache, key: &str) -> Option<Vec<u8>> {
    cache.get_parts(key, EXTENSION, MAGIC, 1)?.pop()
}

/// A loaded shared object: its functions' addresses by name.
pub struct Loaded {
    /// Unloaded when dropped: the functions' addresses are valid while this lives.
    _library: Library,
    pub addresses: rustc_hash::FxHashMap<String, usize>,
}

/// Loads `shared_object` (through a file of its own in the cache's directory — or, where that
/// cannot be written, the temporary directory — removed once loaded), points each helper
/// stand-in's global at `helpers`' address, and finds `functions`. An error when any step fails
/// (a corrupt or foreign object is not used).
pub fn load(
    cache: &Cache,
    shared_object: &[u8],
    helpers: &[(&str, usize)],
    functions: &[String],
) -> Result<Loaded, String> {
    let write = |path: &Path| std::fs::write(path, shared_object).map(|()| path.to_path_buf());
    let path = match cache.scratch_path("load", "so") {
        Ok(Some(p)) => write(&p),
        _ => Err(std::io::ErrorKind::NotFound.into()),
    }
    .or_else(|_| {
        write(
            &Cache::new(std::env::temp_dir())
                .scratch_path("load", "so")?
                .expect("a directory"),
        )
    })
    .map_err(|e| format!("writing the shared object to load it: {e}"))?;
    // RTLD_NOW: an undefined symbol is an error here, not a crash at the first call.
    let library = unsafe { Library::open(Some(&path), RTLD_NOW | RTLD_LOCAL) };
    let _ = std::fs::remove_file(&path);
    let library = library.map_err(|e| format!("loading the shared object: {e}"))?;
    for &(name, address) in helpers {
        let global = address_global(name);
        // Only the helpers the optimizer left have a stand-in.
        if let Ok(slot) = unsafe { library.get::<*mut usize>(global.as_bytes()) } {
            unsafe { (*slot).write(address) };
        }
    }
    let mut addresses = rustc_hash::FxHashMap::default();
    for name in functions {
        let f = unsafe { library.get::<*const u8>(name.as_bytes()) }
            .map_err(|e| format!("the shared object lacks {name}: {e}"))?;
        addresses.insert(name.clone(), *f as usize);
    }
    Ok(Loaded {
        _library: library,
        addresses,
    })
}
