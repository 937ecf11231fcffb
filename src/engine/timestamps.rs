//! Whether a run's raw GPU timestamps can be trusted. Some drivers accept timestamp
//! writes and then resolve them as zeros or as one repeated value (wgpu's Metal backend
//! on macOS 26 was reported to); a time computed from those would print as 0 us. The
//! bench, `deltatape round` and the autotune (`GpuBackend::tune`) check every resolve
//! with [`check`] and time by wall clock from then on instead of trusting such a time.

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
