//! Library steps: matmuls through the device's gemm, scatters, selects, scans, sorts and grouped
//! matmuls as generated functions; what the device cannot run goes through the host.

use guardless_codegen::cuda::Part;
use guardless_ir::graph::DType;
use guardless_ir::loop_ir::{BufferId, BufferKind, ExternKernel, PagedCheck};
use guardless_ir::tensor::Data;

use super::{blocks, dev, fail, gemm, Device, Gemm, LaunchError, Operand, Session};
use crate::elements;

impl<D: Device> Session<'_, D> {
    pub(super) fn library(&mut self, dev_: &mut D, id: BufferId) -> Result<(), LaunchError> {
        let p = &self.exe.program;
        let buf = &p.buffers[id.index()];
        if let BufferKind::Extern { kernel, inputs } = &buf.kind {
            if matches!(
                kernel,
                ExternKernel::Mm | ExternKernel::AddMm | ExternKernel::Bmm
            ) && gemm::supported(p.buffers[inputs[0].index()].dtype, buf.dtype)
                && inputs
                    .iter()
                    .all(|i| p.buffers[i.index()].dtype == p.buffers[inputs[0].index()].dtype)
                && self.device_matmul(dev_, id, *kernel == ExternKernel::Bmm, inputs)?
            {
                return Ok(());
            }
        }
        let parts = &self.exe.step_entries[id.index()];
        let part = |p: Part| parts[p.index()];
        match (
            &buf.kind,
            part(Part::Copy),
            part(Part::Count),
            part(Part::Scan),
            part(Part::Write),
        ) {
            (BufferKind::Scatter { .. }, Some(copy), _, _, Some(write)) => {
                return self.device_scatter(dev_, id, [copy, write]);
            }
            (BufferKind::Select { .. }, _, Some(count), Some(scan), Some(write)) => {
                return self.device_select(dev_, id, [count, scan, write]);
            }
            (
                BufferKind::Extern {
                    kernel: ExternKernel::GroupedMm,
                    inputs,
                },
                ..,
            ) if part(Part::Tiled).or(part(Part::Write)).is_some() => {
                return self.device_grouped_mm(
                    dev_,
                    id,
                    inputs,
                    part(Part::Tiled),
                    part(Part::Write),
                );
            }
            (
                BufferKind::Extern {
                    kernel: ExternKernel::Attention(_),
                    inputs,
                },
                ..,
            ) if part(Part::Tiled).is_some() => {
                let tiled = part(Part::Tiled).expect("checked");
                let split = part(Part::Split).zip(part(Part::Merge));
                return self.device_attention(dev_, id, inputs, tiled, split);
            }
            (
                BufferKind::Extern {
                    kernel: ExternKernel::PagedAttention(_),
                    inputs,
                },
                ..,
            ) if part(Part::Tiled).is_some() => {
                let tiled = part(Part::Tiled).expect("checked");
                let split = part(Part::Split).zip(part(Part::Merge));
                return self.device_paged_attention(dev_, id, inputs, tiled, split);
            }
            (BufferKind::Scan { .. } | BufferKind::Sort { .. }, _, _, _, Some(write))
                if self.device_lines(dev_, id, write, part(Part::Block), part(Part::Tiled))? =>
            {
                return Ok(());
            }
            (BufferKind::Item { .. }, ..) => return self.device_item(dev_, id),
            _ => {}
        }
        // On the host: the storage it reads comes back (the device waited for: pending values
        // come back with it), the result goes out.
        self.read_back(dev_)?;
        self.host_steps += 1;
        self.host_step_buffers.push(id);
        let reads = p.library_reads(id);
        let mut values = Vec::with_capacity(reads.len());
        for r in reads {
            let rb = &p.buffers[r.index()];
            let n = self.extent(r)?;
            let mut bytes = vec![0u8; n * rb.dtype.size()];
            let at = self.address(r, dev_);
            if !bytes.is_empty() {
                dev(dev_.download(at, &mut bytes))?;
            }
            values.push((r, elements::to_data(&bytes, rb.dtype, n)));
        }
        let data = p.run_library_step(id, &values, &mut self.b)?;
        if matches!(buf.kind, BufferKind::Item { .. }) {
            return Ok(());
        }
        let at = self.allocate(dev_, id)?;
        let n = match &data {
            Data::Float(v) => v.len(),
            Data::Int(v) => v.len(),
        };
        let mut bytes = vec![0u8; n * buf.dtype.size()];
        elements::from_data(&mut bytes, buf.dtype, &data);
        if !bytes.is_empty() {
            dev(dev_.upload(at, &bytes))?;
        }
        Ok(())
    }

    /// `index_put` on the device: the base copied into the result (one device copy when it is
    /// dense in row-major order; none when the result is the base's storage), then the values
    /// written at their targets.
    fn device_scatter(
        &mut self,
        dev_: &mut D,
        id: BufferId,
        [copy, write]: [usize; 2],
    ) -> Result<(), LaunchError> {
        let p = &self.exe.program;
        let buf = &p.buffers[id.index()];
        let BufferKind::Scatter { base, loops, .. } = &buf.kind else {
            unreachable!("scatter entries belong to scatter buffers")
        };
        let bad = |message: String| fail(buf, message);
        // In place: the base's storage is the result's; the copy below is then skipped.
        let out = match self.exe.in_place[id.index()] {
            Some(_) => self.address(id, dev_),
            None => self.allocate(dev_, id)?,
        };
        let numel = self.extent(id)?;
        let size = buf.dtype.size();
        let from = self.layout(&p.buffers[base.index()])?;
        let row_major = from.sizes.iter().enumerate().all(|(d, &n)| {
            n <= 1 || from.strides[d] == from.sizes[d + 1..].iter().product::<i64>()
        });
        let threads = guardless_codegen::cuda::scatter::THREADS;
        if numel > 0 {
            if row_major {
                let src = self.address(*base, dev_) + (from.offset.max(0) as usize * size) as u64;
                if src != out {
                    dev(dev_.copy(out, src, numel * size))?;
                }
            } else {
                self.launch(dev_, copy, blocks(numel as i64, threads), threads, &bad)?;
            }
        }
        let mut points = 1i64;
        for &r in &loops.ranges {
            points = points.saturating_mul(self.eval(buf, r)?.max(0));
        }
        self.launch(dev_, write, blocks(points, threads), threads, &bad)
    }

    /// `nonzero` / `masked_select` on the device: blocks count, one block scans the counts, the
    /// total goes to the readback array (the count symbol, bound when a later step needs it),
    /// the output is allocated for every element kept (the count's bound), and the blocks write
    /// the kept elements in order.
    fn device_select(
        &mut self,
        dev_: &mut D,
        id: BufferId,
        [count, scan, write]: [usize; 3],
    ) -> Result<(), LaunchError> {
        use guardless_codegen::cuda::select::{CHUNK, THREADS};
        let p = &self.exe.program;
        let buf = &p.buffers[id.index()];
        let BufferKind::Select {
            input,
            count: symbol,
            ..
        } = buf.kind
        else {
            unreachable!("select entries belong to select buffers")
        };
        let bad = |message: String| fail(buf, message);
        let numel: i64 = self.sizes(&p.buffers[input.index()])?.iter().product();
        let grid = blocks(numel, CHUNK);
        self.launch(dev_, count, grid, THREADS, &bad)?;
        self.launch(dev_, scan, 1, THREADS, &bad)?;
        // The total, after the blocks' positions in the workspace.
        let work = self.work.as_ref().map_or(0, |(m, _)| dev_.address(m));
        self.defer(dev_, id, work + 8 * grid as u64, DType::I64)?;
        // Room for the most the count can be, so the write needs no wait.
        let most = p.env.symbol_range(symbol).hi_i64().unwrap_or(i64::MAX);
        let mut at_most = self.b.clone();
        at_most.set(symbol, most.min(numel).max(0));
        let bytes = self.bytes_at(id, &at_most)?;
        self.allocate_bytes(dev_, id, bytes)?;
        self.launch(dev_, write, grid, THREADS, &bad)
    }

    /// `_grouped_mm` on the device: a block per output tile (row groups, batches), else a thread
    /// per output element.
    fn device_grouped_mm(
        &mut self,
        dev_: &mut D,
        id: BufferId,
        inputs: &[BufferId],
        tiled: Option<usize>,
        write: Option<usize>,
    ) -> Result<(), LaunchError> {
        use guardless_codegen::cuda::grouped_mm::{THREADS, TILE_M, TILE_N};
        let p = &self.exe.program;
        let buf = &p.buffers[id.index()];
        let bad = |m| fail(buf, m);
        self.allocate(dev_, id)?;
        let sizes = self.sizes(buf)?;
        let (entry, grid) = match (tiled, write) {
            (Some(tiled), _) => {
                // Row tiles: each group's (rows past the last offset too), or each batch's.
                let cols = blocks(sizes[sizes.len() - 1], TILE_N);
                let row_tiles = match inputs.get(2) {
                    Some(&offs) => {
                        let groups: i64 = self.sizes(&p.buffers[offs.index()])?.iter().product();
                        blocks(sizes[0], TILE_M) + groups + 1
                    }
                    None => sizes[0].max(0).saturating_mul(blocks(sizes[1], TILE_M)),
                };
                (tiled, row_tiles.saturating_mul(cols))
            }
            (None, Some(write)) => (write, blocks(sizes.iter().product(), THREADS)),
            (None, None) => unreachable!("the caller checked for an entry"),
        };
        self.launch(dev_, entry, grid, THREADS, &bad)
    }

    /// Fused attention on the device: a block per tile of rows of each key/value head, or (few
    /// rows, many keys: decode) a block per tile of rows and share of the keys, then the merge.
    fn device_attention(
        &mut self,
        dev_: &mut D,
        id: BufferId,
        inputs: &[BufferId],
        entry: usize,
        split: Option<(usize, usize)>,
    ) -> Result<(), LaunchError> {
        use guardless_codegen::cuda::attention::{blocks, splits, tile};
        let p = &self.exe.program;
        let buf = &p.buffers[id.index()];
        let bad = |m| fail(buf, m);
        self.allocate(dev_, id)?;
        let sq = self.sizes(&p.buffers[inputs[0].index()])?;
        let sk = self.sizes(&p.buffers[inputs[1].index()])?;
        let sv = self.sizes(&p.buffers[inputs[2].index()])?;
        let t = tile(buf.dtype, sq[3], sv[3])
            .ok_or_else(|| bad("no device form for these head dimensions".into()))?;
        grouped_heads(sq[1], sk[1]).map_err(bad)?;
        let grid = blocks(t, sq[0], sq[1], sk[1], sq[2]);
        let shares = splits(t, sq[0], sq[1], sk[1], sq[2], sk[2]);
        self.launch_attention(dev_, id, entry, split, grid, shares)
    }

    /// Attention's launches once its grid is known: with a split form and more than one share
    /// of the keys, the split function on every (block, share), then the merge over the output;
    /// else the one function.
    fn launch_attention(
        &mut self,
        dev_: &mut D,
        id: BufferId,
        entry: usize,
        split: Option<(usize, usize)>,
        grid: i64,
        shares: i64,
    ) -> Result<(), LaunchError> {
        use guardless_codegen::cuda::attention::{MERGE_THREADS, THREADS};
        let buf = &self.exe.program.buffers[id.index()];
        let bad = |m| fail(buf, m);
        match split {
            Some((split, merge)) if shares > 1 => {
                self.launch(dev_, split, grid.saturating_mul(shares), THREADS, &bad)?;
                let outputs: i64 = self.sizes(buf)?.iter().product();
                let merged = (outputs + MERGE_THREADS - 1) / MERGE_THREADS;
                self.launch(dev_, merge, merged, MERGE_THREADS, &bad)
            }
            _ => self.launch(dev_, entry, grid, THREADS, &bad),
        }
    }

    /// Paged attention on the device: a block per tile slot of each key/value head (the
    /// function finds its sequence), or (few blocks, long contexts) a block per tile slot and
    /// share of the keys, then the merge. The sequence data is checked on the device.
    fn device_paged_attention(
        &mut self,
        dev_: &mut D,
        id: BufferId,
        inputs: &[BufferId],
        entry: usize,
        split: Option<(usize, usize)>,
    ) -> Result<(), LaunchError> {
        use guardless_codegen::cuda::attention::{paged_blocks, paged_splits, tile};
        let p = &self.exe.program;
        let buf = &p.buffers[id.index()];
        let bad = |m| fail(buf, m);
        self.allocate(dev_, id)?;
        let sq = self.sizes(&p.buffers[inputs[0].index()])?;
        let sk = self.sizes(&p.buffers[inputs[1].index()])?;
        let sv = self.sizes(&p.buffers[inputs[2].index()])?;
        let table = self.sizes(&p.buffers[inputs[3].index()])?;
        let t = tile(buf.dtype, sq[2], sv[3])
            .ok_or_else(|| bad("no device form for these head dimensions".into()))?;
        let (heads, kv_heads) = (sq[1], sk[2]);
        grouped_heads(heads, kv_heads).map_err(bad)?;
        let grid = paged_blocks(t, sq[0], table[0], heads, kv_heads);
        if grid == 0 {
            // No sequence: then there is no query token either.
            if sq[0] != 0 {
                return Err(bad(PagedCheck::QueryStart.message().into()));
            }
            return Ok(());
        }
        let shares = paged_splits(grid, table[1].saturating_mul(sk[1]));
        self.launch_attention(dev_, id, entry, split, grid, shares)
    }

    /// A scan or a sort on the device: a thread per line, or a block per line (`block`) — a scan
    /// of few or long lines, a sort past the selection's comparisons (by radix) —
    /// or for few lines of several tiles a block per tile of a line (`tiled`, in phases).
    /// `false`, nothing done, when a long sort has no radix function.
    fn device_lines(
        &mut self,
        dev_: &mut D,
        id: BufferId,
        write: usize,
        block: Option<usize>,
        tiled: Option<usize>,
    ) -> Result<bool, LaunchError> {
        use guardless_codegen::cuda::lines::{
            scan_form, sort_by_selection, sort_by_tiles, RADIX_TILE, SCAN_TILE, THREADS,
        };
        let p = &self.exe.program;
        let buf = &p.buffers[id.index()];
        let bad = |message: String| fail(buf, message);
        let (input, dim, take) = match &buf.kind {
            BufferKind::Scan { input, dim, .. } => (*input, *dim, None),
            BufferKind::Sort {
                input, dim, take, ..
            } => (*input, *dim, Some(*take)),
            _ => unreachable!("a scan or a sort"),
        };
        let sizes = self.sizes(&p.buffers[input.index()])?;
        let len = sizes[dim];
        let inner: i64 = sizes[dim + 1..].iter().product();
        let lines: i64 = sizes[..dim].iter().product::<i64>() * inner;
        // The function, and its grid.
        let (entry, grid) = match take {
            None => match scan_form(lines, len, inner) {
                Part::Tiled if tiled.is_some() => {
                    (tiled, lines * ((len + SCAN_TILE - 1) / SCAN_TILE))
                }
                Part::Tiled | Part::Block if block.is_some() => (block, lines),
                _ => (Some(write), blocks(lines, THREADS)),
            },
            Some(take) => {
                let keep = match take {
                    Some(k) => self.eval(buf, k)?,
                    None => len,
                };
                if keep < 0 || keep > len {
                    return Err(bad(format!("selected {keep} of {len} elements")));
                }
                if sort_by_selection(lines, keep, len) {
                    (Some(write), blocks(lines, THREADS))
                } else if sort_by_tiles(lines, len) && tiled.is_some() {
                    (tiled, lines * ((len + RADIX_TILE - 1) / RADIX_TILE))
                } else {
                    (block, lines)
                }
            }
        };
        let Some(entry) = entry else {
            return Ok(false);
        };
        self.allocate(dev_, id)?;
        self.launch(dev_, entry, grid, THREADS, &bad)?;
        Ok(true)
    }

    /// `mm`/`addmm`/`bmm` on the device; `false` when the layouts need the host.
    fn device_matmul(
        &mut self,
        dev_: &mut D,
        id: BufferId,
        batched: bool,
        inputs: &[BufferId],
    ) -> Result<bool, LaunchError> {
        let p = &self.exe.program;
        let buf = &p.buffers[id.index()];
        let out = self.allocate(dev_, id)?;
        let view = |s: &Self, b: BufferId| -> Result<(Vec<i64>, i64, Vec<i64>), LaunchError> {
            let x = &p.buffers[b.index()];
            let (off, st) = s.offset_strides(x)?;
            Ok((s.sizes(x)?, off, st))
        };
        let (sa, oa, ta) = view(self, inputs[0])?;
        let (sb, ob, tb) = view(self, inputs[1])?;
        let (so, oo, to) = view(self, id)?;
        let r = usize::from(batched);
        if sa.len() != 2 + r || sb.len() != 2 + r || so.len() != 2 + r || sa[1 + r] != sb[r] {
            return Err(fail(buf, format!("matmul of {sa:?} by {sb:?} into {so:?}")));
        }
        let dtype = p.buffers[inputs[0].index()].dtype;
        // Elements of the operands (and the bias), and of the output (which may be wider).
        let (size, out_size) = (dtype.size() as u64, buf.dtype.size() as u64);
        let operand = |addr: u64, off: i64, sizes: &[i64], st: &[i64], size: u64| Operand {
            address: addr + off as u64 * size,
            rows: sizes[r],
            cols: sizes[r + 1],
            row_stride: st[r],
            col_stride: st[r + 1],
            batch_stride: if batched { st[0] } else { 0 },
        };
        // addmm's bias row (`[n]` or `[1, n]`), which the device needs dense.
        let bias = match inputs.get(2) {
            Some(&bias) => {
                let (sizes, off, st) = view(self, bias)?;
                let (n, stride) = (sizes.last().copied(), st.last().copied());
                let widened = buf.dtype != dtype;
                if widened || n != so.last().copied() || (stride != Some(1) && n != Some(1)) {
                    return Ok(false);
                }
                Some(self.address(bias, dev_) + off as u64 * size)
            }
            None => None,
        };
        let g = Gemm {
            dtype,
            out_dtype: buf.dtype,
            batch: if batched { so[0] } else { 1 },
            a: operand(self.address(inputs[0], dev_), oa, &sa, &ta, size),
            b: operand(self.address(inputs[1], dev_), ob, &sb, &tb, size),
            c: operand(out, oo, &so, &to, out_size),
            bias,
        };
        if g.batch <= 0 || g.c.rows <= 0 || g.c.cols <= 0 {
            return Ok(true);
        }
        if g.a.cols == 0 && bias.is_some() {
            // An empty inner dimension: the bias in every row.
            let Some(copies) = g.bias_fill(size as usize) else {
                return Ok(false);
            };
            for (dst, src, len) in copies {
                dev(dev_.copy(dst, src, len))?;
            }
            return Ok(true);
        }
        if g.a.cols == 0 {
            // An empty inner dimension: the product is zeros (the output is contiguous).
            let bytes = self.extent(id)? * buf.dtype.size();
            dev(dev_.fill(out, 0, bytes))?;
            return Ok(true);
        }
        if g.plan().is_none() {
            return Ok(false);
        }
        dev(dev_.gemm(&g))?;
        Ok(true)
    }
}

/// Grouped-query attention's head counts: the query heads a whole multiple of the key/value
/// heads (none of either is fine; query heads without key/value heads are not).
fn grouped_heads(heads: i64, kv_heads: i64) -> Result<(), String> {
    if kv_heads <= 0 && heads > 0 || kv_heads > 0 && heads % kv_heads != 0 {
        return Err(format!(
            "{heads} query heads are not a multiple of {kv_heads} key/value heads"
        ));
    }
    Ok(())
}
