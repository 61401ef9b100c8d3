//! One kernel variant run in the emulation at any size, checked on sampled rows: its buffers in
//! allocations of their exact size (mapped without backing when large, so that a size past 2^31
//! elements costs only the pages the sampled rows touch), a few of its blocks run, and every row
//! those blocks compute compared with the loop-IR interpreter's value (the program's semantics,
//! computed for those rows only), inputs filled with random values where the interpreter reads
//! them. Elements outside the sampled rows must stay untouched (small buffers, checked whole).

use std::cell::RefCell;
use std::ffi::c_void;

use guardless_codegen::cuda::{CudaModule, Param};
use guardless_codegen::schedule::Schedule;
use guardless_codegen::schedule::Strategy;
use guardless_ir::graph::DType;
use guardless_ir::loop_ir::interp::Scalar;
use guardless_ir::loop_ir::{BufferId, BufferKind, Program};
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::round_to;
use rustc_hash::{FxHashMap, FxHashSet};

use super::Compiled;

/// Above this many bytes a buffer is mapped (pages on first touch) instead of allocated.
const MAPPED_FROM: usize = 64 << 20;

/// A buffer's memory: exactly `bytes` from `ptr` (16-byte aligned, or one element past that when
/// misaligned on purpose). Heap memory comes from `malloc` (ASan's in a sanitized child: a byte
/// past the end is a report); mapped memory ends 16 bytes or less before a page that faults.
pub struct Memory {
    pub ptr: *mut u8,
    pub bytes: usize,
    base: *mut u8,
    mapped: usize,
}

impl Memory {
    pub fn new(bytes: usize, misalign: usize, poison: bool) -> Memory {
        if bytes + misalign < MAPPED_FROM {
            let mut base = std::ptr::null_mut();
            let total = (bytes + misalign).max(1);
            assert_eq!(unsafe { libc::posix_memalign(&mut base, 16, total) }, 0);
            let base = base as *mut u8;
            unsafe { std::ptr::write_bytes(base, if poison { 0xFF } else { 0 }, total) };
            return Memory {
                ptr: unsafe { base.add(misalign) },
                bytes,
                base,
                mapped: 0,
            };
        }
        let page = 4096;
        let span = (bytes + misalign).div_ceil(16) * 16;
        let mapped = span.div_ceil(page) * page + page;
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED, "mapping {mapped} bytes");
        let base = base as *mut u8;
        let guard = unsafe { base.add(mapped - page) };
        assert_eq!(
            unsafe { libc::mprotect(guard as *mut c_void, page, libc::PROT_NONE) },
            0
        );
        Memory {
            ptr: unsafe { guard.sub(span).add(misalign) },
            bytes,
            base,
            mapped,
        }
    }

    pub fn is_mapped(&self) -> bool {
        self.mapped > 0
    }

    /// Element `at` of dtype `d`, as the interpreter holds values.
    pub fn read(&self, d: DType, at: i64) -> Option<Scalar> {
        let size = d.size();
        if at < 0 || (at as usize + 1) * size > self.bytes {
            return None;
        }
        let p = unsafe { self.ptr.add(at as usize * size) };
        let mut b = [0u8; 8];
        unsafe { std::ptr::copy_nonoverlapping(p, b.as_mut_ptr(), size) };
        Some(match d {
            DType::F64 => Scalar::Float(f64::from_le_bytes(b)),
            DType::F32 => Scalar::Float(f32::from_le_bytes(b[..4].try_into().unwrap()) as f64),
            DType::BF16 => Scalar::Float(half::bf16::from_le_bytes([b[0], b[1]]).to_f64()),
            DType::F16 => Scalar::Float(half::f16::from_le_bytes([b[0], b[1]]).to_f64()),
            DType::I64 => Scalar::Int(i64::from_le_bytes(b)),
            DType::I32 => Scalar::Int(i32::from_le_bytes(b[..4].try_into().unwrap()) as i64),
            DType::I8 => Scalar::Int(b[0] as i8 as i64),
            DType::U8 | DType::Bool => Scalar::Int(b[0] as i64),
        })
    }

    /// Writes element `at` (in bounds).
    pub fn write(&self, d: DType, at: i64, v: Scalar) {
        let (f, i) = match v {
            Scalar::Float(x) => (x, x as i64),
            Scalar::Int(x) => (x as f64, x),
        };
        let bytes: Vec<u8> = match d {
            DType::F64 => f.to_le_bytes().to_vec(),
            DType::F32 => (f as f32).to_le_bytes().to_vec(),
            DType::BF16 => half::bf16::from_f64(f).to_le_bytes().to_vec(),
            DType::F16 => half::f16::from_f64(f).to_le_bytes().to_vec(),
            DType::I64 => i.to_le_bytes().to_vec(),
            DType::I32 => (i as i32).to_le_bytes().to_vec(),
            DType::I8 | DType::U8 | DType::Bool => vec![i as u8],
        };
        assert!(at >= 0 && (at as usize + 1) * bytes.len() <= self.bytes);
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.ptr.add(at as usize * bytes.len()),
                bytes.len(),
            )
        };
    }

    /// Sets element `at`'s bytes to 0xFF (NaN, -1).
    pub fn poison(&self, size: usize, at: i64) {
        unsafe { std::ptr::write_bytes(self.ptr.add(at as usize * size), 0xFF, size) };
    }

    fn bytes(&self) -> &[u8] {
        unsafe { std::slice::from_raw_parts(self.ptr, self.bytes) }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        if self.mapped > 0 {
            unsafe { libc::munmap(self.base as *mut c_void, self.mapped) };
        } else {
            unsafe { libc::free(self.base as *mut c_void) };
        }
    }
}

