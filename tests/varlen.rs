//! record_varlen (packed sequences of their own lengths, one state each): the CPU twin
//! against record on each sequence alone, the GPU kernel against the CPU twin (every
//! dtype set, both layouts, masks, lengths 0, 1 and around the staging chunks and the
//! chunked form's 64), each sequence's GPU state against a GPU record of that sequence
//! alone, the resident dispatch against the host call, and every bad offset or count as
//! its typed error with nothing written.

mod common;
use common::*;
use deltatape::gpu::RecordBuffers;
use deltatape::{
    wgpu, Backend, Element, Error, GdnDtypes, GdnShape, GpuBackend, GqaLayout, RecordInputs,
    Recorded, VarlenShape,
};
use half::{bf16, f16};

subgroup_width_tests!();

/// Hk, Hv, Dk, Dv of the small shapes: GQA 2 -> 4, Dk a multiple of 4, Dv even (bf16
/// outputs pair rows).
const HEADS: [usize; 4] = [2, 4, 16, 8];

/// Length mixes: empty and one-step sequences, and lengths either side of the
/// kernels' staging chunks (4, 8) and of the chunked form's 64.
const MIXES: [&[usize]; 4] = [
    &[5, 0, 1, 8, 3, 9, 0, 4],
    &[63, 1, 64, 0, 65, 7],
    &[0],
    &[1, 1, 2],
];

/// A record draw at the packed tokens (one sequence of N steps), with one state per
/// sequence.
fn draw_varlen(shape: &VarlenShape, seed: u64) -> Draw {
    let mut d = draw(shape.packed(), seed);
    d.state = Rng::new(seed ^ 0x5eed).vec(shape.state_len(), -0.5, 0.5);
    d
}

/// One sequence's slice of the packed operands: `per_token` values a token.
fn tokens_of<E: Copy>(shape: &VarlenShape, s: usize, x: &[E], per_token: usize) -> Vec<E> {
    let r = shape.sequence(s);
    x[r.start * per_token..r.end * per_token].to_vec()
}

/// Record on sequence `s` of `shape` alone, on `backend`: its own tokens and state.
fn record_one<A: Element, S: Element, P: Element, G: Element>(
    backend: &Backend,
    shape: &VarlenShape,
    layout: GqaLayout,
    s: usize,
    inputs: &RecordInputs<'_, A, G>,
    state: &[S],
) -> (GdnShape, Recorded<A, S, P>) {
    let p = shape.packed();
    let one = p.with_steps(shape.sequence(s).len()).unwrap();
    let qk = p.key_heads() * p.key_dim();
    let (v, g) = (p.value_heads() * p.value_dim(), p.value_heads());
    let (q, k) = (
        tokens_of(shape, s, inputs.q, qk),
        tokens_of(shape, s, inputs.k, qk),
    );
    let vv = tokens_of(shape, s, inputs.v, v);
    let (gg, beta) = (
        tokens_of(shape, s, inputs.g, g),
        tokens_of(shape, s, inputs.beta, g),
    );
    let mask = inputs.mask.map(|m| tokens_of(shape, s, m, 1));
    let one_inputs = RecordInputs {
        q: &q,
        k: &k,
        v: &vv,
        g: &gg,
        beta: &beta,
        mask: mask.as_deref(),
    };
    let state = &state[s * one.state_len()..][..one.state_len()];
    let out = backend.record(&one, layout, &one_inputs, state).unwrap();
    (one, out)
}

/// Sequence `s`'s part of a varlen result: its y, state and delta.
fn part<A: Element, S: Element, P: Element>(
    shape: &VarlenShape,
    s: usize,
    r: &Recorded<A, S, P>,
) -> Recorded<A, S, P> {
    let p = shape.packed();
    let v = p.value_heads() * p.value_dim();
    let state = r.state.len() / shape.sequences();
    Recorded {
        y: tokens_of(shape, s, &r.y, v),
        state: r.state[s * state..][..state].to_vec(),
        delta: tokens_of(shape, s, &r.delta, v),
    }
}

