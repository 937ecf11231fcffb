//! Tuning as data.
//!
//! - [`Threshold`]: every shape-class threshold the kernels use, one table of values,
//!   each with the reason it has that value and the run it came from. The kernel keys
//!   (`kernel.rs`), the rollback (`rollback.rs`) and the options read them from here.
//! - [`ShapeClass`]: an override of the class a record or replay key picks.
//! - [`Tuning`]: a backend's overrides (see [`crate::GpuBackend::with_tuning`]): one
//!   class per op for every shape (the `DELTATAPE_*` knobs, for benchmarks), and the
//!   classes [`crate::GpuBackend::tune`] measured per shape on one adapter.

pub(crate) mod file;

use crate::dtype::GdnDtypes;
use crate::engine::key::Op;
use crate::error::{Error, Result};
use crate::shape::GdnShape;
use std::fmt;

/// A shape-class threshold or default of the kernels, read from [`Threshold::row`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Threshold {
    /// Record's lanes per state row: `Dk / this`, a power of two.
    RecordElementsPerLane,
    /// Replay's lanes per state row up to [`Threshold::ReplayLongFromSteps`]: `Dk / this`.
    ReplayElementsPerLane,
    /// Replay's lanes per state row from [`Threshold::ReplayLongFromSteps`] on.
    ReplayElementsPerLaneLong,
    /// Replay's drafts of at least this many steps take the long-draft lanes.
    ReplayLongFromSteps,
    /// Record (large grids) stages 8 steps per chunk from this many steps, else 4.
    RecordChunk8FromSteps,
    /// Record's grids below this many invocations (two rows each) are small: one row
    /// per invocation, 8-step chunks, no scaled state.
    SmallGridInvocations,
    /// Record keeps its state as a scale times its registers from this many steps (on
    /// grids that are not small).
    ScaledFromSteps,
    /// fold_record fetches its fold's first chunk before the count on grids of at most
    /// this many lanes.
    EarlyFoldLanes,
    /// fold_record on grids of at most this many lanes (and short drafts) splits each
    /// state row over twice the lanes.
    TinyFoldLanes,
    /// The longest draft that [`Threshold::TinyFoldLanes`] applies to.
    TinyFoldMaxSteps,
    /// Bytes of workgroup memory a record / replay kernel may declare.
    WorkgroupMemoryBudget,
    /// Most staged values of one kind an invocation carries per chunk.
    MaxStageItems,
    /// A layer's conv inputs of at least this many bytes are kept by a copy dispatch in
    /// the draft's pass; smaller ones by `copy_buffer_to_buffer` after it.
    ConvCopyDispatchFrom,
    /// Microseconds a wait polls the device before it blocks (`GpuOptions::spin`).
    SpinMicros,
    /// Record runs in the chunked form on the matrix units from this many steps, where
    /// the backend may (see `ShapeClass::chunked`) ...
    ChunkedFromSteps,
    /// ... and the batch has at most this many (sequence, value head) pairs with f32
    /// activations ...
    ChunkedMaxHeads,
    /// ... or this many with 16-bit activations (bf16, f16: the first pass stages them
    /// in one f16 part, not two).
    ChunkedMaxHeadsHalf,
    /// record_layer of one sequence (B = 1) runs as the prologue pass then record from
    /// this many steps on; a batch always does (see `ShapeClass::split`).
    LayerSplitFromSteps,
    /// Record's steps a row reduction serves on small grids (drafts of more than one
    /// step; see `ShapeClass::steps_per_sum`).
    RecordStepsPerSum,
}

/// One row of the table: a threshold's value, why it has it, and where that was measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThresholdRow {
    pub name: &'static str,
    pub value: u64,
    pub reason: &'static str,
    /// A file of `benches/results/`, or why there is none.
    pub source: &'static str,
}

