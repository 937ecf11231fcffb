//! What the bench needs of an op it has no scenario of its own for: [`BenchCase`],
//! attached to the op's `OpInfo` by its folder, so that `deltatape bench --ops <op>`
//! takes any op of [`Op::ALL`] that has one without an edit of the bench.

use crate::dtype::GdnDtypes;
use crate::engine::encode::Prepared;
use crate::engine::key::Op;
use crate::error::Result;
use crate::gpu::backend::GpuBackend;
use crate::shape::GdnShape;

/// An op's cell in the bench: its dispatch at a point of the bench's grid (`shape`: B,
/// T, the heads and dims; `dtypes`: the cell's) on buffers the bench makes
/// (`filled(bytes)`: finite values in any dtype, every usage a dispatch needs), and the
/// bytes that dispatch reads and writes (the copy kernel moves as many for the cell's
/// ceiling).
pub struct BenchCase {
    pub bytes: fn(&GdnShape, GdnDtypes) -> u64,
    #[allow(clippy::type_complexity)]
    pub prepare:
        fn(&GpuBackend, &GdnShape, GdnDtypes, &dyn Fn(u64) -> wgpu::Buffer) -> Result<Prepared>,
}

impl Op {
    /// The op's bench case, where its folder attached one.
    pub fn bench_case(self) -> Option<&'static BenchCase> {
        self.info().attached?.downcast_ref::<BenchCase>()
    }
}
