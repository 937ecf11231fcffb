//! GPU time: [`GpuTimer`], the one timer of the bench, `deltatape round` and the
//! autotune (timestamp queries written around passes, resolved and read back), and
//! [`check`], whether a run's raw GPU timestamps can be trusted. Some drivers accept
//! timestamp writes and then resolve them as zeros or as one repeated value (wgpu's
//! Metal backend on macOS 26 was reported to); a time computed from those would print
//! as 0 us. The timer checks every resolve and, once one fails, says so and leaves its
//! callers to time by wall clock.

use super::runtime::Runtime;
use crate::error::{Error, Result};
use std::fmt;

/// Why a set of timestamps is not a measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Untrusted {
    /// Every tick is zero (or none was written).
    AllZero,
    /// Every tick holds the same nonzero value: the clock never moved.
    Constant,
    /// Some ticks are zero and others are not: a write that never landed.
    PartlyZero,
    /// A pass ends before it begins.
    NonMonotonic,
    /// A pass ends on the tick it began: no GPU work takes no time.
    ZeroSpan,
    /// The queue's tick length is zero (or not a number): every span would read 0 us.
    ZeroPeriod,
}

impl fmt::Display for Untrusted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Untrusted::AllZero => "every timestamp reads zero",
            Untrusted::Constant => "every timestamp reads the same value",
            Untrusted::PartlyZero => "some timestamps read zero",
            Untrusted::NonMonotonic => "a pass's end timestamp is before its start",
            Untrusted::ZeroSpan => "a pass's end timestamp equals its start",
            Untrusted::ZeroPeriod => "the timestamp period reads zero",
        })
    }
}

/// Checks resolved timestamps laid out as (begin, end) pairs, one pair per timed span,
/// and the queue's nanoseconds per tick. Only each pair's order is required: spans in
/// different passes may overlap.
pub fn check(ticks: &[u64], period_ns: f32) -> Result<(), Untrusted> {
    // Written to be false for NaN too.
    if !(period_ns > 0.0 && period_ns.is_finite()) {
        return Err(Untrusted::ZeroPeriod);
    }
    if ticks.iter().all(|&t| t == 0) {
        return Err(Untrusted::AllZero);
    }
    if ticks.iter().all(|&t| t == ticks[0]) {
        return Err(Untrusted::Constant);
    }
    if ticks.contains(&0) {
        return Err(Untrusted::PartlyZero);
    }
    for pair in ticks.chunks_exact(2) {
        if pair[1] < pair[0] {
            return Err(Untrusted::NonMonotonic);
        }
        if pair[1] == pair[0] {
            return Err(Untrusted::ZeroSpan);
        }
    }
    Ok(())
}

/// The clock a measurement came from, as printed beside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// GPU timestamps that passed [`check`].
    Gpu,
    /// Wall clock: submit to completion, host work included.
    Wall,
    /// Part timestamps, part wall clock (the fallback began during the measurement).
    Mixed,
}

impl Clock {
    /// The clock of a measurement that began on `before` and ended on `after`.
    pub fn spanning(before: Clock, after: Clock) -> Clock {
        if before == after {
            before
        } else {
            Clock::Mixed
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Clock::Gpu => "gpu",
            Clock::Wall => "wall",
            Clock::Mixed => "mixed",
        }
    }
}

/// Timestamp queries on one query set: pass `i`'s begin and end are queries `2i` and
/// `2i + 1` ([`GpuTimer::span_writes`]), or a marker pass writes one query
/// ([`GpuTimer::mark`]). A read ([`GpuTimer::spans_us`]) resolves and checks them; the
/// first that fails [`check`] retires the timer for good ([`GpuTimer::untrusted`]), and
/// from then on, as on an adapter without `Features::TIMESTAMP_QUERY`, it writes nothing
/// and reads `None`: its caller times by wall clock and says so.
pub struct GpuTimer {
    runtime: Runtime,
    label: &'static str,
    /// The query set and its resolve buffer; `None` without timestamp queries.
    queries: Option<(wgpu::QuerySet, wgpu::Buffer)>,
    count: u32,
    untrusted: Option<Untrusted>,
}

