//! record's resident dispatch over the caller's buffers, one for its four forms
//! ([`GpuBackend::prepare_form`]), and the forms' public names.

use super::{Form, LayerForm, RecordBuffers, RecordLayerBuffers, RecordLayerRow, VarlenSplit};
use crate::dtype::GdnDtypes;
use crate::engine::cache::small_buffer;
use crate::engine::encode::{Plan, Prepared};
use crate::engine::key::Op;
use crate::engine::operand::rows_bound;
use crate::error::{Error, Result};
use crate::gpu::backend::GpuBackend;
use crate::op::gdn;
use crate::op::prologue::{check_pairs, PrologueOperands, RawBuffers};
use crate::op::record_chunked::{
    chunked_by_default, skipping, ChunkShape, ChunkSize, COOP_CHUNK, PORTABLE_CHUNK,
    SKIPPED_SEQUENCE,
};
use crate::shape::{GdnShape, GqaLayout, LayerShape, VarlenLayerShape, VarlenShape};
use crate::tuning::{ShapeClass, Threshold};

impl GpuBackend {
    /// Validate record's buffers (docs/SPEC.md "record") and build its dispatch. The
    /// optional outputs are written when given: `state_out`, and the tape's copies of
    /// k (`tape_k_grouped`, at key heads) and g (`tape_g`), which make a rollback's draft
    /// one dispatch.
    ///
    /// Record takes the chunked form where its shape class says so
    /// (`ShapeClass::chunked`): by default only on the matrix units
    /// ([`GpuBackend::chunked_on_matrix_units`]: cooperative matrices and
    /// [`crate::ChunkPrecision::FastF16`]) from the tuning table's thresholds; a class
    /// that asks for it also gets the portable passes elsewhere. The same outputs
    /// within the form's documented precision, and the scratch of
    /// [`GpuBackend::prepare_record_chunked`], kept by the dispatch. The chunked passes
    /// write no tape copy: where the call binds them, copy dispatches after the passes
    /// write them (they are k and g byte for byte), and the call's buffers are first
    /// checked as the sequential kernel checks them.
    pub fn prepare_record(
        &self,
        shape: &GdnShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &RecordBuffers<'_>,
    ) -> Result<Prepared> {
        let class = &self.tuning().class(Op::Record, shape, dtypes);
        if !self.record_runs_chunked(shape, dtypes, class) {
            return self.prepare_form(shape, layout, dtypes, slots(buffers), Vec::new());
        }
        let chunk = self.record_chunk(shape);
        if !has_tape_copies(buffers) {
            return self.prepare_record_chunked(shape, layout, dtypes, chunk, buffers);
        }
        let sequential = self.form_plan(shape, layout, dtypes, slots(buffers), Vec::new())?;
        self.runtime.check(&sequential)?;
        let passes =
            self.prepare_record_chunked(shape, layout, dtypes, chunk, &no_tape(buffers))?;
        self.then_tape_copies(passes, buffers, (shape.qk_len(), shape.gate_len()), dtypes)
    }

    /// Validate record_varlen's buffers (docs/SPEC.md "record_varlen") and build its
    /// dispatch: record's buffers, the activations, y, the tape's delta (and its
    /// optional copies of k and g) at the packed tokens (`[N, ...]`), `state_in` and
    /// `state_out` one state per sequence (`[S, Hv, Dv, Dk]`).
    ///
    /// The offsets are the shape's, checked when it was built; the dispatch holds them
    /// in a small buffer of its own, written once here, so encoding it again costs no
    /// upload. A batch with other offsets is another shape and another dispatch.
    ///
    /// Which sequences run in chunks is [`GpuBackend::record_varlen_split`]'s answer:
    /// none (record's kernel), all, or on the fast path by default the long ones (two
    /// passes, each writing only its own sequences). A chunked sequence runs in chunks
    /// of its own, the chunked record's passes as record takes them, the scratch at
    /// their chunks; the tape's copies, where bound, are written after the passes as
    /// [`GpuBackend::prepare_record`] writes them.
    pub fn prepare_record_varlen(
        &self,
        shape: &VarlenShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &RecordBuffers<'_>,
    ) -> Result<Prepared> {
        let split = self.record_varlen_split(shape, dtypes)?;
        self.prepare_record_varlen_as(shape, layout, dtypes, &split, buffers)
    }