impl Threshold {
    pub const ALL: [Threshold; 19] = [
        Threshold::RecordElementsPerLane,
        Threshold::ReplayElementsPerLane,
        Threshold::ReplayElementsPerLaneLong,
        Threshold::ReplayLongFromSteps,
        Threshold::RecordChunk8FromSteps,
        Threshold::SmallGridInvocations,
        Threshold::ScaledFromSteps,
        Threshold::EarlyFoldLanes,
        Threshold::TinyFoldLanes,
        Threshold::TinyFoldMaxSteps,
        Threshold::WorkgroupMemoryBudget,
        Threshold::MaxStageItems,
        Threshold::ConvCopyDispatchFrom,
        Threshold::SpinMicros,
        Threshold::ChunkedFromSteps,
        Threshold::ChunkedMaxHeads,
        Threshold::ChunkedMaxHeadsHalf,
        Threshold::LayerSplitFromSteps,
        Threshold::RecordStepsPerSum,
    ];

    /// The threshold's value.
    pub const fn value(self) -> u64 {
        self.row().value
    }

    /// The table: every threshold with its value, reason and source.
    pub const fn row(self) -> ThresholdRow {
        TABLE[self as usize]
    }
}

/// [`Threshold::row`]'s table, in the enum's order (a test checks it): one row a line,
/// so that it reads as the table it is.
#[rustfmt::skip]
const TABLE: [ThresholdRow; 19] = [
    ThresholdRow { name: "record_elements_per_lane", value: 32, reason: "4 lanes a row at Dk = 128: two shuffle levels per reduction; 8 lanes lost 5-32% on large grids", source: "h200-2026-12-01-class-sweep.txt" },
    ThresholdRow { name: "replay_elements_per_lane", value: 8, reason: "16 lanes a row up to T = 8 (B = 64, T = 8: 78 us against 82 with 8 lanes; the round 0.4-1% faster)", source: "h200-2026-11-30-replay-lanes-ab.txt" },
    ThresholdRow { name: "replay_elements_per_lane_long", value: 16, reason: "8 lanes a row past T = 8 (B = 256, T = 16: 369 us against 381); 16 lanes, 16-step chunks and 2 rows per invocation tie or lose", source: "h200-2026-11-30-replay-lanes-ab.txt, h200-2026-12-01-class-sweep.txt" },
    ThresholdRow { name: "replay_long_from_steps", value: 9, reason: "where the per-step work outweighs the shorter row reductions of more lanes", source: "h200-2026-11-30-replay-lanes-ab.txt" },
    ThresholdRow { name: "record_chunk8_from_steps", value: 5, reason: "8-step chunks: B = 256, T = 8: 523 us against 590; they cost 1-6% at T = 4", source: "h200-2026-11-30-record-chunk-ab.txt" },
    ThresholdRow { name: "small_grid_invocations", value: 1 << 17, reason: "about half of what an H200 keeps resident; below it the GPU is far from full and one row per invocation with 8-step chunks is faster (B = 8, T = 16: 44 us against 58; on an H100 bf16 44.8 against 51.3, f32 42.1 against 53.1, and f32 within 3% at every B = 1-8 and T = 16-2048); in bf16 from B = 4 and T = 256 the large class is 6-8% faster on the H100 (two rounds, with the bf16 pairs' shuffle), slower at T = 16, not yet taken", source: "h100-2026-12-07-grid-class.txt, h100-2026-12-07-grid-class-2.txt; the H200 figure: no A/B file kept; the large-grid side re-checked in h200-2026-12-01-class-sweep.txt" },
    ThresholdRow { name: "scaled_from_steps", value: 2, reason: "the scaled state made record 3-11% faster at B = 64 and 256, T >= 4, and 1.5-7% slower at B = 1 and 8, where the extra scalar work lies on the latency path", source: "h200-2026-12-01-scaled-ab.txt" },
    ThresholdRow { name: "early_fold_lanes", value: 1 << 15, reason: "B <= 2 at Qwen3-Next's shape: the deferred B = 1 round 2.4-2.6% faster, B = 8 and 64 2-3% slower, where the extra bytes cost more than the latency they hide", source: "h200-2026-11-30-fold-ab.txt, h200-2026-12-01-early-fold-ab.txt" },
    ThresholdRow { name: "tiny_fold_lanes", value: 1 << 14, reason: "B = 1 at Qwen3-Next's shape: the deferred B = 1, T = 4 round 254-255 -> 249-250 us; B = 2, record and T = 16 got 1-10% slower with it", source: "h200-2026-12-01-fold-lanes-ab.txt" },
    ThresholdRow { name: "tiny_fold_max_steps", value: 4, reason: "T = 16 got slower with twice the lanes", source: "h200-2026-12-01-fold-lanes-ab.txt" },
    ThresholdRow { name: "workgroup_memory_budget", value: 16 << 10, reason: "the WebGPU default of max_compute_workgroup_storage_size, which every adapter offers; the staged chunk shrinks until the kernel fits", source: "not measured: the WebGPU specification's default limits" },
    ThresholdRow { name: "max_stage_items", value: 4, reason: "small workgroups (tiny Dk or Dv) would unroll many staging loads per invocation, which costs compile time (lavapipe: seconds) for no speed", source: "not measured on the H200: compile time on lavapipe" },
    ThresholdRow { name: "conv_copy_dispatch_from", value: 2 << 20, reason: "copy_buffer_to_buffer moved about 400 GB/s (32 MiB, B = 64, T = 16: about 80 us); at 1 MiB and below the dispatch and its barrier cost more than the transfer (B = 1, T = 8: 575 against 491 us)", source: "h200-2026-11-30-conv-copy-ab.txt" },
    ThresholdRow { name: "spin_micros", value: 2000, reason: "a blocking wait sleeps until the driver wakes the thread, which added 35-100 us to a resident round; waits longer than this block", source: "h200-2026-12-01-spin-ab.txt" },
    ThresholdRow { name: "chunked_from_steps", value: 512, reason: "from here on the fast path (its first pass in 24 KiB) beats record at B = 1 (32 value heads) in both dtypes: bf16 149 against 235 us at T = 512, 480 against 966 at 2048, 1748 against 3847 at 8192; f32 146 against 192, 477 against 766, 1740 against 3047; at B = 2 from 512 in bf16 (267 against 313) and from 1024 in f32 (486 against 511; at 512 it loses 3%, 267 against 259); below 512 not measured", source: "h100-2026-12-06-thresholds.txt" },
    ThresholdRow { name: "chunked_max_heads", value: 64, reason: "f32 activations: B = 2 at Qwen3-Next's 32 value heads wins from 1024 steps (904 against 1013 us at T = 2048, 3390 against 4046 at 8192); at B = 4 (128 heads) it loses at T = 1024 (843 against 796) and wins 4% at 8192 (6086 against 6308) with the first pass's four-value stores, lost at every T before them (493 against 405 at 512)", source: "h100-2026-12-06-thresholds.txt, h100-2026-12-06-p1-quads.txt" },
    ThresholdRow { name: "chunked_max_heads_half", value: 128, reason: "bf16 activations: B = 2 wins from 512 steps (912 against 1236 us at T = 2048, 3404 against 4922 at 8192); B = 4 (128 heads) wins by 13-21% with the first pass's four-value stores (816 against 936 at T = 1024, 5833 against 7429 at 8192; at T = 512 it lost 4% before them, 494 against 475, not measured since); B = 8 not measured; f16 activations take bf16's first-pass form and are assumed alike", source: "h100-2026-12-06-thresholds.txt, h100-2026-12-06-p1-quads.txt" },
    ThresholdRow { name: "layer_split_from_steps", value: 8, reason: "one sequence (B = 1) runs fused below 8 steps, where the split form's second dependent dispatch costs what its prologue saves (H100, f32: 7.4 fused against 7.9 us split at T = 1, 8.7 against 9.4 at T = 4; bf16 0.3-0.8 us the other way; the f32 36-layer round at B = 1, T = 4 on the H200: 509 against 554 us); at T = 8 the forms tie (bf16 13.7 / 12.3, f32 10.5 / 11.4), from T = 16 the split form wins (22.4 against 15.9), 3.9-4.2x at T = 2048 and 8192 through the fast path; a batch (B >= 2) always splits: B = 8, T = 1 24.0 against 15.4, B = 256, T = 16 1753 against 976", source: "h100-2026-12-05-split.txt, h200-2026-12-05-split-closing.txt" },
    ThresholdRow { name: "record_steps_per_sum", value: 1, reason: "one step a reduction: on an H100, 2, 4 and 8 steps a reduction took record 1.3-2.8x as long at B = 1 and 8 (bf16 B = 1, T = 2048: 1437, 1557, 1966 us against 972; f32 B = 1, T = 8192: 5495 at 4 against 3060), and on lavapipe 1.5, 1.75 and 2.4x (B = 1, T = 256: 47, 55, 74 ms against 31.5); `tune` times 1, 2, 4 and 8 on the user's adapter", source: "h100-2026-12-07-groups.txt, lavapipe-2026-12-07-groups.txt" },
];

