//! CPU backend benchmark: record, replay and repeat at the real shape (Hk = 16, Hv = 32,
//! Dk = Dv = 128; docs/SPEC.md "Real shapes") for B in {1, 8} and T in {1, 4, 8}, next to a
//! memcpy of a state-sized buffer, the bandwidth ceiling.
//!
//! `cargo bench --bench cpu` (about 2-3 minutes on 2 cores). Filter as usual with
//! criterion: `cargo bench --bench cpu -- replay/kernel`.
//!
//! Benchmark names:
//! - `memcpy/1thread/<MiB>`: `copy_from_slice` of a state-sized f32 buffer on one thread
//!   (the ceiling the ops are compared with); `memcpy/2threads/<MiB>`: the same copy
//!   split over two scoped threads (spawn included), for reference.
//! - `<op>/api_<dtypes>/B<b>_T<t>`: the public `Backend::cpu().<op>()` (validation and
//!   the allocation of its output vectors included); `replay/api_into_<dtypes>`: the
//!   public `replay_into`, validation included, into one reused output.
//!
//! Throughput is the bytes the math must move, reads and writes both counted:
//! - memcpy: source + destination (2x the buffer);
//! - record: state in + state out + q + k + v + g + beta + y + delta;
//! - replay (accepted = T): snapshot + state out + tape delta + tape k + tape g;
//! - repeat (the tape's k expansion `[B*T, Hk, Dk] -> [B*T, Hv, Dk]`): src + dst.
//!
//! After criterion's own report the bench prints one table of every case run in this
//! invocation: criterion's time estimate, its GiB/s, and the ratio to the one-thread
//! memcpy of the same state size (and of the 16 MiB one), read back from criterion's
//! `estimates.json` files.

use criterion::{black_box, BenchmarkId, Criterion, Throughput};
use deltatape::{Backend, Element, GdnShape, GqaLayout, RecordInputs, RepeatShape, TapeRef};
use half::bf16;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

const HK: usize = 16;
const HV: usize = 32;
const DK: usize = 128;
const DV: usize = 128;
const BATCHES: [usize; 2] = [1, 8];
const STEPS: [usize; 3] = [1, 4, 8];
/// The one bf16-activation case (f32 state, f32 tape).
const BF16_CASE: (usize, usize) = (8, 4);
const LAYOUT: GqaLayout = GqaLayout::Blocked;

fn shape(b: usize, t: usize) -> GdnShape {
    GdnShape::new(b, t, HK, HV, DK, DV).expect("real shape")
}

fn case_id(b: usize, t: usize) -> String {
    format!("B{b}_T{t}")
}

#[path = "../tests/common/rng.rs"]
mod rng;
use rng::Rng;

/// `n` draws of the tests' generator in [lo, hi), stored as `E`.
fn draws<E: Element>(rng: &mut Rng, n: usize, lo: f32, hi: f32) -> Vec<E> {
    rng.vec(n, lo, hi).into_iter().map(E::from_f32).collect()
}

/// One layer's record inputs drawn like a real layer's (unit-norm k, small q, g in
/// (0.5, 1], beta in (0, 1)), the state, and the tape a record over them leaves.
struct Case<A> {
    shape: GdnShape,
    q: Vec<A>,
    k: Vec<A>,
    v: Vec<A>,
    g: Vec<A>,
    beta: Vec<A>,
    state: Vec<f32>,
    tape_delta: Vec<f32>,
    tape_k: Vec<A>,
    accepted: Vec<u32>,
}