#[test]
fn cpu_varlen_is_record_on_each_sequence_alone() {
    let cpu = cpu();
    for (i, lens) in MIXES.iter().enumerate() {
        let shape = varlen_of(lens, HEADS);
        let d = draw_varlen(&shape, 10 + i as u64);
        let m = mask(shape.packed(), i as u64);
        for (layout, mask) in [(GqaLayout::Blocked, None), (GqaLayout::Tiled, Some(&m[..]))] {
            let t = d.typed::<bf16>();
            let got: Recorded<bf16, f32, f16> = cpu
                .record_varlen(&shape, layout, &t.inputs(mask), &d.state)
                .unwrap();
            for s in 0..shape.sequences() {
                let (_, want) = record_one::<bf16, f32, f16, bf16>(
                    &cpu,
                    &shape,
                    layout,
                    s,
                    &t.inputs(mask),
                    &d.state,
                );
                assert_eq!(part(&shape, s, &got), want, "{lens:?} sequence {s}");
            }
        }
    }
}

/// record_varlen on the GPU against the CPU twin at `A`, `S`, `P` (gates `G`).
fn gpu_case<A: Element, S: Element, P: Element, G: Element>(
    g: &GpuBackend,
    shape: &VarlenShape,
    layout: GqaLayout,
    masked: bool,
    seed: u64,
) {
    let d = draw_varlen(shape, seed);
    let m = mask(shape.packed(), seed);
    let mask = masked.then_some(&m[..]);
    let t = d.typed_gated::<A, G>();
    let state: Vec<S> = deltatape::internals::cast_from_f32(&d.state);
    let want: Recorded<A, S, P> = cpu()
        .record_varlen(&shape.clone(), layout, &t.inputs(mask), &state)
        .unwrap();
    let got: Recorded<A, S, P> = g
        .record_varlen(shape, layout, &t.inputs(mask), &state)
        .unwrap();
    let dtypes = GdnDtypes::of_gated::<A, S, P, G>();
    let what = format!("{:?} {layout:?} mask {masked} {dtypes:?}", shape.offsets());
    assert_record_close(&what, &got, &want);
}

/// Every dtype of the activations, the state and the tape (the layout and the mask
/// alternate), and f32 gates beside bf16 activations.
#[test]
fn gpu_varlen_matches_the_cpu_at_every_dtype_set() {
    let Some(g) = gpu() else { return };
    let shape = varlen_of(MIXES[0], HEADS);
    let mut seed = 0;
    macro_rules! each_state_tape {
        ($a:ty) => {
            each_state_tape!($a, f32);
            each_state_tape!($a, bf16);
            each_state_tape!($a, f16);
        };
        ($a:ty, $s:ty) => {
            for_tape!($a, $s, f32);
            for_tape!($a, $s, bf16);
            for_tape!($a, $s, f16);
        };
    }
    macro_rules! for_tape {
        ($a:ty, $s:ty, $p:ty) => {{
            seed += 1;
            let layout = LAYOUTS[seed as usize % 2];
            gpu_case::<$a, $s, $p, $a>(&g, &shape, layout, seed % 3 == 0, seed);
        }};
    }
    each_state_tape!(f32);
    each_state_tape!(bf16);
    each_state_tape!(f16);
    gpu_case::<bf16, f32, f32, f32>(&g, &shape, GqaLayout::Blocked, true, 99);
}

/// Every length mix, both layouts, with and without a mask; and a shape with more
/// lanes a row and longer sequences (the scaled state's kernels).
#[test]
fn gpu_varlen_matches_the_cpu_at_every_length_mix() {
    let Some(g) = gpu() else { return };
    for (i, lens) in MIXES.iter().enumerate() {
        let shape = varlen_of(lens, HEADS);
        for layout in LAYOUTS {
            for masked in [false, true] {
                gpu_case::<f32, f32, f32, f32>(&g, &shape, layout, masked, i as u64);
            }
        }
    }
    // Random mixes of 1 to 9 sequences, lengths drawn from the edge cases and 0..80.
    for seed in 0..4u64 {
        let mut rng = Rng::new(seed);
        let edges = [0, 1, 3, 4, 5, 7, 8, 9, 63, 64, 65];
        let lens: Vec<usize> = (0..1 + rng.below(9))
            .map(|_| match rng.below(2) {
                0 => edges[rng.below(edges.len() as u64) as usize],
                _ => rng.below(80) as usize,
            })
            .collect();
        let shape = varlen_of(&lens, HEADS);
        let layout = LAYOUTS[seed as usize % 2];
        gpu_case::<f32, f32, f32, f32>(&g, &shape, layout, seed % 2 == 1, 20 + seed);
    }
    let wide = varlen_of(&[70, 0, 3, 129], [1, 2, 64, 32]);
    gpu_case::<f32, f32, f32, f32>(&g, &wide, GqaLayout::Blocked, false, 7);
    gpu_case::<bf16, f32, bf16, bf16>(&g, &wide, GqaLayout::Tiled, true, 8);
}