    /// [`GpuBackend::prepare_record_varlen`] in the form `split` names.
    pub(crate) fn prepare_record_varlen_as(
        &self,
        shape: &VarlenShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        split: &VarlenSplit,
        buffers: &RecordBuffers<'_>,
    ) -> Result<Prepared> {
        let inputs = no_tape(buffers);
        let passes = match split {
            VarlenSplit::Sequential => {
                return self.prepare_packed(shape, layout, dtypes, slots(buffers));
            }
            VarlenSplit::Chunked(chunk) => {
                self.check_as_sequential(shape, layout, dtypes, buffers)?;
                self.prepare_record_varlen_chunked(shape, layout, dtypes, *chunk, &inputs)?
            }
            VarlenSplit::Mixed { chunk, chunked } => {
                self.check_as_sequential(shape, layout, dtypes, buffers)?;
                self.prepare_record_varlen_mixed(shape, layout, dtypes, (*chunk, chunked), &inputs)?
            }
        };
        if !has_tape_copies(buffers) {
            return Ok(passes);
        }
        self.then_tape_copies(passes, buffers, (shape.qk_len(), shape.gate_len()), dtypes)
    }

    /// The chunked forms write no tape copy, so a call that binds the copies is first
    /// checked as the sequential kernel checks it (the same typed errors); the copies
    /// follow the passes.
    fn check_as_sequential(
        &self,
        shape: &VarlenShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &RecordBuffers<'_>,
    ) -> Result<()> {
        if !has_tape_copies(buffers) {
            return Ok(());
        }
        let offsets = self.offsets_buffer(shape);
        let sequential = slots(buffers).into_iter().chain([Some(&offsets)]).collect();
        self.runtime
            .check(&self.form_plan(shape, layout, dtypes, sequential, Vec::new())?)
    }

    /// record_varlen's mixed form over `inputs` (no tape copies): record's kernel on
    /// the sequences `chunked` leaves out, then the chunked passes on the others. Each
    /// pass leaves the other's sequences alone (their ends marked in its table,
    /// wgsl/skipped_sequence.wgsl), so their order is free.
    fn prepare_record_varlen_mixed(
        &self,
        shape: &VarlenShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        (chunk, chunked): (ChunkSize, &[bool]),
        inputs: &RecordBuffers<'_>,
    ) -> Result<Prepared> {
        let short: Vec<bool> = chunked.iter().map(|c| !c).collect();
        let offsets = self.offsets_words(&skipping(shape, &short));
        let sequential = slots(inputs).into_iter().chain([Some(&offsets)]).collect();
        let first = self.prepare_form(shape, layout, dtypes, sequential, Vec::new())?;
        let cshape = ChunkShape::packed_part(shape, chunk, chunked)?;
        let second = self.prepare_chunked(&cshape, layout, dtypes, inputs)?;
        Ok(first.then(second, vec![offsets]))
    }

    /// `passes` (record's chunked form, which writes no tape copy), then the copies
    /// `buffers` binds of the tape's k (`qk_len` elements) and g (`gate_len`) as copy
    /// dispatches: the tape's k and g are the call's k and g, element for element.
    fn then_tape_copies(
        &self,
        passes: Prepared,
        buffers: &RecordBuffers<'_>,
        (qk_len, gate_len): (usize, usize),
        dtypes: GdnDtypes,
    ) -> Result<Prepared> {
        let copies = [
            (
                "tape_k_grouped",
                buffers.k,
                buffers.tape_k_grouped,
                dtypes.act,
                qk_len,
            ),
            ("tape_g", buffers.g, buffers.tape_g, dtypes.gate, gate_len),
        ];
        let mut prepared = passes;
        for (arg, src, dst, dtype, len) in copies {
            let op = super::OP.name();
            let bytes = dtype.buffer_bytes(len).ok_or(Error::Overflow { op, arg })?;
            let words = bytes / 4;
            if let (Some(dst), 1..) = (dst, words) {
                let copy = self.prepare_copy_into(words as usize, src, dst, 0)?;
                prepared = prepared.then(copy, Vec::new());
            }
        }
        Ok(prepared)
    }