impl<A: Element> Case<A> {
    fn new(b: usize, t: usize) -> Self {
        let shape = shape(b, t);
        let mut rng = Rng::new(0x5eed ^ ((b as u64) << 8) ^ t as u64);
        let mut k = rng.vec(shape.qk_len(), -1.0, 1.0);
        for row in k.chunks_mut(DK) {
            let n = row.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
            row.iter_mut().for_each(|x| *x /= n);
        }
        let k: Vec<A> = k.into_iter().map(A::from_f32).collect();
        let scale = 1.0 / (DK as f32).sqrt();
        let q = draws(&mut rng, shape.qk_len(), -scale, scale);
        let v = draws(&mut rng, shape.v_len(), -1.0, 1.0);
        let g = draws(&mut rng, shape.gate_len(), 0.5, 1.0);
        let beta = draws(&mut rng, shape.gate_len(), 0.05, 1.0);
        let state = draws(&mut rng, shape.state_len(), -0.5, 0.5);
        let inputs = RecordInputs {
            q: &q,
            k: &k,
            v: &v,
            g: &g,
            beta: &beta,
            mask: None,
        };
        let cpu = Backend::cpu();
        let rec = cpu
            .record::<A, f32, f32>(&shape, LAYOUT, &inputs, &state)
            .expect("record");
        let tape_k = cpu
            .repeat(&shape.tape_k_repeat(), LAYOUT, &k)
            .expect("repeat");
        Case {
            shape,
            q,
            k,
            v,
            g,
            beta,
            state,
            tape_delta: rec.delta,
            tape_k,
            accepted: vec![t as u32; b],
        }
    }

    fn inputs(&self) -> RecordInputs<'_, A> {
        RecordInputs {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            g: &self.g,
            beta: &self.beta,
            mask: None,
        }
    }

    fn tape(&self) -> TapeRef<'_, A, f32> {
        TapeRef {
            delta: &self.tape_delta,
            k: &self.tape_k,
            g: &self.g,
        }
    }

    /// record: state in + out, q, k, v, g, beta, y, delta.
    fn record_bytes(&self) -> u64 {
        let s = &self.shape;
        let a = A::DTYPE.size_bytes();
        let elems_a = 2 * s.qk_len() + 2 * s.v_len() + 2 * s.gate_len(); // q k v y g beta
        (2 * s.state_len() * 4 + elems_a * a + s.v_len() * 4) as u64
    }

    /// replay with accepted = T: snapshot + state out + tape delta + tape k + tape g.
    fn replay_bytes(&self) -> u64 {
        let s = &self.shape;
        let a = A::DTYPE.size_bytes();
        (2 * s.state_len() * 4 + s.v_len() * 4 + (s.tape_k_len() + s.gate_len()) * a) as u64
    }
}

fn bench_memcpy(c: &mut Criterion) {
    let mut group = c.benchmark_group("memcpy");
    for b in BATCHES {
        let len = shape(b, 1).state_len();
        let mib = (len * 4) >> 20;
        let src: Vec<f32> = Rng::new(1).vec(len, -1.0, 1.0);
        let mut dst = vec![0f32; len];
        group.throughput(Throughput::Bytes(2 * 4 * len as u64));
        group.bench_function(BenchmarkId::new("1thread", format!("{mib}MiB")), |bch| {
            bch.iter(|| {
                dst.copy_from_slice(black_box(&src));
                black_box(&mut dst);
            })
        });
        group.bench_function(BenchmarkId::new("2threads", format!("{mib}MiB")), |bch| {
            bch.iter(|| {
                let half = len / 2;
                let (d0, d1) = dst.split_at_mut(half);
                let (s0, s1) = black_box(&src).split_at(half);
                std::thread::scope(|scope| {
                    scope.spawn(|| d1.copy_from_slice(s1));
                    d0.copy_from_slice(s0);
                });
                black_box(&mut dst);
            })
        });
    }
    group.finish();
}

fn record_api<A: Element>(group: &mut criterion::BenchmarkGroup<'_, WallTime>, c: &Case<A>) {
    let s = &c.shape;
    let cpu = Backend::cpu();
    let id = BenchmarkId::new(format!("api_{}", A::DTYPE), case_id(s.batch(), s.steps()));
    group.throughput(Throughput::Bytes(c.record_bytes()));
    group.bench_function(id, |bch| {
        bch.iter(|| {
            black_box(
                cpu.record::<A, f32, f32>(s, LAYOUT, &c.inputs(), &c.state)
                    .expect("record"),
            )
        })
    });
}