/// Each sequence's final state (and y, delta) on the GPU against a GPU record of that
/// sequence alone: the packed call is the batch of single calls.
#[test]
fn gpu_varlen_sequence_is_a_record_of_it_alone() {
    let Some(g) = gpu() else { return };
    let backend = Backend::Gpu(g.clone());
    let shape = varlen_of(&[9, 0, 17, 1, 40], [2, 4, 32, 16]);
    let d = draw_varlen(&shape, 3);
    let t = d.typed::<f32>();
    let got: Recorded<f32, f32, f32> = g
        .record_varlen(&shape, GqaLayout::Blocked, &t.inputs(None), &d.state)
        .unwrap();
    for s in 0..shape.sequences() {
        let (one, want) = record_one::<f32, f32, f32, f32>(
            &backend,
            &shape,
            GqaLayout::Blocked,
            s,
            &t.inputs(None),
            &d.state,
        );
        let what = format!("sequence {s} of {:?} ({one:?})", shape.offsets());
        assert_record_close(&what, &part(&shape, s, &got), &want);
        if shape.sequence(s).is_empty() {
            assert_eq!(part(&shape, s, &got).state, want.state, "{what}: untouched");
        }
    }
}

/// The buffers of a resident call at `shape` (f32), filled from `d`; y, delta and
/// state_out hold a sentinel.
struct Resident {
    inputs: Vec<wgpu::Buffer>,
    y: wgpu::Buffer,
    delta: wgpu::Buffer,
    state_out: wgpu::Buffer,
}

const SENTINEL: f32 = 12345.0;

impl Resident {
    fn new(g: &GpuBackend, shape: &VarlenShape, d: &Draw, states: usize) -> Self {
        let usage = wgpu::BufferUsages::COPY_SRC;
        let state = &d.state[..states * shape.state_len() / shape.sequences()];
        let inputs = [&d.q, &d.k, &d.v, &d.g, &d.beta, &state.to_vec()]
            .map(|x| storage_buffer(g, x, usage))
            .into_iter()
            .collect();
        let out = |n: usize| storage_buffer(g, &vec![SENTINEL; n], usage);
        Resident {
            inputs,
            y: out(shape.v_len()),
            delta: out(shape.v_len()),
            state_out: out(shape.state_len()),
        }
    }

    fn buffers(&self) -> RecordBuffers<'_> {
        let i = &self.inputs;
        RecordBuffers {
            state_out: Some(&self.state_out),
            ..record_buffers(
                [&i[0], &i[1], &i[2], &i[3], &i[4], &i[5]],
                &self.y,
                &self.delta,
            )
        }
    }

    fn read(&self, g: &GpuBackend) -> Recorded<f32, f32, f32> {
        let read = |b: &wgpu::Buffer| g.read_buffer::<f32>(b, b.size() as usize / 4).unwrap();
        Recorded {
            y: read(&self.y),
            state: read(&self.state_out),
            delta: read(&self.delta),
        }
    }
}

