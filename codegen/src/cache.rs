//! The persistent kernel cache: NVRTC results keyed by a SHA-256 of the source, the options, the
//! NVRTC version and the architecture. An entry is written to a temporary file and renamed into
//! place, so concurrent processes never read a partial entry; each entry carries a checksum of its
//! contents, and a corrupt one is recompiled (and replaced), never trusted.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::nvrtc::{self, Compiled, NvrtcError};

const MAGIC: &[u8; 8] = b"GLCACHE1";

pub struct Cache {
    dir: PathBuf,
}

/// Where the cache lives: `$GUARDLESS_CACHE_DIR`, else `$XDG_CACHE_HOME/guardless`, else
/// `~/.cache/guardless`.
pub fn default_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("GUARDLESS_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("guardless");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("guardless")
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

fn encode(c: &Compiled) -> Vec<u8> {
    let mut payload = Vec::new();
    for part in [&c.cubin[..], c.ptx.as_bytes(), c.log.as_bytes()] {
        payload.extend((part.len() as u64).to_le_bytes());
        payload.extend(part);
    }
    let mut out = MAGIC.to_vec();
    out.extend(Sha256::digest(&payload));
    out.extend(payload);
    out
}

fn decode(bytes: &[u8]) -> Option<Compiled> {
    let rest = bytes.strip_prefix(MAGIC)?;
    if rest.len() < 32 {
        return None;
    }
    let (sum, payload) = rest.split_at(32);
    if Sha256::digest(payload)[..] != *sum {
        return None;
    }
    let mut parts = Vec::new();
    let mut at = payload;
    for _ in 0..3 {
        let (len, tail) = at.split_at_checked(8)?;
        let len = u64::from_le_bytes(len.try_into().ok()?) as usize;
        let (part, tail) = tail.split_at_checked(len)?;
        parts.push(part.to_vec());
        at = tail;
    }
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

impl Cache {
    pub fn new(dir: impl Into<PathBuf>) -> Cache {
        Cache { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.nvrtc"))
    }

    /// The entry for `key`, if present and intact.
    pub fn get(&self, key: &str) -> Option<Compiled> {
        let bytes = std::fs::read(self.path(key)).ok()?;
        decode(&bytes)
    }

    /// Stores an entry atomically (temporary file, then rename).
    pub fn put(&self, key: &str, c: &Compiled) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let tmp = self.dir.join(format!(
            ".{key}.{}.{:?}.{nanos}.tmp",
            std::process::id(),
            std::thread::current().id()
        ));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&encode(c))?;
        f.sync_all()?;
        std::fs::rename(&tmp, self.path(key))
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
            return Ok((c, true));
        }
        let c = nvrtc::compile(source, "kernels.cu", &options)?;
        // A cache that cannot be written only costs the next compile.
        let _ = self.put(&k, &c);
        Ok((c, false))
    }
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
        let bytes = encode(&sample());
        let back = decode(&bytes).unwrap();
        assert_eq!(back.cubin, sample().cubin);
        assert_eq!(back.ptx, sample().ptx);
        assert_eq!(back.kernels[0].registers, 10);
        for at in [0, 9, 40, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 1;
            assert!(decode(&bad).is_none(), "flipped byte {at} went unnoticed");
        }
        assert!(decode(&bytes[..bytes.len() - 1]).is_none());
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
