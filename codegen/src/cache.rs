//! The persistent kernel cache: NVRTC results keyed by a SHA-256 of the source, the options, the
//! NVRTC version and the architecture. An entry is written to a temporary file and renamed into
//! place, so concurrent processes never read a partial entry. An entry holds its own key and a
//! checksum of key and contents, and its PTX must define every kernel the source declares: an
//! entry copied over another's file, a corrupt or truncated one, is recompiled (and replaced),
//! never trusted. Entries are read only from regular files (no symbolic links, devices or pipes)
//! of at most `MAX_ENTRY_BYTES`.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::nvrtc::{self, Compiled, NvrtcError};

const MAGIC: &[u8; 8] = b"GLCACHE2";

/// The largest entry read (a CUBIN of a whole model is a few MB).
pub const MAX_ENTRY_BYTES: u64 = 512 << 20;

/// The disk cache, in a directory; or none (every compile runs NVRTC).
pub struct Cache {
    dir: Option<PathBuf>,
}

/// Where the cache lives: `$GUARDLESS_CACHE_DIR` (set but empty: no disk cache), else
/// `$XDG_CACHE_HOME/guardless`, else `~/.cache/guardless`; none when none of them is set.
pub fn default_dir() -> Option<PathBuf> {
    let set = |v: &str| std::env::var_os(v).filter(|d| !d.is_empty());
    if let Some(d) = std::env::var_os("GUARDLESS_CACHE_DIR") {
        return (!d.is_empty()).then(|| PathBuf::from(d));
    }
    if let Some(d) = set("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("guardless"));
    }
    set("HOME").map(|h| PathBuf::from(h).join(".cache").join("guardless"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The key of a compilation.
pub fn key(source: &str, options: &[String], nvrtc_version: (i32, i32), arch: &str) -> String {
    let mut h = Sha256::new();
    for part in [source.as_bytes(), arch.as_bytes()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    for o in options {
        h.update((o.len() as u64).to_le_bytes());
        h.update(o.as_bytes());
    }
    h.update(nvrtc_version.0.to_le_bytes());
    h.update(nvrtc_version.1.to_le_bytes());
    hex(&h.finalize())
}

/// An entry: `magic`, a SHA-256 of what follows, then the key and each part, length-prefixed.
fn encode_parts(magic: &[u8; 8], key: &str, parts: &[&[u8]]) -> Vec<u8> {
    let mut payload = Vec::new();
    for part in std::iter::once(key.as_bytes()).chain(parts.iter().copied()) {
        payload.extend((part.len() as u64).to_le_bytes());
        payload.extend(part);
    }
    let mut out = magic.to_vec();
    out.extend(Sha256::digest(&payload));
    out.extend(payload);
    out
}

/// The `count` parts of the entry in `bytes` if it is intact, of kind `magic` and the entry of
/// `key`.
fn decode_parts(magic: &[u8; 8], key: &str, bytes: &[u8], count: usize) -> Option<Vec<Vec<u8>>> {
    let rest = bytes.strip_prefix(magic)?;
    if rest.len() < 32 {
        return None;
    }
    let (sum, payload) = rest.split_at(32);
    if Sha256::digest(payload)[..] != *sum {
        return None;
    }
    let mut parts = Vec::new();
    let mut at = payload;
    for _ in 0..=count {
        let (len, tail) = at.split_at_checked(8)?;
        let len = u64::from_le_bytes(len.try_into().ok()?) as usize;
        let (part, tail) = tail.split_at_checked(len)?;
        parts.push(part.to_vec());
        at = tail;
    }
    if !at.is_empty() || parts[0] != key.as_bytes() {
        return None;
    }
    parts.remove(0);
    Some(parts)
}

/// An NVRTC entry: the CUBIN, PTX and log.
fn encode(key: &str, c: &Compiled) -> Vec<u8> {
    encode_parts(
        MAGIC,
        key,
        &[&c.cubin[..], c.ptx.as_bytes(), c.log.as_bytes()],
    )
}

/// The NVRTC entry in `bytes` if it is intact and is the entry of `key`.
fn decode(key: &str, bytes: &[u8]) -> Option<Compiled> {
    let mut parts = decode_parts(MAGIC, key, bytes, 3)?;
    let log = String::from_utf8(parts.pop()?).ok()?;
    let ptx = String::from_utf8(parts.pop()?).ok()?;
    let cubin = parts.pop()?;
    Some(Compiled {
        kernels: nvrtc::resources(&log),
        cubin,
        ptx,
        log,
    })
}

/// The names of the kernels (`extern "C" __global__` functions) `source` defines.
pub fn kernel_names(source: &str) -> Vec<&str> {
    source
        .lines()
        .filter_map(|l| l.strip_prefix("extern \"C\" __global__ void "))
        .filter_map(|l| {
            // After `__launch_bounds__(…)`, if any: the name, then its parameters.
            let l = match l.strip_prefix("__launch_bounds__(") {
                Some(rest) => rest[rest.find(')')? + 1..].trim_start(),
                None => l,
            };
            Some(&l[..l.find('(')?])
        })
        .collect()
}

/// Whether `ptx` defines an entry point for each of `names`.
fn defines_all(ptx: &str, names: &[&str]) -> bool {
    names.iter().all(|n| ptx.contains(&format!(".entry {n}(")))
}

impl Cache {
    pub fn new(dir: impl Into<PathBuf>) -> Cache {
        Cache {
            dir: Some(dir.into()),
        }
    }

    /// No disk cache: every compile runs the compiler, nothing is written.
    pub fn disabled() -> Cache {
        Cache { dir: None }
    }

    /// The cache where [`default_dir`] says (none when it says none).
    pub fn from_env() -> Cache {
        Cache { dir: default_dir() }
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    fn path(&self, key: &str, extension: &str) -> Option<PathBuf> {
        Some(self.dir.as_ref()?.join(format!("{key}.{extension}")))
    }

    /// The entry for `key`, if present, intact and its own.
    pub fn get(&self, key: &str) -> Option<Compiled> {
        decode(key, &read_entry(&self.path(key, "nvrtc")?)?)
    }

    /// Stores an entry atomically (temporary file, then rename). No cache: nothing is written.
    pub fn put(&self, key: &str, c: &Compiled) -> std::io::Result<()> {
        self.write(key, "nvrtc", &encode(key, c))
    }

    /// Another backend's entry (`extension` names its kind; `magic`, eight bytes, marks its
    /// format): its `count` parts, if present, intact and the entry of `key`.
    pub fn get_parts(
        &self,
        key: &str,
        extension: &str,
        magic: &[u8; 8],
        count: usize,
    ) -> Option<Vec<Vec<u8>>> {
        decode_parts(magic, key, &read_entry(&self.path(key, extension)?)?, count)
    }

    /// Stores another backend's entry, atomically, as [`Cache::put`] does.
    pub fn put_parts(
        &self,
        key: &str,
        extension: &str,
        magic: &[u8; 8],
        parts: &[&[u8]],
    ) -> std::io::Result<()> {
        self.write(key, extension, &encode_parts(magic, key, parts))
    }

    /// A file of this process's own in the cache's directory (created if need be) for a
    /// temporary `extension` file: unique per process, thread and call.
    pub fn scratch_path(&self, stem: &str, extension: &str) -> std::io::Result<Option<PathBuf>> {
        let Some(dir) = &self.dir else {
            return Ok(None);
        };
        std::fs::create_dir_all(dir)?;
        Ok(Some(dir.join(unique_name(stem, extension))))
    }

    fn write(&self, key: &str, extension: &str, bytes: &[u8]) -> std::io::Result<()> {
        let (Some(dir), Some(path)) = (&self.dir, self.path(key, extension)) else {
            return Ok(());
        };
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(unique_name(key, "tmp"));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    }

    /// Compiles translation units in parallel (one thread each), through the cache.
    pub fn compile_units(
        &self,
        units: &[String],
        arch: &str,
    ) -> Result<Vec<(Compiled, bool)>, NvrtcError> {
        std::thread::scope(|s| {
            let handles: Vec<_> = units
                .iter()
                .map(|u| s.spawn(move || self.compile(u, arch)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("an NVRTC thread panicked"))
                .collect()
        })
    }

    /// Compiles `source` for `arch`, or loads the result of an identical earlier compilation.
    /// Returns it and whether it came from the cache.
    pub fn compile(&self, source: &str, arch: &str) -> Result<(Compiled, bool), NvrtcError> {
        let include = nvrtc::cuda_include()?;
        let options = nvrtc::options(arch, &include);
        let k = key(source, &options, nvrtc::version()?, arch);
        if let Some(c) = self.get(&k) {
            if defines_all(&c.ptx, &kernel_names(source)) {
                return Ok((c, true));
            }
        }
        let c = nvrtc::compile(source, "kernels.cu", &options)?;
        // A cache that cannot be written only costs the next compile.
        let _ = self.put(&k, &c);
        Ok((c, false))
    }
}

/// `.{stem}.{pid}.{thread}.{count}.{extension}`: a hidden name no other process, thread or call
/// uses.
fn unique_name(stem: &str, extension: &str) -> String {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        ".{stem}.{}.{:?}.{nanos}.{call}.{extension}",
        std::process::id(),
        std::thread::current().id()
    )
    .replace(['(', ')'], "")
}

/// The bytes of the entry at `path`: a regular file (not followed through a symbolic link) of at
/// most `MAX_ENTRY_BYTES`, else nothing.
fn read_entry(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = f.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_ENTRY_BYTES {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.take(MAX_ENTRY_BYTES + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= MAX_ENTRY_BYTES).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Compiled {
        Compiled {
            cubin: vec![1, 2, 3, 0, 255],
            ptx: ".version 9.0\n".into(),
            log: "ptxas info    : Compiling entry function 'k' for 'sm_90'\nptxas info    : Used 10 registers\n".into(),
            kernels: Vec::new(),
        }
    }

    #[test]
    fn entries_round_trip_and_corruption_is_detected() {
        let k = "ab".repeat(32);
        let bytes = encode(&k, &sample());
        let back = decode(&k, &bytes).unwrap();
        assert_eq!(back.cubin, sample().cubin);
        assert_eq!(back.ptx, sample().ptx);
        assert_eq!(back.kernels[0].registers, 10);
        for at in [0, 9, 40, 60, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 1;
            assert!(
                decode(&k, &bad).is_none(),
                "flipped byte {at} went unnoticed"
            );
        }
        assert!(decode(&k, &bytes[..bytes.len() - 1]).is_none());
        // Another key's entry (copied over this one's file) is not this key's.
        assert!(decode(&"cd".repeat(32), &bytes).is_none());
    }

    #[test]
    fn kernel_names_are_read_from_the_source() {
        let src = "extern \"C\" __global__ void __launch_bounds__(128) red_0_v1(float* p) {\n}\n\
                   __device__ float helper(float x) { return x; }\n\
                   extern \"C\" __global__ void scatter_x_write(const float* __restrict__ p) {}\n";
        assert_eq!(kernel_names(src), vec!["red_0_v1", "scatter_x_write"]);
        assert!(defines_all(
            ".visible .entry red_0_v1(\n.visible .entry scatter_x_write(",
            &kernel_names(src)
        ));
        assert!(!defines_all(
            ".visible .entry red_0_v1(",
            &kernel_names(src)
        ));
    }

    #[test]
    fn keys_change_with_every_input() {
        let o = vec!["--a".to_string()];
        let k = key("src", &o, (13, 0), "sm_90");
        assert_ne!(k, key("src2", &o, (13, 0), "sm_90"));
        assert_ne!(k, key("src", &["--b".to_string()], (13, 0), "sm_90"));
        assert_ne!(k, key("src", &o, (13, 1), "sm_90"));
        assert_ne!(k, key("src", &o, (13, 0), "sm_100"));
        assert_eq!(k.len(), 64);
    }
}