    /// How record_varlen at `shape` in `dtypes` runs its sequences (and
    /// record_layer_varlen's split form with it). Where the shape class of the call
    /// (its long sequences at the longest one's length) names a form, every sequence
    /// takes it (the tuning's measured choice, or `DELTATAPE_RECORD_CHUNKED`). Else, on
    /// the fast path, each sequence as [`VarlenSplit::by_length`] says; elsewhere the
    /// sequential kernel.
    pub fn record_varlen_split(
        &self,
        shape: &VarlenShape,
        dtypes: GdnDtypes,
    ) -> Result<VarlenSplit> {
        let at = shape.class_shape()?;
        let class = self.tuning().class(Op::Record, &at, dtypes);
        let whole = |chunked: bool| match chunked {
            true => VarlenSplit::Chunked(self.record_chunk(&at)),
            false => VarlenSplit::Sequential,
        };
        if let Some(chunked) = class.chunked {
            return Ok(whole(chunked));
        }
        if !self.chunked_on_matrix_units(&at, COOP_CHUNK) {
            return Ok(VarlenSplit::Sequential);
        }
        if shape.tokens() >= SKIPPED_SEQUENCE as usize {
            // No table can mark a sequence skipped: record's rule at the class shape.
            return Ok(whole(chunked_by_default(&at, &dtypes)));
        }
        let lens: Vec<usize> = (0..shape.sequences())
            .map(|s| shape.sequence(s).len())
            .collect();
        Ok(VarlenSplit::by_length(
            &lens,
            shape.packed().value_heads(),
            dtypes.act,
            COOP_CHUNK,
        ))
    }

    /// Validate record_layer's buffers (docs/SPEC.md "record_layer") and build its
    /// dispatch in the form [`GpuBackend::record_layer_form`] gives: fused (the prologue
    /// and record in one kernel, record's kernel and shape class with the raw inputs in
    /// place of q, k, v, g and beta), or split (the prologue pass into the backend's
    /// shared scratch, then [`GpuBackend::prepare_record`] on it). The optional outputs are
    /// record's: `state_out`, and the tape's copies of k and g (the prologue's k and g,
    /// which a rollback's replay reads). The window is read, not moved. `layer` must
    /// have been uploaded for `shape`'s dims (else `Error::ShapeMismatch`).
    pub fn prepare_record_layer(
        &self,
        shape: &LayerShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &RecordLayerBuffers<'_>,
    ) -> Result<Prepared> {
        self.prepare_record_layer_at(shape, layout, dtypes, buffers, (0, 0))
    }

    /// [`GpuBackend::prepare_record_layer`] with the window and x bound from these byte
    /// offsets of their buffers (a rollback's buffers of every layer's windows and conv
    /// inputs).
    pub(crate) fn prepare_record_layer_at(
        &self,
        shape: &LayerShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &RecordLayerBuffers<'_>,
        (window_offset, x_offset): (u64, u64),
    ) -> Result<Prepared> {
        let slots = raw_slots(super::LAYER.name(), shape, buffers)?;
        self.prepare_raw_padded(shape, layout, dtypes, slots, (window_offset, x_offset))
    }

    /// record_layer's dispatch over buffers in table order whose `layer` holds
    /// parameters packed for `shape`: the fused kernel, or where the class says so
    /// (`ShapeClass::split`) the prologue pass into scratch of its own, then record on
    /// its outputs (which may take the chunked form, as record does).
    pub(crate) fn prepare_raw_padded(
        &self,
        shape: &LayerShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        slots: Vec<Option<&wgpu::Buffer>>,
        (window_offset, x_offset): (u64, u64),
    ) -> Result<Prepared> {
        let mut offsets = vec![0; slots.len()];
        offsets[RecordLayerRow::Window as usize] = window_offset;
        offsets[RecordLayerRow::X as usize] = x_offset;
        if self.layer_runs_split(shape, dtypes)? {
            return self.prepare_layer_split(shape, layout, dtypes, &slots, &offsets);
        }
        self.prepare_form(shape, layout, dtypes, slots, offsets)
    }

    /// The form record_layer takes at `shape` with `dtypes` on this backend: split
    /// where its class says so (`ShapeClass::split`: by default at B >= 2, and for one
    /// sequence from `Threshold::LayerSplitFromSteps` steps on) and the prologue can
    /// (bf16 activations need an even Dk and Dv), else fused.
    pub fn record_layer_form(&self, shape: &LayerShape, dtypes: GdnDtypes) -> Result<LayerForm> {
        self.layer_form(shape, dtypes)
    }