/// The variant the launcher picks at `b` when the buffers in `misaligned` are not 16-byte
/// aligned (and every other one is): the first generated one whose predicate holds and whose
/// vector accesses are aligned.
pub fn selected(
    p: &Program,
    s: &Schedule,
    m: &CudaModule,
    ki: usize,
    b: &Bindings,
    misaligned: &FxHashSet<BufferId>,
) -> Option<usize> {
    let k = &s.kernels[ki];
    k.variants.iter().enumerate().position(|(vi, v)| {
        let generated = m
            .entries
            .iter()
            .any(|e| e.kernel_variant() == Some((ki, vi)) && e.generated);
        generated
            && p.env.evaluate(v.predicate, b).is_ok_and(|h| h != 0)
            && v.aligned.iter().all(|a| !misaligned.contains(&root(p, *a)))
    })
}

/// The buffer holding `id`'s storage.
pub fn root(p: &Program, mut id: BufferId) -> BufferId {
    while let BufferKind::View { base } = p.buffers[id.index()].kind {
        id = base;
    }
    id
}

/// What a sampled run checked.
#[derive(Debug, Default)]
pub struct Checked {
    pub blocks: usize,
    pub grid: i64,
    pub rows: usize,
    pub elements: usize,
}

/// Runs variant `vi` of kernel `ki` at `b` on sampled blocks (`seed` picks them, and the
/// schedule) and compares every row they compute with the interpreter. `misaligned`: buffers
/// placed one element past a 16-byte boundary.
/// Integer inputs are random in [0, 4); where that makes an index invalid for both (a gather from
/// a dimension of 1), the check is repeated with integer inputs 0.
#[allow(clippy::too_many_arguments)]
pub fn check_variant(
    p: &Program,
    s: &Schedule,
    m: &CudaModule,
    c: &Compiled,
    ki: usize,
    vi: usize,
    b: &Bindings,
    misaligned: &FxHashSet<BufferId>,
    seed: u64,
) -> Result<Checked, String> {
    match check_with(p, s, m, c, (ki, vi), b, misaligned, seed, 4) {
        Err(e) if e.contains(BOTH_FAILED) => {
            check_with(p, s, m, c, (ki, vi), b, misaligned, seed, 1)
        }
        r => r,
    }
}

const BOTH_FAILED: &str = "both failed";