fn replay_api<A: Element>(group: &mut criterion::BenchmarkGroup<'_, WallTime>, c: &Case<A>) {
    let s = &c.shape;
    let cpu = Backend::cpu();
    let id = BenchmarkId::new(format!("api_{}", A::DTYPE), case_id(s.batch(), s.steps()));
    group.throughput(Throughput::Bytes(c.replay_bytes()));
    group.bench_function(id, |bch| {
        bch.iter(|| {
            black_box(
                cpu.replay(s, &c.tape(), &c.state, &c.accepted, None)
                    .expect("replay"),
            )
        })
    });
}

fn replay_api_into<A: Element>(group: &mut criterion::BenchmarkGroup<'_, WallTime>, c: &Case<A>) {
    let s = &c.shape;
    let cpu = Backend::cpu();
    let mut state_out = vec![0f32; s.state_len()];
    let id = BenchmarkId::new(
        format!("api_into_{}", A::DTYPE),
        case_id(s.batch(), s.steps()),
    );
    group.throughput(Throughput::Bytes(c.replay_bytes()));
    group.bench_function(id, |bch| {
        bch.iter(|| {
            cpu.replay_into(s, &c.tape(), &c.state, &c.accepted, None, &mut state_out)
                .expect("replay_into");
            black_box(&state_out);
        })
    });
}

type WallTime = criterion::measurement::WallTime;

fn bench_record(c: &mut Criterion) {
    let mut group = c.benchmark_group("record");
    for b in BATCHES {
        for t in STEPS {
            let case = Case::<f32>::new(b, t);
            record_api(&mut group, &case);
        }
    }
    group.finish();
}

fn bench_replay(c: &mut Criterion) {
    let mut group = c.benchmark_group("replay");
    for b in BATCHES {
        for t in STEPS {
            let case = Case::<f32>::new(b, t);
            replay_api(&mut group, &case);
            replay_api_into(&mut group, &case);
        }
    }
    group.finish();
}

fn bench_repeat(c: &mut Criterion) {
    let mut group = c.benchmark_group("repeat");
    let cpu = Backend::cpu();
    for b in BATCHES {
        for t in STEPS {
            let shape = RepeatShape::new(b * t, HK, HV, DK).expect("repeat shape");
            let src: Vec<f32> = Rng::new(7).vec(shape.src_len(), -1.0, 1.0);
            group.throughput(Throughput::Bytes(
                4 * (shape.src_len() + shape.dst_len()) as u64,
            ));
            group.bench_function(BenchmarkId::new("api_f32", case_id(b, t)), |bch| {
                bch.iter(|| black_box(cpu.repeat(&shape, LAYOUT, &src).expect("repeat")))
            });
        }
    }
    group.finish();
}

// ---- the summary table, read back from criterion's estimates ----

/// Where criterion writes: `$CRITERION_HOME`, else `$CARGO_TARGET_DIR/criterion`, else
/// `target/criterion` of this package (cargo runs benches from the package root).
fn criterion_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("criterion")
}