    /// [`GpuBackend::record_layer_form`] for record_layer_varlen (by default split from
    /// two sequences on).
    pub fn record_layer_varlen_form(
        &self,
        shape: &VarlenLayerShape,
        dtypes: GdnDtypes,
    ) -> Result<LayerForm> {
        self.layer_form(shape, dtypes)
    }

    fn layer_form<F: Form>(&self, shape: &F, dtypes: GdnDtypes) -> Result<LayerForm> {
        Ok(match self.layer_runs_split(shape, dtypes)? {
            true => LayerForm::Split,
            false => LayerForm::Fused,
        })
    }

    /// Whether record_layer (and its packed form, and fold_record_layer) at `shape`
    /// runs as the prologue pass then record (fold_record): see `ShapeClass::split`.
    pub(crate) fn layer_runs_split<F: Form>(&self, shape: &F, dtypes: GdnDtypes) -> Result<bool> {
        let grid = shape.grid()?;
        let class = self
            .tuning()
            .class(Op::Record, &shape.class_shape()?, dtypes);

        let by_default =
            grid.batch() > 1 || grid.steps() as u64 >= Threshold::LayerSplitFromSteps.value();
        Ok(check_pairs(&grid, dtypes).is_ok() && class.split.unwrap_or(by_default))
    }

    /// The prologue into q, k, v, g and beta (`split_slots`), then record on them with
    /// record_layer's state, outputs and mask.
    fn prepare_layer_split(
        &self,
        shape: &LayerShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        slots: &[Option<&wgpu::Buffer>],
        offsets: &[u64],
    ) -> Result<Prepared> {
        let at = |row: RecordLayerRow| offsets[row as usize];
        let s = self.prologue_scratch(shape, dtypes)?;
        let raw_offsets = (at(RecordLayerRow::Window), at(RecordLayerRow::X));
        let (raw, record) = split_slots(slots, raw_offsets, &s);
        let first = self.prepare_layer_prologue(shape, dtypes, raw, prepared(&record))?;
        let second = self.prepare_record(shape.gdn(), layout, dtypes, &record)?;
        Ok(first.then(second, s))
    }

    /// The split form's scratch for q, k, v, g and beta at `shape` (the packed form's:
    /// at its packed tokens), from the backend's shared scratch.
    pub(crate) fn prologue_scratch(
        &self,
        shape: &LayerShape,
        dtypes: GdnDtypes,
    ) -> Result<Vec<wgpu::Buffer>> {
        let gdn = shape.gdn();
        let (act, gate) = (
            dtypes.act.size_bytes() as u64,
            dtypes.gate.size_bytes() as u64,
        );
        let hint = " (record_layer's split form holds q, k, v, g and beta; split the batch)";
        self.runtime.shared_scratch(
            (super::LAYER.name(), hint),
            &[
                ("q", gdn.qk_len(), act),
                ("k", gdn.qk_len(), act),
                ("v", gdn.v_len(), act),
                ("g", gdn.gate_len(), gate),
                ("beta", gdn.gate_len(), gate),
            ],
        )
    }

    /// The split form's first pass (record_layer's and fold_record_layer's): the
    /// prologue of `raw` into q, k, v, g and beta.
    pub(crate) fn prepare_layer_prologue(
        &self,
        shape: &LayerShape,
        dtypes: GdnDtypes,
        raw: RawBuffers<'_>,
        [q, k, v, g, beta]: [&wgpu::Buffer; 5],
    ) -> Result<Prepared> {
        let prologue = PrologueOperands {
            x: raw.x,
            window: raw.window,
            layer: raw.layer,
            a: raw.a,
            b: raw.b,
            q,
            k,
            v,
            g,
            beta,
        };
        self.prepare_prologue_at(shape, dtypes, &prologue, raw.offsets)
    }

    /// Validate record_layer_varlen's buffers and build its dispatch: record_layer's
    /// buffers at the packed tokens (`[N, ...]`), `window` `[S, C, K-1]`, `state_in` and
    /// `state_out` one per sequence; the offsets are the shape's, as for
    /// [`GpuBackend::prepare_record_varlen`]. Fused or split as
    /// [`GpuBackend::record_layer_varlen_form`] says.
    pub fn prepare_record_layer_varlen(
        &self,
        shape: &VarlenLayerShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        buffers: &RecordLayerBuffers<'_>,
    ) -> Result<Prepared> {
        let slots = raw_slots(super::LAYER_VARLEN.name(), shape.packed(), buffers)?;
        self.prepare_raw_packed(shape, layout, dtypes, slots)
    }