#[allow(clippy::too_many_arguments)]
fn check_with(
    p: &Program,
    s: &Schedule,
    m: &CudaModule,
    c: &Compiled,
    (ki, vi): (usize, usize),
    b: &Bindings,
    misaligned: &FxHashSet<BufferId>,
    seed: u64,
    int_range: u64,
) -> Result<Checked, String> {
    let k = &s.kernels[ki];
    let v = &k.variants[vi];
    let cfg = &v.config;
    let entry = m
        .entries
        .iter()
        .find(|e| e.kernel_variant() == Some((ki, vi)))
        .ok_or("no entry")?;
    let eval = |e| p.env.evaluate(e, b).map_err(|x| x.to_string());
    let grid = eval(v.grid)?;
    let rows = eval(k.rows)?;
    let what = format!("{} (v{vi}: {})", k.name, entry.name);

    // The buffers the function takes, by storage root; written ones are the kernel's stores.
    let mut memory: FxHashMap<BufferId, Memory> = FxHashMap::default();
    let mut written: FxHashSet<BufferId> = FxHashSet::default();
    for prm in &entry.params {
        if let Param::Buffer { buffer, written: w } = prm {
            let id = p.buffers.iter().position(|x| &x.name == buffer).unwrap();
            let r = root(p, BufferId(id as u32));
            if *w {
                written.insert(r);
            }
            if memory.contains_key(&r) {
                continue;
            }
            let buf = &p.buffers[r.index()];
            let extent = buf
                .layout
                .evaluate(&p.env, b)
                .map_err(|e| e.to_string())?
                .extent()?;
            let bytes = extent * buf.dtype.size();
            let off = if misaligned.contains(&r) {
                buf.dtype.size().min(8)
            } else {
                0
            };
            memory.insert(r, Memory::new(bytes, off, *w));
        }
    }

    // The blocks to run, and the rows they compute.
    let mut rng = seed.wrapping_mul(0x9e3779b97f4a7c15) | 1;
    let mut next = move |n: i64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n.max(1) as u64) as i64
    };
    let (blocks, sample): (Vec<u32>, Vec<i64>) = if grid <= 0 {
        (Vec::new(), Vec::new())
    } else {
        let reduction = !k.inner.is_empty();
        match cfg.strategy {
            Strategy::Split { blocks: per_row } => {
                let picks = pick(grid / per_row.max(1), &mut next);
                let blocks = picks
                    .iter()
                    .flat_map(|&r| (r * per_row..(r + 1) * per_row).map(|b| b as u32))
                    .collect();
                (blocks, picks)
            }
            _ => {
                let per_block = if reduction {
                    (cfg.threads / cfg.threads_per_row.max(1)).max(1)
                } else {
                    cfg.threads * cfg.elements_per_thread.max(1)
                };
                let picks = pick(grid, &mut next);
                let rows_of = picks
                    .iter()
                    .flat_map(|&bk| bk * per_block..((bk + 1) * per_block).min(rows))
                    .collect();
                (picks.iter().map(|&bk| bk as u32).collect(), rows_of)
            }
        }
    };

    // The interpreter's values of those rows, inputs filled where it reads them.
    let filled: RefCell<FxHashSet<(BufferId, i64)>> = RefCell::new(FxHashSet::default());
    let fill_seed = seed;
    let read = |buffer: BufferId, at: i64| -> Result<Scalar, String> {
        let buf = &p.buffers[buffer.index()];
        let mem = memory
            .get(&buffer)
            .ok_or_else(|| format!("{}: read, but not a parameter", buf.name))?;
        if written.contains(&buffer) {
            return Err(format!(
                "{}: read at {at} outside the sampled rows' computed elements",
                buf.name
            ));
        }
        if filled.borrow_mut().insert((buffer, at)) {
            let v = random_value(buf.dtype, fill_seed, buffer, at, int_range);
            mem.read(buf.dtype, at)
                .ok_or_else(|| format!("{}: read at {at} out of bounds", buf.name))?;
            mem.write(buf.dtype, at, v);
        }
        mem.read(buf.dtype, at)
            .ok_or_else(|| format!("{}: read at {at} out of bounds", buf.name))
    };
    let members: Vec<BufferId> = k.members.iter().map(|m| m.buffer).collect();
    let want = p.run_rows(&members, k.rows, cfg.lanes, &sample, b, &read);

    // Poison what the rows should write (all of a small buffer already is), then run.
    let mut expected: Vec<(BufferId, i64, Scalar)> = Vec::new();
    if let Ok(want) = &want {
        for (mi, vals) in want.iter().enumerate() {
            let r = root(p, members[mi]);
            if !written.contains(&r) {
                continue;
            }
            let size = p.buffers[r.index()].dtype.size();
            for &(at, val) in vals {
                memory[&r].poison(size, at);
                expected.push((r, at, val));
            }
        }
    }
    let mut error = 0i32;
    // Parameters' size expressions are parsed into a copy of the environment.
    let mut env = p.env.clone();
    let mut scalars: Vec<Box<i64>> = Vec::new();
    let mut work: Option<Memory> = None;
    let mut phase_arg = None;
    for prm in &entry.params {
        let value = match prm {
            Param::Buffer { buffer, .. } => {
                let id = p.buffers.iter().position(|x| &x.name == buffer).unwrap();
                memory[&root(p, BufferId(id as u32))].ptr as i64
            }
            Param::Symbol { name } => b
                .get(p.env.symbol_id(name).unwrap())
                .ok_or_else(|| format!("{name} unbound"))?,
            Param::Derived { expr, .. } => {
                let e = env.parse(expr).map_err(|e| e.to_string())?;
                env.evaluate(e, b).map_err(|x| x.to_string())?
            }
            Param::FastDivisor { expr, .. } => {
                let e = env.parse(expr).map_err(|e| e.to_string())?;
                let d = env.evaluate(e, b).map_err(|x| x.to_string())?;
                guardless_codegen::cuda::fast_divisor(d) as i64
            }
            Param::Error => &mut error as *mut i32 as i64,
            Param::ErrorBase { base } => *base as i64,
            Param::Workspace { bytes } => {
                let e = env.parse(bytes).map_err(|e| e.to_string())?;
                let n = env.evaluate(e, b).map_err(|x| x.to_string())?;
                let w = Memory::new(n.max(0) as usize, 0, true);
                let at = w.ptr as i64;
                work = Some(w);
                at
            }
            Param::Phase => {
                phase_arg = Some(scalars.len());
                0
            }
        };
        scalars.push(Box::new(value));
    }
    let mut args: Vec<*mut c_void> = scalars
        .iter_mut()
        .map(|s| s.as_mut() as *mut i64 as *mut c_void)
        .collect();
    if !blocks.is_empty() {
        let f: libloading::Symbol<unsafe extern "C" fn(u32, u32, *mut *mut c_void)> =
            unsafe { c.lib.get(format!("gl_run_{}", entry.name).as_bytes()) }.unwrap();
        c.configure(seed);
        c.sample(&blocks);
        for phase in 0..entry.phases {
            if let Some(i) = phase_arg {
                *scalars[i] = phase as i64;
            }
            unsafe { f(grid as u32, cfg.threads as u32, args.as_mut_ptr()) };
        }
        c.sample(&[]);
    }
    drop(work);

    match (&want, error) {
        (Err(e), 0) => {
            return Err(format!(
                "{what}: the interpreter failed ({e}); the kernel did not"
            ))
        }
        (Err(_), _) => {
            return Err(format!(
                "{what}: {BOTH_FAILED} (kernel error {error}); the inputs must be valid"
            ))
        }
        (Ok(_), e) if e != 0 => return Err(format!("{what}: the kernel raised error {e}")),
        _ => {}
    }
    let mut elements = 0;
    let mut at_expected: FxHashMap<BufferId, FxHashSet<i64>> = FxHashMap::default();
    for &(r, at, w) in &expected {
        let d = p.buffers[r.index()].dtype;
        let got = memory[&r].read(d, at).unwrap();
        if !close(d, got, w) {
            return Err(format!(
                "{what}: {} at storage index {at}: got {got:?}, the interpreter {w:?} ({} rows from {} of {grid} blocks)",
                p.buffers[r.index()].name,
                sample.len(),
                blocks.len()
            ));
        }
        at_expected.entry(r).or_default().insert(at);
        elements += 1;
    }
    // Nothing else written: a small output buffer still holds its poison outside those rows.
    for &r in &written {
        let mem = &memory[&r];
        if mem.is_mapped() {
            continue;
        }
        let size = p.buffers[r.index()].dtype.size();
        let mine = at_expected.get(&r);
        for (i, chunk) in mem.bytes().chunks(size).enumerate() {
            if chunk.iter().any(|&x| x != 0xFF) && !mine.is_some_and(|s| s.contains(&(i as i64))) {
                return Err(format!(
                    "{what}: {} element {i} written outside the sampled rows",
                    p.buffers[r.index()].name
                ));
            }
        }
    }
    Ok(Checked {
        blocks: blocks.len(),
        grid,
        rows: sample.len(),
        elements,
    })
}

