//! Error scopes around the crate's own wgpu calls, so that a validation error or a
//! failed allocation comes back as an `Error::Gpu` from the call that caused it.

/// Run `f` inside one error scope per filter and return what the scopes caught (the
/// innermost first). wgpu's scopes are per thread.
///
/// On wasm32 a scope can only be awaited, and waiting for it would block the browser's
/// one thread: there `f` runs without scopes and an error reaches the device's
/// uncaptured-error handler instead (the crate's own, which the next call reports, or
/// the handler of a device the caller passed in).
pub(crate) fn catching<T>(
    device: &wgpu::Device,
    filters: &[wgpu::ErrorFilter],
    f: impl FnOnce() -> T,
) -> (T, Option<wgpu::Error>) {
    #[cfg(not(target_arch = "wasm32"))]
    {
        let scopes: Vec<_> = filters
            .iter()
            .map(|&fl| device.push_error_scope(fl))
            .collect();
        let out = f();
        let mut caught = None;
        for scope in scopes.into_iter().rev() {
            let e = pollster::block_on(scope.pop());
            caught = caught.or(e);
        }
        (out, caught)
    }
    #[cfg(target_arch = "wasm32")]
    {
        let _ = (device, filters);
        (f(), None)
    }
}
