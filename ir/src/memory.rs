//! The one checked path every allocation of tensor storage goes through, on every device and in
//! the reference: the size is computed without overflow and compared with a memory limit before
//! anything is allocated, so an impossible size (an `.item()` of 2^40 used as a size) is an error
//! naming what would have been allocated — never a `capacity overflow` panic or an aborted
//! allocation.
//!
//! The limit is `set_limit` (the CLI's `--max-memory`), else the machine's available memory
//! (`MemAvailable` of `/proc/meminfo`) for host memory. Device memory is checked for overflow and
//! against a limit that was set; the device itself refuses what it cannot hold.

use std::sync::atomic::{AtomicU64, Ordering};

/// Where storage is allocated.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Place {
    Host,
    Device,
}

/// 0: not set.
static LIMIT: AtomicU64 = AtomicU64::new(0);

/// Sets the memory limit in bytes (`None`: the default again).
pub fn set_limit(bytes: Option<u64>) {
    LIMIT.store(bytes.unwrap_or(0), Ordering::Relaxed);
}

/// The limit that was set, if any.
pub fn limit_set() -> Option<u64> {
    match LIMIT.load(Ordering::Relaxed) {
        0 => None,
        b => Some(b),
    }
}

/// The host's available memory in bytes (`u64::MAX` when it cannot be read).
pub fn available() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(u64::MAX, |kb| kb.saturating_mul(1024))
}

/// Host requests below this many bytes are not compared with the available memory: reading
/// `/proc/meminfo` costs a few microseconds, more than a decode step's small buffers are worth,
/// and no machine that runs a graph lacks 64 MiB (a set `--max-memory` still applies to them).
const UNCHECKED_HOST_BYTES: u128 = 64 << 20;

/// The bytes of `elements` elements of `element_bytes` each, if they may be allocated at `place`;
/// else an error naming `what`, the size, and the limit.
pub fn checked_bytes(
    elements: u128,
    element_bytes: usize,
    place: Place,
    what: &dyn Fn() -> String,
) -> Result<usize, String> {
    let bytes = elements.checked_mul(element_bytes as u128);
    let limit = match (limit_set(), place) {
        (Some(l), _) => Some((l, "the memory limit (--max-memory)")),
        (None, Place::Host) if bytes.is_some_and(|b| b >= UNCHECKED_HOST_BYTES) => {
            Some((available(), "the available memory"))
        }
        (None, _) => None,
    };
    match bytes {
        Some(b) if b <= usize::MAX as u128 && limit.is_none_or(|(l, _)| b <= l as u128) => {
            Ok(b as usize)
        }
        Some(b) if b <= usize::MAX as u128 => {
            let (l, which) = limit.expect("checked above");
            Err(format!(
                "{}: {elements} elements ({b} bytes) exceed {which}, {l} bytes",
                what()
            ))
        }
        _ => Err(format!(
            "{}: {elements} elements of {element_bytes} bytes overflow any memory",
            what()
        )),
    }
}

/// The element count of `shape`, if it may be allocated at `element_bytes` each on the host.
pub fn checked_numel(
    shape: &[usize],
    element_bytes: usize,
    what: &dyn Fn() -> String,
) -> Result<usize, String> {
    let n = shape
        .iter()
        .try_fold(1u128, |a, &d| a.checked_mul(d as u128))
        .unwrap_or(u128::MAX);
    checked_bytes(n, element_bytes, Place::Host, what)?;
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_past_memory_or_overflowing_are_errors() {
        let what = || "buffer b".to_string();
        assert_eq!(checked_bytes(10, 4, Place::Host, &what), Ok(40));
        let e = checked_bytes(1 << 40, 16, Place::Host, &what).unwrap_err();
        assert!(e.starts_with("buffer b: 1099511627776 elements"), "{e}");
        assert!(checked_bytes(u128::MAX / 2, 8, Place::Device, &what).is_err());
        assert!(checked_bytes(1 << 40, 4, Place::Device, &what).is_ok());
        assert!(checked_numel(&[1 << 40, 1 << 40], 1, &what).is_err());
        assert_eq!(checked_numel(&[3, 0, 1 << 62], 8, &what), Ok(0));
    }
}