/// Up to four of `0..n`: the first, the last and two others.
fn pick(n: i64, next: &mut impl FnMut(i64) -> i64) -> Vec<i64> {
    let mut out = vec![0, n - 1, next(n), next(n)];
    out.retain(|&x| (0..n).contains(&x));
    out.sort();
    out.dedup();
    out
}

/// A random input value of dtype `d`: floats in [-2, 2), integers in [0, int_range), booleans.
fn random_value(d: DType, seed: u64, buffer: BufferId, at: i64, int_range: u64) -> Scalar {
    let mut z = seed
        ^ (buffer.0 as u64).wrapping_mul(0xbf58476d1ce4e5b9)
        ^ (at as u64).wrapping_mul(0x94d049bb133111eb);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
    z ^= z >> 31;
    if d.is_float() {
        Scalar::Float(round_to(
            d,
            (z >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0,
        ))
    } else if d == DType::Bool {
        Scalar::Int((z & 1) as i64)
    } else {
        Scalar::Int((z % int_range) as i64)
    }
}

/// `torch.testing.assert_close`'s per-dtype tolerances, NaN equal to NaN.
fn close(d: DType, got: Scalar, want: Scalar) -> bool {
    match (got, want) {
        (Scalar::Float(g), Scalar::Float(w)) => {
            let (rtol, atol) = match d {
                DType::F64 => (1e-7, 1e-7),
                DType::F32 => (1.3e-6, 1e-5),
                DType::F16 => (1e-3, 1e-5),
                DType::BF16 => (1.6e-2, 1e-5),
                _ => (0.0, 0.0),
            };
            (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= atol + rtol * w.abs()
        }
        (Scalar::Int(g), Scalar::Int(w)) => g == w,
        (g, w) => {
            let f = |s: Scalar| match s {
                Scalar::Float(x) => x,
                Scalar::Int(x) => x as f64,
            };
            f(g) == f(w)
        }
    }
}
