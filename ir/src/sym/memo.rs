//! Per-id caches that are valid for one version of the environment. Dense vectors rather than hash
//! maps: ids are small integers handed out in creation order, so the queries of one compilation step
//! touch neighbouring slots, and invalidating everything is a version bump.

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