/// Criterion's typical estimate (the slope if it fit one, else the mean), in ns, of a
/// benchmark that ran after `since`.
fn estimate_ns(group: &str, function: &str, value: &str, since: SystemTime) -> Option<f64> {
    let path = criterion_dir()
        .join(group)
        .join(function)
        .join(value)
        .join("new/estimates.json");
    if std::fs::metadata(&path).ok()?.modified().ok()? < since {
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let key = if text.contains("\"slope\":null") {
        "\"mean\":"
    } else {
        "\"slope\":"
    };
    let rest = &text[text.find(key)? + key.len()..];
    let rest = &rest[rest.find("\"point_estimate\":")? + "\"point_estimate\":".len()..];
    let end = rest.find([',', '}'])?;
    rest[..end].trim().parse().ok()
}

fn gib_per_s(bytes: u64, ns: f64) -> f64 {
    bytes as f64 / (ns * 1e-9) / (1u64 << 30) as f64
}

fn summary(since: SystemTime) {
    let memcpy = |b: usize| {
        let len = shape(b, 1).state_len();
        let ns = estimate_ns(
            "memcpy",
            "1thread",
            &format!("{}MiB", (len * 4) >> 20),
            since,
        )?;
        Some(gib_per_s(8 * len as u64, ns))
    };
    let ceiling_big = memcpy(8);
    let mut rows: Vec<(String, u64, usize)> = Vec::new();
    for b in BATCHES {
        let len = shape(b, 1).state_len() as u64;
        rows.push((format!("memcpy/1thread/{}MiB", (len * 4) >> 20), 8 * len, b));
        rows.push((
            format!("memcpy/2threads/{}MiB", (len * 4) >> 20),
            8 * len,
            b,
        ));
    }
    for op in ["record", "replay"] {
        let kinds: &[&str] = if op == "replay" {
            &["kernel", "api", "api_into"]
        } else {
            &["kernel", "api"]
        };
        for kind in kinds {
            for b in BATCHES {
                for t in STEPS {
                    let c = Case::<f32>::new(b, t);
                    let bytes = if op == "record" {
                        c.record_bytes()
                    } else {
                        c.replay_bytes()
                    };
                    rows.push((format!("{op}/{kind}_f32/{}", case_id(b, t)), bytes, b));
                }
            }
        }
        let (b, t) = BF16_CASE;
        let c = Case::<bf16>::new(b, t);
        let bytes = if op == "record" {
            c.record_bytes()
        } else {
            c.replay_bytes()
        };
        rows.push((format!("{op}/kernel_bf16/{}", case_id(b, t)), bytes, b));
    }
    for kind in ["kernel", "api"] {
        for b in BATCHES {
            for t in STEPS {
                let s = RepeatShape::new(b * t, HK, HV, DK).expect("repeat shape");
                let bytes = 4 * (s.src_len() + s.dst_len()) as u64;
                rows.push((format!("repeat/{kind}_f32/{}", case_id(b, t)), bytes, b));
            }
        }
    }
    println!();
    println!("summary (criterion's estimate; ratio = GiB/s over the 1-thread memcpy's GiB/s)");
    println!(
        "{:<28} {:>11} {:>9} {:>14} {:>14}",
        "benchmark", "time", "GiB/s", "vs memcpy(B)", "vs memcpy16MiB"
    );
    let ratio = |x: f64, c: Option<f64>| c.map_or("-".to_string(), |c| format!("{:.2}", x / c));
    for (name, bytes, b) in rows {
        let mut parts = name.splitn(3, '/');
        let (g, f, v) = (parts.next(), parts.next(), parts.next());
        let Some(ns) = estimate_ns(g.unwrap_or(""), f.unwrap_or(""), v.unwrap_or(""), since) else {
            continue;
        };
        let rate = gib_per_s(bytes, ns);
        let time = if ns >= 1e6 {
            format!("{:.3} ms", ns / 1e6)
        } else {
            format!("{:.1} us", ns / 1e3)
        };
        println!(
            "{name:<28} {time:>11} {rate:>9.2} {:>14} {:>14}",
            ratio(rate, memcpy(b)),
            ratio(rate, ceiling_big)
        );
    }
}

fn main() {
    let since = SystemTime::now();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
        .configure_from_args();
    bench_memcpy(&mut c);
    bench_record(&mut c);
    bench_replay(&mut c);
    bench_repeat(&mut c);
    c.final_summary();
    summary(since);
}