/// Overrides of the shape class a kernel key picks for record or replay (`None`: the
/// table's default). Each value is checked when a backend takes the [`Tuning`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ShapeClass {
    /// Lanes that share one state row: a power of two up to 64.
    pub lanes: Option<u32>,
    /// State rows per workgroup: a power of two from 2, `lanes * rows <= 1024`.
    pub rows: Option<u32>,
    /// State rows each invocation holds: 1, 2 or 4.
    pub rows_per_invocation: Option<u32>,
    /// Steps staged in workgroup memory per barrier pair: 1, 2, 4, 8 or 16.
    pub chunk: Option<u32>,
    /// fold_record only: fetch the deferred commit's first chunk before its count is
    /// known (`GdnClass::early_fold`). Record's class only.
    pub early_fold: Option<bool>,
    /// record and fold_record: keep the state as a scale times its registers
    /// (`GdnClass::scaled_state`). Record's class only.
    pub scaled_state: Option<bool>,
    /// record and fold_record: the steps one row reduction serves, 1, 2, 4 or 8
    /// (`GdnClass::steps_per_sum`; at most the chunk; 1 where the state is scaled).
    /// Record's class only.
    pub steps_per_sum: Option<u32>,
    /// record only: run the chunked form (the tape's copies, where a call binds them,
    /// as copy dispatches after its passes): `record_chunked`'s fast path (C = 64) with
    /// [`crate::ChunkPrecision::FastF16`] and `Dk <= 128`, on the matrix units where the
    /// backend has cooperative matrices, else on vector units where it has `SHADER_F16`
    /// and their workgroup memory; otherwise its portable passes (C = 32), with their
    /// errors where they refuse the shape. `None`: the fast path on the matrix units
    /// alone, from [`Threshold::ChunkedFromSteps`] steps on, up to
    /// [`Threshold::ChunkedMaxHeads`] (f32 activations) or
    /// [`Threshold::ChunkedMaxHeadsHalf`] (bf16, f16) (sequence, value head) pairs. The
    /// other forms are never the table's default (no adapter without matrix units was
    /// measured where they win: on lavapipe the sequential kernel does), but `tune`
    /// times them at shapes of two chunks or more and keeps them where they win on the
    /// adapter.
    pub chunked: Option<bool>,
    /// record_layer (padded) only: run as two dispatches, the prologue pass writing q,
    /// k, v, g and beta, then record on them (which may then take its chunked form),
    /// where the prologue can (bf16 activations need an even Dk and Dv); `tune`
    /// measures it beside record's class. `None`: from
    /// [`Threshold::LayerSplitFromSteps`] steps on at B = 1, and at every B >= 2.
    pub split: Option<bool>,
}