impl GpuTimer {
    /// A timer of `count` queries (its errors name `label`).
    pub(crate) fn new(runtime: &Runtime, label: &'static str, count: u32) -> Result<Self> {
        let has = runtime.features().contains(wgpu::Features::TIMESTAMP_QUERY);
        let queries = if has {
            if count == 0 || count > wgpu::QUERY_SET_MAX_QUERIES {
                return Err(Error::DimTooLarge {
                    op: label,
                    arg: "timestamp queries",
                    actual: count as u64,
                    max: wgpu::QUERY_SET_MAX_QUERIES as u64,
                });
            }
            Some(runtime.guarded(label, || {
                let device = runtime.device();
                let set = device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some(label),
                    ty: wgpu::QueryType::Timestamp,
                    count,
                });
                let resolve = device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(label),
                    size: count as u64 * 8,
                    usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: false,
                });
                Ok((set, resolve))
            })?)
        } else {
            None
        };
        Ok(GpuTimer {
            runtime: runtime.clone(),
            label,
            queries,
            count,
            untrusted: None,
        })
    }

    /// Whether the timer writes timestamps: the adapter has them and none failed.
    pub fn live(&self) -> bool {
        self.queries.is_some() && self.untrusted.is_none()
    }

    /// Whether the adapter has timestamp queries at all.
    pub fn has_queries(&self) -> bool {
        self.queries.is_some()
    }

    /// Why the timer retired, if a resolve failed [`check`].
    pub fn untrusted(&self) -> Option<Untrusted> {
        self.untrusted
    }

    /// Pairs of queries the timer holds.
    pub fn pairs(&self) -> u32 {
        self.count / 2
    }

    /// The clock of a measurement taken now.
    pub fn clock(&self) -> Clock {
        if self.live() {
            Clock::Gpu
        } else {
            Clock::Wall
        }
    }

    /// Timestamp writes around a compute pass, as span `pair`; `None` while not live.
    pub fn span_writes(&self, pair: u32) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        let (set, _) = self.queries.as_ref().filter(|_| self.live())?;
        Some(wgpu::ComputePassTimestampWrites {
            query_set: set,
            beginning_of_pass_write_index: Some(2 * pair),
            end_of_pass_write_index: Some(2 * pair + 1),
        })
    }

    /// An empty pass that writes query `index` (a span's start or end between other
    /// passes); nothing while not live.
    pub fn mark(&self, encoder: &mut wgpu::CommandEncoder, index: u32) {
        if let Some((set, _)) = self.queries.as_ref().filter(|_| self.live()) {
            encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(self.label),
                timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                    query_set: set,
                    beginning_of_pass_write_index: Some(index),
                    end_of_pass_write_index: None,
                }),
            });
        }
    }

    /// Resolve the first `pairs` spans written so far (after the work that wrote them
    /// was submitted) and read them back: microseconds each. `None` while not live, or
    /// when they fail [`check`] (which retires the timer).
    pub fn spans_us(&mut self, pairs: u32) -> Result<Option<Vec<f64>>> {
        let Some((set, resolve)) = self.queries.as_ref().filter(|_| self.live()) else {
            return Ok(None);
        };
        let n = (2 * pairs).min(self.count);
        let runtime = &self.runtime;
        let mut e = runtime.encoder();
        e.resolve_query_set(set, 0..n, resolve, 0);
        runtime.guarded(self.label, || {
            runtime.queue().submit([e.finish()]);
            Ok(())
        })?;
        let ticks: Vec<u64> = runtime.read_buffer_labelled(self.label, resolve, n as usize)?;
        let period_ns = runtime.queue().get_timestamp_period();
        if let Err(why) = check(&ticks, period_ns) {
            self.untrusted = Some(why);
            return Ok(None);
        }
        Ok(Some(
            ticks
                .chunks_exact(2)
                .map(|p| (p[1] - p[0]) as f64 * period_ns as f64 / 1e3)
                .collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_timestamps_pass() {
        assert_eq!(check(&[100, 250, 260, 400], 1.0), Ok(()));
        // Spans in different passes may overlap or come back out of order.
        assert_eq!(check(&[500, 900, 100, 300], 1.0), Ok(()));
    }

    #[test]
    fn all_zero_timestamps_are_refused() {
        assert_eq!(check(&[0, 0, 0, 0], 1.0), Err(Untrusted::AllZero));
        assert_eq!(check(&[], 1.0), Err(Untrusted::AllZero));
    }

    #[test]
    fn constant_timestamps_are_refused() {
        assert_eq!(check(&[7, 7, 7, 7], 1.0), Err(Untrusted::Constant));
        assert_eq!(check(&[42, 42], 1.0), Err(Untrusted::Constant));
    }

    #[test]
    fn non_monotonic_timestamps_are_refused() {
        assert_eq!(
            check(&[100, 250, 400, 300], 1.0),
            Err(Untrusted::NonMonotonic)
        );
    }

    #[test]
    fn zero_spans_and_partly_zero_timestamps_are_refused() {
        assert_eq!(check(&[100, 250, 300, 300], 1.0), Err(Untrusted::ZeroSpan));
        assert_eq!(check(&[0, 250, 300, 400], 1.0), Err(Untrusted::PartlyZero));
    }

    #[test]
    fn a_zero_timestamp_period_is_refused() {
        assert_eq!(check(&[100, 250], 0.0), Err(Untrusted::ZeroPeriod));
        assert_eq!(check(&[100, 250], f32::NAN), Err(Untrusted::ZeroPeriod));
    }

    #[test]
    fn a_clock_that_changed_during_a_measurement_is_mixed() {
        assert_eq!(Clock::spanning(Clock::Gpu, Clock::Gpu), Clock::Gpu);
        assert_eq!(Clock::spanning(Clock::Wall, Clock::Wall), Clock::Wall);
        assert_eq!(Clock::spanning(Clock::Gpu, Clock::Wall), Clock::Mixed);
    }
}