    /// record_layer_varlen's dispatch over buffers in table order (but the offsets),
    /// `layer` packed for `shape`: the fused kernel, or where the class says so the
    /// packed prologue into the shared scratch, then record_varlen on its outputs.
    pub(crate) fn prepare_raw_packed(
        &self,
        shape: &VarlenLayerShape,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        slots: Vec<Option<&wgpu::Buffer>>,
    ) -> Result<Prepared> {
        if !self.layer_runs_split(shape, dtypes)? {
            return self.prepare_packed(shape, layout, dtypes, slots);
        }
        let s = self.prologue_scratch(shape.packed(), dtypes)?;
        let (raw, record) = split_slots(&slots, (0, 0), &s);
        let first = self.prepare_prologue_varlen(shape, dtypes, raw, prepared(&record))?;
        let second = self.prepare_record_varlen(shape.varlen(), layout, dtypes, &record)?;
        Ok(first.then(second, s))
    }

    /// A packed form's dispatch: `slots` the form's table but the offsets, which the
    /// dispatch keeps in a small buffer of its own.
    fn prepare_packed<F: Form>(
        &self,
        shape: &F,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        slots: Vec<Option<&wgpu::Buffer>>,
    ) -> Result<Prepared> {
        let offsets = self.offsets_buffer(shape);
        let slots = slots.into_iter().chain([Some(&offsets)]).collect();
        let prepared = self.prepare_form(shape, layout, dtypes, slots, Vec::new())?;
        Ok(prepared.keeping(vec![offsets]))
    }

    /// A packed form's offsets in a small buffer of their own.
    fn offsets_buffer<F: Form>(&self, shape: &F) -> wgpu::Buffer {
        self.offsets_words(shape.offsets().unwrap_or_default())
    }

    /// A table of offsets in a small buffer of its own.
    fn offsets_words(&self, words: &[u32]) -> wgpu::Buffer {
        let usage = wgpu::BufferUsages::STORAGE;
        small_buffer(
            self.device(),
            self.queue(),
            bytemuck::cast_slice(words),
            usage,
        )
    }

    /// Every form's dispatch: `slots` in the form's table order (`None`: an optional
    /// row left out), each bound from its byte offset (`offsets`; empty: all 0). The
    /// kernel's class is record's (its tuning measured on record) at the form's class
    /// shape.
    pub(crate) fn prepare_form<F: Form>(
        &self,
        shape: &F,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        slots: Vec<Option<&wgpu::Buffer>>,
        offsets: Vec<u64>,
    ) -> Result<Prepared> {
        self.runtime
            .prepare(self.form_plan(shape, layout, dtypes, slots, offsets)?)
    }

    /// [`GpuBackend::prepare_form`]'s plan, before the device's checks.
    fn form_plan<'a, F: Form>(
        &self,
        shape: &'a F,
        layout: GqaLayout,
        dtypes: GdnDtypes,
        slots: Vec<Option<&'a wgpu::Buffer>>,
        offsets: Vec<u64>,
    ) -> Result<Plan<'a, F>> {
        let at = shape.class_shape()?;
        let class = self.tuning().class(Op::Record, &at, dtypes);
        let key = gdn::key(F::FORM.op(), &at, dtypes, self.reduction, false, &class)
            .with_bound(rows_bound(&slots));
        let (grid, taps) = (shape.grid()?, shape.taps());
        gdn::gdn_conv_plan(
            &grid,
            (layout, taps),
            key,
            (shape, F::SPECS),
            (slots, offsets),
        )
    }

    /// Whether record at `shape` runs in the chunked form: see `ShapeClass::chunked`.
    /// By default only on the matrix units; where the class asks for it, on the
    /// fast path's passes on vector units or the portable passes too.
    fn record_runs_chunked(&self, shape: &GdnShape, dtypes: GdnDtypes, class: &ShapeClass) -> bool {
        class.chunked.unwrap_or_else(|| {
            self.chunked_on_matrix_units(shape, COOP_CHUNK) && chunked_by_default(shape, &dtypes)
        })
    }

    /// The chunk record's chunked form takes at `shape`: the fast path's, on the matrix
    /// units or on vector units, else [`PORTABLE_CHUNK`].
    fn record_chunk(&self, shape: &GdnShape) -> ChunkSize {
        if self.chunked_on_matrix_units(shape, COOP_CHUNK)
            || self.chunked_on_vector_units(shape, COOP_CHUNK)
        {
            COOP_CHUNK
        } else {
            PORTABLE_CHUNK
        }
    }
}