impl ShapeClass {
    /// Check the values; `replay`: the class is replay's, which has no early fold and
    /// no scaled state (a value for them would do nothing).
    pub(crate) fn check(&self, what: &'static str, replay: bool) -> Result<()> {
        let bad = |arg: &'static str, why: &str| {
            Err(Error::Unsupported {
                op: what,
                arg,
                why: why.into(),
            })
        };
        if self.lanes.is_some_and(|v| !v.is_power_of_two() || v > 64) {
            return bad("lanes", "a power of two up to 64");
        }
        let lanes = self.lanes.unwrap_or(64);
        if self
            .rows
            .is_some_and(|v| v < 2 || !v.is_power_of_two() || v * lanes > 1024)
        {
            return bad("rows", "a power of two from 2, lanes * rows <= 1024");
        }
        if self
            .rows_per_invocation
            .is_some_and(|v| ![1, 2, 4].contains(&v))
        {
            return bad("rows_per_invocation", "1, 2 or 4");
        }
        if self.chunk.is_some_and(|v| !v.is_power_of_two() || v > 16) {
            return bad("chunk", "1, 2, 4, 8 or 16");
        }
        if self
            .steps_per_sum
            .is_some_and(|v| !v.is_power_of_two() || v > 8)
        {
            return bad("steps_per_sum", "1, 2, 4 or 8");
        }
        if self.scaled_state == Some(true) && self.steps_per_sum.is_some_and(|v| v > 1) {
            return bad(
                "steps_per_sum",
                "the scaled state takes one step a reduction: both set would leave one unheeded",
            );
        }
        if replay && self.steps_per_sum.is_some() {
            return bad(
                "steps_per_sum",
                "replay takes one step a reduction: the value would do nothing",
            );
        }
        if replay && self.early_fold.is_some() {
            return bad(
                "early_fold",
                "replay has no early fold: the value would do nothing",
            );
        }
        if replay && self.chunked.is_some() {
            return bad(
                "chunked",
                "replay has no chunked form: the value would do nothing",
            );
        }
        if replay && self.split.is_some() {
            return bad(
                "split",
                "replay has no prologue: the value would do nothing",
            );
        }
        if replay && self.scaled_state.is_some() {
            return bad(
                "scaled_state",
                "replay has no scaled state: the value would do nothing",
            );
        }
        Ok(())
    }

    /// Read `DELTATAPE_<OP>_{LANES,ROWS,RPT,CHUNK}` and, for record,
    /// `DELTATAPE_RECORD_SPS` (steps a reduction) and
    /// `DELTATAPE_RECORD_{EARLY,SCALED,CHUNKED,SPLIT}` (0 or 1). `replay`: the knobs replay has no
    /// use for (`EARLY`, `SCALED`, `SPS`) are an error when set.
    pub(crate) fn from_env(op: &str, replay: bool) -> Result<Self> {
        let read = |what: &str| -> Result<Option<u32>> {
            let var = format!("DELTATAPE_{op}_{what}");
            match std::env::var(&var) {
                Err(_) => Ok(None),
                Ok(value) => value.parse::<u32>().map(Some).map_err(|_| Error::BadEnv {
                    var,
                    value,
                    why: "expected a whole number",
                }),
            }
        };
        let flag = |what: &str| -> Result<Option<bool>> {
            let var = format!("DELTATAPE_{op}_{what}");
            if replay {
                return match std::env::var(&var) {
                    Err(_) => Ok(None),
                    Ok(value) => Err(Error::BadEnv {
                        var,
                        value,
                        why: "replay has no such class parameter: the knob would do nothing",
                    }),
                };
            }
            match read(what)? {
                None => Ok(None),
                Some(v @ (0 | 1)) => Ok(Some(v == 1)),
                Some(v) => Err(Error::BadEnv {
                    var,
                    value: v.to_string(),
                    why: "expected 0 or 1",
                }),
            }
        };
        Ok(ShapeClass {
            lanes: read("LANES")?,
            rows: read("ROWS")?,
            rows_per_invocation: read("RPT")?,
            chunk: read("CHUNK")?,
            early_fold: flag("EARLY")?,
            scaled_state: flag("SCALED")?,
            steps_per_sum: match replay {
                false => read("SPS")?,
                true => match std::env::var(format!("DELTATAPE_{op}_SPS")) {
                    Err(_) => None,
                    Ok(value) => {
                        return Err(Error::BadEnv {
                            var: format!("DELTATAPE_{op}_SPS"),
                            value,
                            why: "replay takes one step a reduction: the knob would do nothing",
                        })
                    }
                },
            },
            chunked: flag("CHUNKED")?,
            split: flag("SPLIT")?,
        })
    }
}

