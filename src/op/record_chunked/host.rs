//! record_chunked's host call, on every backend: record's host call in the chunked form.

use super::ChunkSize;
use crate::dtype::Element;
use crate::op::record::host::RecordCall;
use crate::op::record::{LayerRecorded, RecordInputs, Recorded};
use crate::shape::{GdnShape, GqaLayout};
use std::marker::PhantomData;

crate::backend::host_ops! {
    /// record in its chunked WY form (docs/SPEC.md "record"; `chunk` steps per chunk):
    /// the same inputs, outputs and errors as [`record`](Self::record), y, the state
    /// and the tape's delta within the dtypes' tolerances of it. For prefill-length T;
    /// on the GPU its portable passes are slower than `record`, its fast path faster at
    /// long T and few sequences (docs/PERFORMANCE.md).
    fn record_chunked / record_chunked_async<A, S, P>(
        shape: &GdnShape,
        layout: GqaLayout,
        chunk: ChunkSize,
        inputs: &RecordInputs<'_, A, impl Element>,
        state_in: &[S]
    ) -> Recorded<A, S, P>
        = RecordCall { shape, layout, source: *inputs, state_in, tape: PhantomData::<P>, chunk: Some(chunk) },
          LayerRecorded::recorded;
}