/// Whether the call binds either of the tape's copies (of k and g).
fn has_tape_copies(buffers: &RecordBuffers<'_>) -> bool {
    buffers.tape_k_grouped.is_some() || buffers.tape_g.is_some()
}

/// `buffers` without the tape's copies.
fn no_tape<'b>(buffers: &RecordBuffers<'b>) -> RecordBuffers<'b> {
    RecordBuffers {
        tape_k_grouped: None,
        tape_g: None,
        ..*buffers
    }
}

/// The buffers in table order.
fn slots<'b>(buffers: &RecordBuffers<'b>) -> Vec<Option<&'b wgpu::Buffer>> {
    buffers.slots().into_iter().map(|b| b.copied()).collect()
}

/// A raw form's buffers in table order, its parameters checked against `shape`'s dims.
fn raw_slots<'b>(
    op: &'static str,
    shape: &LayerShape,
    buffers: &RecordLayerBuffers<'b>,
) -> Result<Vec<Option<&'b wgpu::Buffer>>> {
    let params = buffers.layer.for_shape(op, shape)?;
    let table = buffers.map_params(|_| params);
    Ok(table.slots().into_iter().map(|b| b.copied()).collect())
}

/// A raw form's slots (in table order; the padded and packed tables agree up to the
/// packed one's offsets, checked below) as the split form reads them: the prologue's
/// inputs, with the window's and x's byte offsets, and record's buffers on the
/// prologue's outputs (q, k, v, g, beta: `scratch`, but for k and g where the call binds
/// the tape's copies of them: the prologue's k and g are those copies, so it writes
/// them there and record reads them from there and writes no copy, which spares the
/// chunked form its copy dispatches).
fn split_slots<'b>(
    slots: &[Option<&'b wgpu::Buffer>],
    offsets: (u64, u64),
    scratch: &'b [wgpu::Buffer],
) -> (RawBuffers<'b>, RecordBuffers<'b>) {
    let opt = |row: RecordLayerRow| slots[row as usize];
    let slot = |row: RecordLayerRow| opt(row).expect("a required row");
    let raw = RawBuffers {
        x: slot(RecordLayerRow::X),
        window: slot(RecordLayerRow::Window),
        layer: slot(RecordLayerRow::Layer),
        a: slot(RecordLayerRow::A),
        b: slot(RecordLayerRow::B),
        offsets,
    };
    let record = RecordBuffers {
        q: &scratch[0],
        k: opt(RecordLayerRow::TapeKGrouped).unwrap_or(&scratch[1]),
        v: &scratch[2],
        g: opt(RecordLayerRow::TapeG).unwrap_or(&scratch[3]),
        beta: &scratch[4],
        state_in: slot(RecordLayerRow::StateIn),
        y: slot(RecordLayerRow::Y),
        state_out: opt(RecordLayerRow::StateOut),
        delta: slot(RecordLayerRow::Delta),
        mask: opt(RecordLayerRow::Mask),
        tape_k_grouped: None,
        tape_g: None,
    };
    (raw, record)
}

/// Where the split form's prologue writes q, k, v, g and beta: record's inputs.
fn prepared<'b>(record: &RecordBuffers<'b>) -> [&'b wgpu::Buffer; 5] {
    [record.q, record.k, record.v, record.g, record.beta]
}

// The packed raw table is the padded one's rows, then the offsets.
const _: () = {
    let packed = super::RecordLayerVarlenOperands::<()>::ROWS;
    let padded = super::RecordLayerOperands::<()>::ROWS;
    assert!(packed.len() == padded.len() + 1);
    let mut i = 0;
    while i < padded.len() {
        let (a, b) = (padded[i].name.as_bytes(), packed[i].name.as_bytes());
        assert!(a.len() == b.len() && padded[i].optional == packed[i].optional);
        let mut j = 0;
        while j < a.len() {
            assert!(a[j] == b[j]);
            j += 1;
        }
        i += 1;
    }
};