/// A class [`crate::GpuBackend::tune`] measured for one (op, shape, dtypes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Choice {
    /// Record or replay.
    pub op: Op,
    pub shape: GdnShape,
    pub dtypes: GdnDtypes,
    /// The class chosen (all `None`: the table's default won).
    pub class: ShapeClass,
    /// Median microseconds of one dispatch in the chosen class, and in the default one.
    pub micros: f64,
    pub default_micros: f64,
    /// Whether the times are GPU timestamps (else wall clock, submit to completion).
    pub gpu_clock: bool,
}

/// The shape classes a [`crate::GpuBackend`] uses where they differ from the crate's
/// H200-measured defaults: set by hand or from the environment ([`Tuning::from_env`]),
/// or measured on the adapter itself ([`crate::GpuBackend::tune`]).
///
/// The default value overrides nothing. A class never changes results beyond the
/// dtype tolerance (every class computes the same sums in another order).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tuning {
    /// record's (and fold_record's) class at every shape without a choice of its own.
    pub(crate) record: ShapeClass,
    /// replay's class at every shape without a choice of its own.
    pub(crate) replay: ShapeClass,
    /// Measured classes, per (op, shape, dtypes).
    pub(crate) choices: Vec<Choice>,
    /// The adapter the choices were measured on.
    pub(crate) adapter: Option<AdapterKey>,
}

