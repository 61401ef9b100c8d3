//! Per-id caches that are valid for one version of the environment. Dense vectors rather than hash
//! maps: ids are small integers handed out in creation order, so the queries of one compilation step
//! touch neighbouring slots, and invalidating everything is a version bump.

use super::range::{ValueRange, INF};

#[derive(Clone, Debug)]
pub(crate) struct Memo<T: Copy> {
    /// `(version + 1, value)`; a stamp of 0 is an empty slot.
    slots: Vec<(u32, T)>,
    filler: T,
}

impl<T: Copy> Memo<T> {
    pub fn new(filler: T) -> Self {
        Memo {
            slots: Vec::new(),
            filler,
        }
    }

    pub fn get(&self, index: usize, version: u32) -> Option<T> {
        match self.slots.get(index) {
            Some(&(stamp, v)) if stamp == version.wrapping_add(1) => Some(v),
            _ => None,
        }
    }

    pub fn insert(&mut self, index: usize, version: u32, value: T) {
        if index >= self.slots.len() {
            let len = (index + 1).max(self.slots.len() * 2).max(64);
            self.slots.resize(len, (0, self.filler));
        }
        self.slots[index] = (version.wrapping_add(1), value);
    }
}

/// A [`ValueRange`] in 16 bytes instead of 32, for the range memo (it is read for every node, so its
/// footprint decides cache behaviour). Ends beyond `i64` are stored loosened — a lower end is never
/// raised, an upper end never lowered — so a cached range stays sound.
#[derive(Copy, Clone, Debug)]
pub(crate) struct CompactRange {
    lo: i64,
    hi: i64,
}

impl From<ValueRange> for CompactRange {
    fn from(r: ValueRange) -> Self {
        let lo = if r.lo <= i64::MIN as i128 {
            i64::MIN
        } else {
            i64::try_from(r.lo).map_or(i64::MAX - 1, |v| v.min(i64::MAX - 1))
        };
        let hi = if r.hi >= i64::MAX as i128 {
            i64::MAX
        } else {
            i64::try_from(r.hi).map_or(i64::MIN + 1, |v| v.max(i64::MIN + 1))
        };
        CompactRange { lo, hi }
    }
}

impl From<CompactRange> for ValueRange {
    fn from(c: CompactRange) -> Self {
        let lo = if c.lo == i64::MIN { -INF } else { c.lo as i128 };
        let hi = if c.hi == i64::MAX { INF } else { c.hi as i128 };
        ValueRange { lo, hi }
    }
}