/// The resident dispatch, encoded twice, gives the host call's results; built for
/// too few states it is refused by name and writes nothing.
#[test]
fn gpu_varlen_resident_dispatch() {
    let Some(g) = gpu() else { return };
    let shape = varlen_of(MIXES[1], HEADS);
    let d = draw_varlen(&shape, 5);
    let want: Recorded<f32, f32, f32> = g
        .record_varlen(&shape, GqaLayout::Tiled, &d.inputs(None), &d.state)
        .unwrap();
    let dtypes = GdnDtypes::of::<f32, f32, f32>();
    let r = Resident::new(&g, &shape, &d, shape.sequences());
    let prepared = g
        .prepare_record_varlen(&shape, GqaLayout::Tiled, dtypes, &r.buffers())
        .unwrap();
    for _ in 0..2 {
        let mut encoder = g.device().create_command_encoder(&Default::default());
        prepared.encode(&mut encoder);
        g.queue().submit([encoder.finish()]);
        assert_eq!(r.read(&g), want, "the resident dispatch is the host call");
    }

    let short = Resident::new(&g, &shape, &d, shape.sequences() - 1);
    let err = g
        .prepare_record_varlen(&shape, GqaLayout::Tiled, dtypes, &short.buffers())
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::BufferSize {
                arg: "state_in",
                ..
            }
        ),
        "{err}"
    );
    let untouched = short.read(&g);
    assert!(untouched
        .y
        .iter()
        .chain(&untouched.state)
        .all(|&x| x == SENTINEL));
}

/// A packed prefill that is itself a draft: with the tape's copies bound, k (at key
/// heads) and g land in them as they are, and the other outputs do not change; in
/// the sequential kernel and in record's chunked form (where the class asks: the
/// passes, then a copy dispatch each).
#[test]
fn gpu_varlen_writes_the_tape_copies_when_bound() {
    let Some(plain) = gpu() else { return };
    let shape = varlen_of(MIXES[0], HEADS);
    let d = draw_varlen(&shape, 11);
    for (g, chunked) in [(plain.clone(), false), (split_chunked(&plain), true)] {
        let want: Recorded<f32, f32, f32> = g
            .record_varlen(&shape, GqaLayout::Blocked, &d.inputs(None), &d.state)
            .unwrap();
        let r = Resident::new(&g, &shape, &d, shape.sequences());
        let usage = wgpu::BufferUsages::COPY_SRC;
        let tape_k = storage_buffer(&g, &vec![SENTINEL; shape.qk_len()], usage);
        let tape_g = storage_buffer(&g, &vec![SENTINEL; shape.gate_len()], usage);
        let buffers = RecordBuffers {
            tape_k_grouped: Some(&tape_k),
            tape_g: Some(&tape_g),
            ..r.buffers()
        };
        let dtypes = GdnDtypes::of::<f32, f32, f32>();
        let prepared = g
            .prepare_record_varlen(&shape, GqaLayout::Blocked, dtypes, &buffers)
            .unwrap();
        let ops: Vec<&str> = prepared.keys().iter().map(|k| k.op.name()).collect();
        let copies = ops.ends_with(&["repeat", "repeat"]) && ops[0].starts_with("chunk_");
        assert_eq!(copies, chunked, "{ops:?}");
        let mut encoder = g.device().create_command_encoder(&Default::default());
        prepared.encode(&mut encoder);
        g.queue().submit([encoder.finish()]);
        assert_eq!(r.read(&g), want, "{ops:?}");
        assert_eq!(g.read_buffer::<f32>(&tape_k, shape.qk_len()).unwrap(), d.k);
        assert_eq!(
            g.read_buffer::<f32>(&tape_g, shape.gate_len()).unwrap(),
            d.g
        );
    }
}

/// Each broken offset rule is its own typed error naming `offsets` and the entry.
#[test]
fn bad_offsets_are_typed_errors() {
    let heads = HEADS;
    let new = |n: usize, o: &[u32]| VarlenShape::new(n, o, heads[0], heads[1], heads[2], heads[3]);
    let cases: [(&str, usize, &[u32], usize); 5] = [
        ("first not 0", 5, &[1, 5], 0),
        ("decreasing", 5, &[0, 3, 2, 5], 2),
        ("past N", 5, &[0, 7, 5], 1),
        ("not ending at N", 5, &[0, 2, 4], 2),
        ("past N at the end", 5, &[0, 2, 6], 2),
    ];
    for (what, n, o, at) in cases {
        match new(n, o) {
            Err(Error::BadOffset {
                arg: "offsets",
                index,
                ..
            }) => assert_eq!(index, at, "{what}"),
            other => panic!("{what}: {other:?}"),
        }
    }
    for o in [&[][..], &[0][..]] {
        let err = new(0, o).unwrap_err();
        assert!(
            matches!(err, Error::DimTooSmall { arg: "offsets", .. }),
            "{err}"
        );
    }
    // Empty sequences, and no tokens at all, are shapes.
    let empty = new(0, &[0, 0, 0]).unwrap();
    assert_eq!(
        (empty.sequences(), empty.tokens(), empty.longest()),
        (2, 0, 0)
    );
}

