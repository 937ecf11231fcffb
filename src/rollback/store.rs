//! What a [`super::Rollback`] asks of the place its layers live: one implementation
//! keeps them on the host (`cpu.rs`, the CPU reference), one on the GPU (`gpu.rs`,
//! resident). The rollback checks every argument first; a store only acts.

use super::commit::CommitKind;
use crate::engine::host::Pending;
use crate::error::Result;
use crate::op::record::RecordInputs;
use crate::op::record::{LayerInputs, LayerParams};
use crate::shape::LayerShape;

/// A raw draft of a layer whose parameters were not set (`set_layer_params`).
pub(crate) fn no_layer_params(op: &'static str) -> crate::error::Error {
    crate::error::Error::Order {
        op,
        why: "a raw draft needs the layer's parameters: set_layer_params first",
    }
}

/// What a store hands back to the host: at hand (the CPU's), or on its way back from
/// the GPU, whose copy is submitted and whose map is started. The rollback's blocking
/// calls [`Fetch::wait`] for it, their `_async` twins await it.
pub(crate) enum Fetch<T> {
    Ready(T),
    Gpu(Pending<'static, T>),
}

impl<T> Fetch<T> {
    pub(crate) fn wait(self) -> Result<T> {
        match self {
            Fetch::Ready(t) => Ok(t),
            Fetch::Gpu(p) => p.wait(),
        }
    }

    pub(crate) async fn wait_async(self) -> Result<T> {
        match self {
            Fetch::Ready(t) => Ok(t),
            Fetch::Gpu(p) => p.wait_async().await,
        }
    }
}

/// One layer's draft, as `Rollback::draft_layer` checked it.
pub(crate) struct LayerDraft<'a, 'b, A, G> {
    pub layer: usize,
    pub inputs: &'b RecordInputs<'a, A, G>,
    /// The drafted conv inputs, when the rollback keeps a conv window.
    pub conv_x: Option<&'b [A]>,
}

/// The layers' states, tapes and conv windows, and the round's draft and commit.
/// `Send + Sync` but on wasm32, where wgpu's handles are neither (so is a `Rollback`).
pub(crate) trait LayerStore<A, S, P, G>: wgpu::WasmNotSendSync {
    /// Layers whose deferred commit holds a second tape k and g.
    fn deferred_tapes(&self) -> usize;
    /// Bytes of the buffers the host's activations are uploaded into (GPU).
    fn upload_bytes(&self) -> u64 {
        0
    }
    fn set_state(&mut self, layer: usize, state: &[S]) -> Result<()>;
    fn state(&self, layer: usize) -> Result<Fetch<Vec<S>>>;
    fn set_conv_window(&mut self, layer: usize, window: &[A]) -> Result<()>;
    fn conv_window(&self, layer: usize) -> Result<Fetch<Vec<A>>>;
    /// Whether `layer` is drafted in this round.
    fn is_drafted(&self, layer: usize) -> bool;
    /// Draft one layer (done, or submitted, when this returns); its y.
    fn draft_layer(&mut self, draft: LayerDraft<'_, '_, A, G>) -> Result<Fetch<Vec<A>>>;
    /// Keep a layer's parameters for its raw drafts (`shape`: the rollback's, with its
    /// conv's taps).
    fn set_layer_params(
        &mut self,
        layer: usize,
        shape: &LayerShape,
        params: &LayerParams<'_>,
    ) -> Result<()>;
    /// Draft one layer from its raw inputs (record_layer; the window the layer's own);
    /// its y. `Error::Order` without the layer's parameters.
    fn draft_layer_raw(
        &mut self,
        layer: usize,
        inputs: &LayerInputs<'_, A, G>,
    ) -> Result<Fetch<Vec<A>>>;
    /// Draft every layer (`conv_x[layer]` when the rollback keeps a conv).
    fn draft_all(
        &mut self,
        inputs: &[RecordInputs<'_, A, G>],
        conv_x: Option<&[&[A]]>,
    ) -> Result<()>;
    fn draft_y(&self, layer: usize) -> Result<Vec<A>>;
    fn commit(&mut self, accepted: &[u32]) -> Result<CommitKind>;
    fn commit_from_buffer(&mut self, accepted: &wgpu::Buffer) -> Result<()>;
    fn commit_deferred(&mut self, accepted: &[u32]) -> Result<()>;
    fn flush(&mut self) -> Result<()>;
    fn has_deferred_commit(&self) -> bool;
    fn read_status(&self) -> Result<Vec<u32>>;
    fn clear_status(&mut self) -> Result<()>;
    fn wait(&self) -> Result<()>;
}