impl Tuning {
    /// The default tuning overridden by the shape-class knobs
    /// `DELTATAPE_{RECORD,REPLAY}_{LANES,ROWS,RPT,CHUNK}`, `DELTATAPE_RECORD_SPS` and
    /// `DELTATAPE_RECORD_{EARLY,SCALED}` (0 or 1). A knob that has no effect
    /// (`DELTATAPE_REPLAY_EARLY`, `DELTATAPE_REPLAY_SCALED`) is an `Error::BadEnv`.
    pub fn from_env() -> Result<Self> {
        let tuning = Tuning {
            record: ShapeClass::from_env("RECORD", false)?,
            replay: ShapeClass::from_env("REPLAY", true)?,
            ..Tuning::default()
        };
        tuning.check()?;
        Ok(tuning)
    }

    /// Check every class.
    pub(crate) fn check(&self) -> Result<()> {
        self.record.check("record_class", false)?;
        self.replay.check("replay_class", true)?;
        for c in &self.choices {
            if c.op == Op::Record {
                c.class.check("record_class", false)?;
            } else if c.op == Op::Replay {
                c.class.check("replay_class", true)?;
            } else {
                return Err(Error::Unsupported {
                    op: "with_tuning",
                    arg: "tuning",
                    why: format!("{} has no shape class to tune", c.op.name()),
                });
            }
        }
        Ok(())
    }

    /// The adapter the measured classes are for (`None`: nothing measured).
    pub fn adapter(&self) -> Option<&AdapterKey> {
        self.adapter.as_ref()
    }

    /// Whether the tuning overrides nothing (the table's defaults everywhere).
    pub fn is_default(&self) -> bool {
        self.record == ShapeClass::default()
            && self.replay == ShapeClass::default()
            && self
                .choices
                .iter()
                .all(|c| c.class == ShapeClass::default())
    }