/// A state count other than S, and inputs of another length, are refused by name on
/// every backend before anything runs.
#[test]
fn wrong_counts_are_typed_errors_on_every_backend() {
    let shape = varlen_of(&[3, 0, 5], HEADS);
    let d = draw_varlen(&shape, 1);
    let one_state = shape.state_len() / shape.sequences();
    let mut backends = vec![cpu()];
    backends.extend(gpu().map(Backend::Gpu));
    for b in &backends {
        let r: deltatape::Result<Recorded<f32, f32, f32>> = no_panic("varlen", || {
            b.record_varlen(
                &shape,
                GqaLayout::Blocked,
                &d.inputs(None),
                &d.state[..2 * one_state],
            )
        });
        assert!(
            matches!(
                r,
                Err(Error::Length {
                    arg: "state_in",
                    ..
                })
            ),
            "{}: {r:?}",
            b.describe()
        );
        let short_v = &d.v[1..];
        let inputs = RecordInputs {
            v: short_v,
            ..d.inputs(None)
        };
        let r: deltatape::Result<Recorded<f32, f32, f32>> =
            b.record_varlen(&shape, GqaLayout::Blocked, &inputs, &d.state);
        assert!(matches!(r, Err(Error::Length { arg: "v", .. })), "{r:?}");
    }
}

/// bf16 outputs pair neighbouring rows: an odd Dv is refused on the GPU as record's is.
#[test]
fn gpu_varlen_refuses_what_record_refuses() {
    let Some(g) = gpu() else { return };
    let shape = varlen_of(&[2, 3], [1, 1, 8, 3]);
    let d = draw_varlen(&shape, 2);
    let t = d.typed::<bf16>();
    let r: deltatape::Result<Recorded<bf16, f32, f32>> =
        g.record_varlen(&shape, GqaLayout::Blocked, &t.inputs(None), &d.state);
    assert!(
        matches!(
            r,
            Err(Error::Unsupported {
                arg: "value_dim",
                ..
            })
        ),
        "{r:?}"
    );
}

/// `deltatape bench --ops record_varlen --lens ...` times the packed call as one cell
/// per dtype: B the sequences, T their tokens together.
#[test]
fn bench_times_record_varlen() {
    if !has_gpu() {
        return;
    }
    // DELTATAPE_BIN when the test executable runs on another machine (as tests/demo.rs).
    let bin = std::env::var("DELTATAPE_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_deltatape").to_string());
    let out = std::process::Command::new(bin)
        .args(["bench", "--ops", "record_varlen", "--lens", "3,0,9"])
        .args(["--dtypes", "f32", "--dims", "1,2,16,16", "--copy-mib", "1"])
        .args(["--runs", "2", "--warmup", "1"])
        .output()
        .expect("run deltatape");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = stdout
        .lines()
        .find(|l| l.starts_with("record_varlen "))
        .unwrap_or_else(|| panic!("no record_varlen row: {stdout}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[1..4], ["f32", "3", "12"], "{row}");
    let best: f64 = cols[4].parse().unwrap();
    assert!(best > 0.0 && best.is_finite(), "{row}");
}

/// Where record's class asks for the chunked form (`ShapeClass::chunked`,
/// `DELTATAPE_RECORD_CHUNKED=1`), record_varlen runs every sequence in chunks of its
/// own: each sequence's y, delta and state bit for bit what `record_chunked` gives for
/// it alone (the portable passes at C = 32, or the fast path at 64 where the device has
/// it), all within record's tolerance of the CPU's record_varlen; by default the
/// sequential kernel (other roundings, so other bits). Lengths 0, 1, C - 1, C, C + 1 and
/// several chunks in one call, masks, both layouts, bf16 beside f32.
#[test]
fn gpu_varlen_takes_the_chunked_form_where_its_class_asks() {
    let Some(plain) = gpu() else { return };
    let chunked = split_chunked(&plain);
    let one = varlen_of(&[1], HEADS);
    let chunk = match plain.chunked_on_matrix_units(one.packed(), deltatape::ChunkSize::C64) {
        true => deltatape::ChunkSize::C64,
        false => deltatape::ChunkSize::C32,
    };
    let c = chunk.steps();
    eprintln!("record_varlen's chunked form at C = {c}");
    let mixes: [&[usize]; 3] = [&[c + 1, 0, 1, c - 1, c, 3 * c + 5, 0, 2], &[0, 2 * c], &[5]];
    for (i, lens) in mixes.iter().enumerate() {
        let shape = varlen_of(lens, HEADS);
        let d = draw_varlen(&shape, 60 + i as u64);
        let m = mask(shape.packed(), 61 + i as u64);
        for (layout, masked) in [(GqaLayout::Tiled, true), (GqaLayout::Blocked, false)] {
            let mask = masked.then_some(&m[..]);
            let what = format!("{lens:?} {layout:?} mask {masked}");
            let t = d.typed::<f32>();
            let got: Recorded<f32, f32, f32> = chunked
                .record_varlen(&shape, layout, &t.inputs(mask), &d.state)
                .unwrap();
            let want: Recorded<f32, f32, f32> = cpu()
                .record_varlen(&shape, layout, &t.inputs(mask), &d.state)
                .unwrap();
            assert_record_close(&format!("{what} chunked"), &got, &want);
            let sequential: Recorded<f32, f32, f32> = plain
                .record_varlen(&shape, layout, &t.inputs(mask), &d.state)
                .unwrap();
            assert_ne!(sequential, got, "{what}: the default took the chunked form");
            assert_record_close(&format!("{what} sequential"), &sequential, &want);
            for s in (0..shape.sequences()).filter(|&s| !shape.sequence(s).is_empty()) {
                let (one, alone) = one_chunked(&plain, &shape, (layout, chunk), s, &d, mask);
                assert_eq!(
                    part(&shape, s, &got),
                    alone,
                    "{what}: sequence {s} not record_chunked of it alone ({one:?})"
                );
            }
            let empty = (0..shape.sequences()).filter(|&s| shape.sequence(s).is_empty());
            for s in empty {
                assert_eq!(part(&shape, s, &got).state, part(&shape, s, &want).state);
            }
        }
        let t = d.typed::<bf16>();
        let got: Recorded<bf16, f32, bf16> = chunked
            .record_varlen(&shape, GqaLayout::Blocked, &t.inputs(None), &d.state)
            .unwrap();
        let want: Recorded<bf16, f32, bf16> = cpu()
            .record_varlen(&shape, GqaLayout::Blocked, &t.inputs(None), &d.state)
            .unwrap();
        assert_record_close(&format!("{lens:?} bf16 chunked"), &got, &want);
    }
}

/// `record_chunked` at `chunk` on sequence `s` of `shape` alone (f32), on the GPU.
fn one_chunked(
    g: &GpuBackend,
    shape: &VarlenShape,
    (layout, chunk): (GqaLayout, deltatape::ChunkSize),
    s: usize,
    d: &Draw,
    mask: Option<&[u32]>,
) -> (GdnShape, Recorded<f32, f32, f32>) {
    let p = shape.packed();
    let one = p.with_steps(shape.sequence(s).len()).unwrap();
    let qk = p.key_heads() * p.key_dim();
    let (v, gates) = (p.value_heads() * p.value_dim(), p.value_heads());
    let own = |x: &[f32], per: usize| tokens_of(shape, s, x, per);
    let (q, k, vv, gg, beta) = (
        own(&d.q, qk),
        own(&d.k, qk),
        own(&d.v, v),
        own(&d.g, gates),
        own(&d.beta, gates),
    );
    let m = mask.map(|m| tokens_of(shape, s, m, 1));
    let inputs = RecordInputs {
        q: &q,
        k: &k,
        v: &vv,
        g: &gg,
        beta: &beta,
        mask: m.as_deref(),
    };
    let state = &d.state[s * one.state_len()..][..one.state_len()];
    let out = g
        .record_chunked(&one, layout, chunk, &inputs, state)
        .unwrap();
    (one, out)
}