    /// record's class at every shape without a choice of its own.
    #[cfg(feature = "workshop")]
    #[doc(hidden)]
    pub fn record_class(&self) -> ShapeClass {
        self.record
    }

    /// replay's class at every shape without a choice of its own.
    #[cfg(feature = "workshop")]
    #[doc(hidden)]
    pub fn replay_class(&self) -> ShapeClass {
        self.replay
    }

    /// This tuning with `class` for record (and fold_record) at every shape without a
    /// measured class.
    #[cfg(feature = "workshop")]
    #[doc(hidden)]
    pub fn with_record_class(self, class: ShapeClass) -> Self {
        Tuning {
            record: class,
            ..self
        }
    }

    /// This tuning with `class` for replay at every shape without a measured class.
    #[cfg(feature = "workshop")]
    #[doc(hidden)]
    pub fn with_replay_class(self, class: ShapeClass) -> Self {
        Tuning {
            replay: class,
            ..self
        }
    }

    /// The measured classes.
    #[cfg(feature = "workshop")]
    #[doc(hidden)]
    pub fn choices(&self) -> &[Choice] {
        &self.choices
    }

    /// The class `op` takes at `shape` and `dtypes`: the measured one, else the
    /// op's override for every shape. fold_record takes record's override (it runs
    /// record's loop) but not record's measured classes: its own thresholds
    /// (`TinyFoldLanes`, `EarlyFoldLanes`) are not what was measured.
    pub(crate) fn class(&self, op: Op, shape: &GdnShape, dtypes: GdnDtypes) -> ShapeClass {
        let measured = || {
            self.choices
                .iter()
                .find(|c| c.op == op && c.shape == *shape && c.dtypes == dtypes)
                .map(|c| c.class)
        };
        // fold_record is record's step: it takes record's class, not its choices.
        if op == Op::Record {
            measured().unwrap_or(self.record)
        } else if op == Op::Replay {
            measured().unwrap_or(self.replay)
        } else if op == Op::FoldRecord || op == Op::FoldRecordLayer {
            self.record
        } else {
            ShapeClass::default()
        }
    }
}

/// An adapter and its driver, as wgpu reports them ([`wgpu::AdapterInfo`]): what a
/// tuning was measured on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AdapterKey {
    pub name: String,
    /// wgpu's backend (`Vulkan`, `Metal`, ...).
    pub backend: String,
    pub vendor: u32,
    pub device: u32,
    pub driver: String,
    pub driver_info: String,
}

impl AdapterKey {
    /// The key of an adapter (tabs and line breaks in its strings become spaces, as the
    /// tuning file stores them).
    pub fn from_info(info: &wgpu::AdapterInfo) -> Self {
        let clean = |s: &str| s.replace(['\t', '\n', '\r'], " ");
        AdapterKey {
            name: clean(&info.name),
            backend: format!("{:?}", info.backend),
            vendor: info.vendor,
            device: info.device,
            driver: clean(&info.driver),
            driver_info: clean(&info.driver_info),
        }
    }
}

impl fmt::Display for AdapterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}, {:#06x}:{:#06x}, driver {} {})",
            self.name, self.backend, self.vendor, self.device, self.driver, self.driver_info
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Threshold;

    /// `TABLE` is indexed by the enum: each row must be its variant's.
    #[test]
    fn each_threshold_reads_its_own_row() {
        for (i, threshold) in Threshold::ALL.into_iter().enumerate() {
            assert_eq!(threshold as usize, i);
            let mut snake = String::new();
            for c in format!("{threshold:?}").chars() {
                if c.is_ascii_uppercase() && !snake.is_empty() {
                    snake.push('_');
                }
                snake.push(c.to_ascii_lowercase());
            }
            assert_eq!(threshold.row().name, snake);
        }
    }
}
