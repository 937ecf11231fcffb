//! The host-slices path of the wgpu backend, one path for every op: upload the inputs
//! (operand table order), encode with the resident path, copy the outputs to staging
//! buffers, submit, and hand back a [`Pending`] result. `wait` blocks with a bound;
//! `wait_async` completes without the caller polling the device (on native a helper
//! thread waits; on wasm32 the browser completes the buffer maps).

use super::cache::write_padded;
use super::runtime::Runtime;
use crate::dtype::GdnDtypes;
use crate::engine::operand::{Access, HostSide, OperandSpec};
use crate::error::{Error, Result};
use futures_intrusive::channel::shared::{oneshot_channel, OneshotReceiver};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use wgpu::BufferUsages as U;

/// Outputs on their way back: staging buffers mapped once the submission is done.
pub(crate) struct Readback {
    backend: Runtime,
    op: &'static str,
    submission: wgpu::SubmissionIndex,
    /// (staging buffer, bytes to read)
    staging: Vec<(wgpu::Buffer, u64)>,
    mapped: Vec<OneshotReceiver<std::result::Result<(), wgpu::BufferAsyncError>>>,
    /// Device buffers to hand back to the pool once the GPU is done with them.
    used: Vec<wgpu::Buffer>,
}

/// A staging buffer's map, as its callback answered it (`None`: the callback was dropped).
type MapAnswer = Option<std::result::Result<(), wgpu::BufferAsyncError>>;

impl Readback {
    pub(crate) fn wait_blocking(self) -> Result<Vec<Vec<u8>>> {
        self.backend
            .wait_labelled(self.submission.clone(), self.op)?;
        let answers = self.answers_after_poll();
        self.finish(answers)
    }

    /// The maps' answers once a poll has run their callbacks (each is ready by then).
    fn answers_after_poll(&self) -> Vec<MapAnswer> {
        let receive = |m: &OneshotReceiver<_>| pollster::block_on(m.receive());
        self.mapped.iter().map(receive).collect()
    }

    #[cfg(not(target_arch = "wasm32"))]
    async fn wait_async(self) -> Result<Vec<Vec<u8>>> {
        let (tx, rx) = oneshot_channel();
        let (backend, submission, op) = (self.backend.clone(), self.submission.clone(), self.op);
        std::thread::spawn(move || {
            tx.send(backend.wait_labelled(submission, op)).ok();
        });
        rx.receive().await.unwrap_or(Err(Error::Gpu {
            op,
            message: "the readback thread ended without an answer".into(),
        }))?;
        let answers = self.answers_after_poll();
        self.finish(answers)
    }

    /// In a browser the maps complete from the event loop: nothing to poll. Each
    /// answer can be received once, so it is handed to `finish` as received.
    #[cfg(target_arch = "wasm32")]
    async fn wait_async(self) -> Result<Vec<Vec<u8>>> {
        let mut answers = Vec::with_capacity(self.mapped.len());
        for m in &self.mapped {
            answers.push(m.receive().await);
        }
        self.finish(answers)
    }

    /// This readback as a result of type `T`, made from the bytes by `finish`.
    pub(crate) fn then<'a, T>(
        self,
        finish: impl FnOnce(Vec<Vec<u8>>) -> Result<T> + Send + 'a,
    ) -> Pending<'a, T> {
        Pending {
            readback: self,
            finish: Box::new(finish),
        }
    }

    /// After the maps answered: check each and copy the bytes out.
    fn finish(self, answers: Vec<MapAnswer>) -> Result<Vec<Vec<u8>>> {
        let op = self.op;
        let mut out = Vec::with_capacity(self.staging.len());
        for ((buffer, bytes), answer) in self.staging.iter().zip(answers) {
            match answer {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    return Err(Error::Gpu {
                        op,
                        message: e.to_string(),
                    })
                }
                None => {
                    return Err(Error::Gpu {
                        op,
                        message: "buffer map callback dropped".into(),
                    })
                }
            }
            // Mapped ranges are whole words; a 16-bit tensor of odd length ends mid-word.
            let view = buffer
                .get_mapped_range(..bytes.div_ceil(4) * 4)
                .map_err(|e| Error::Gpu {
                    op,
                    message: e.to_string(),
                })?;
            out.push(view[..*bytes as usize].to_vec());
            drop(view);
            buffer.unmap();
        }
        let pool = &self.backend.inner.pool;
        for b in self
            .used
            .into_iter()
            .chain(self.staging.into_iter().map(|(b, _)| b))
        {
            pool.give(b);
        }
        Ok(out)
    }
}

/// A host-path result on its way back: the outputs' bytes, turned into the call's
/// result by `finish` once the GPU is done.
#[must_use = "the result is only read back by wait or wait_async"]
pub struct Pending<'a, T> {
    readback: Readback,
    finish: Box<dyn FnOnce(Vec<Vec<u8>>) -> Result<T> + Send + 'a>,
}

impl<T> Pending<'_, T> {
    /// Block until the result is back (bounded by the backend's timeout).
    pub fn wait(self) -> Result<T> {
        (self.finish)(self.readback.wait_blocking()?)
    }

    /// The result, as a future that needs no polling of the device by the caller.
    pub async fn wait_async(self) -> Result<T> {
        let bytes = self.readback.wait_async().await?;
        (self.finish)(bytes)
    }
}

impl Runtime {
    /// A device buffer for one operand of a host call: the input's bytes uploaded, or
    /// an output sized from the operand table (pooled, reused across calls).
    pub(crate) fn host_buffer<Sh>(
        &self,
        spec: &OperandSpec<Sh>,
        shape: &Sh,
        dtypes: &GdnDtypes,
        side: HostSide<'_>,
    ) -> wgpu::Buffer {
        let pool = &self.inner.pool;
        match side {
            HostSide::In(bytes, _) => {
                let size = (bytes.len() as u64).div_ceil(4) * 4;
                // An operand updated in place is read back too.
                let usage = match spec.access {
                    Access::ReadWrite => U::STORAGE | U::COPY_DST | U::COPY_SRC,
                    _ => U::STORAGE | U::COPY_DST,
                };
                let buffer = pool.take(self.device(), size.max(16), usage);
                write_padded(self.queue(), &buffer, bytes);
                buffer
            }
            HostSide::Out(_) => {
                // The lengths were checked against the shape: no overflow here.
                let size = spec.bytes(shape, dtypes).unwrap_or(0).max(16);
                pool.take(self.device(), size, U::STORAGE | U::COPY_SRC)
            }
        }
    }

    /// Encode a host call with `encode`, copy every written operand (table order, those
    /// updated in place included) to a staging buffer, submit, and return the pending
    /// result; all inside error scopes.
    pub(crate) fn host_call<'a, Sh, T>(
        &self,
        op: &'static str,
        specs: &[OperandSpec<Sh>],
        buffers: Vec<Option<&wgpu::Buffer>>,
        encode: impl FnOnce(&mut wgpu::CommandEncoder) -> Result<()>,
        finish: impl FnOnce(Vec<Vec<u8>>) -> Result<T> + Send + 'a,
    ) -> Result<Pending<'a, T>> {
        let readback = self.guarded(op, || {
            let mut encoder = self.encoder();
            encode(&mut encoder)?;
            let outputs: Vec<(&wgpu::Buffer, u64, u64)> = specs
                .iter()
                .zip(&buffers)
                .filter(|(spec, _)| spec.access.writes())
                .filter_map(|(_, b)| b.map(|b| (b, 0, b.size())))
                .collect();
            let used = buffers.iter().flatten().map(|b| (*b).clone()).collect();
            self.submit_and_map(op, encoder, &outputs, used)
        })?;
        Ok(readback.then(finish))
    }

    /// Copy `outputs` to staging buffers, submit, and start mapping them.
    pub(crate) fn submit_and_map(
        &self,
        op: &'static str,
        mut encoder: wgpu::CommandEncoder,
        outputs: &[(&wgpu::Buffer, u64, u64)],
        used: Vec<wgpu::Buffer>,
    ) -> Result<Readback> {
        let device = self.device();
        let mut staging = Vec::with_capacity(outputs.len());
        for (buffer, offset, bytes) in outputs {
            let size = bytes.div_ceil(4) * 4;
            let s = self
                .inner
                .pool
                .take(device, size.max(16), U::MAP_READ | U::COPY_DST);
            if size > 0 {
                encoder.copy_buffer_to_buffer(buffer, *offset, &s, 0, size);
            }
            staging.push((s, *bytes));
        }
        let submission = self.queue().submit([encoder.finish()]);
        let mut mapped = Vec::with_capacity(staging.len());
        for (s, _) in &staging {
            let (tx, rx) = oneshot_channel();
            s.map_async(wgpu::MapMode::Read, .., move |r| {
                tx.send(r).ok();
            });
            mapped.push(rx);
        }
        Ok(Readback {
            backend: self.clone(),
            op,
            submission,
            staging,
            mapped,
            used,
        })
    }

    /// `GpuBackend::read_buffer`.
    pub(crate) fn read_buffer<E: bytemuck::Pod>(
        &self,
        buffer: &wgpu::Buffer,
        len: usize,
    ) -> Result<Vec<E>> {
        self.read_buffer_at("read_buffer", buffer, 0, len)
    }

    /// `GpuBackend::read_buffer`, its errors naming the crate's call `op`.
    pub(crate) fn read_buffer_labelled<E: bytemuck::Pod>(
        &self,
        op: &'static str,
        buffer: &wgpu::Buffer,
        len: usize,
    ) -> Result<Vec<E>> {
        self.read_buffer_at(op, buffer, 0, len)
    }

    /// `GpuBackend::read_buffer` from byte `offset` (a multiple of 4) on.
    pub(crate) fn read_buffer_at<E: bytemuck::Pod>(
        &self,
        op: &'static str,
        buffer: &wgpu::Buffer,
        offset: u64,
        len: usize,
    ) -> Result<Vec<E>> {
        self.start_read_at(op, buffer, offset, len)?.wait()
    }

    /// [`Runtime::read_buffer_at`] without the wait: the copy is submitted and its map
    /// started; the [`Pending`] brings the values back, blocking or as a future.
    pub(crate) fn start_read_at<E: bytemuck::Pod>(
        &self,
        op: &'static str,
        buffer: &wgpu::Buffer,
        offset: u64,
        len: usize,
    ) -> Result<Pending<'static, Vec<E>>> {
        let bytes = (len * std::mem::size_of::<E>()) as u64;
        let readback = self.guarded(op, || {
            self.submit_and_map(op, self.encoder(), &[(buffer, offset, bytes)], Vec::new())
        })?;
        Ok(readback.then(move |out| Ok(from_bytes(&out[0], len))))
    }

    /// `GpuBackend::wait_idle`.
    pub(crate) fn wait_idle(&self) -> Result<()> {
        self.wait_idle_labelled("wait_idle")
    }

    /// `GpuBackend::wait_idle`, its errors naming the crate's call `op`.
    pub(crate) fn wait_idle_labelled(&self, op: &'static str) -> Result<()> {
        let submission = self.queue().submit([]);
        self.wait_labelled(submission, op)
    }

    /// `GpuBackend::wait_for`.
    pub(crate) fn wait_for(&self, submission: wgpu::SubmissionIndex) -> Result<()> {
        self.wait_labelled(submission, "wait_for")
    }

    /// `GpuBackend::wait_for`, its errors naming the crate's call `op`.
    pub(crate) fn wait_labelled(
        &self,
        submission: wgpu::SubmissionIndex,
        op: &'static str,
    ) -> Result<()> {
        // A browser's one thread cannot block on the GPU: the async calls work there.
        if cfg!(target_arch = "wasm32") {
            return Err(Error::Unsupported {
                op,
                arg: "wait",
                why: "blocking waits are not possible on wasm32; use the *_async calls".into(),
            });
        }
        let start = Instant::now();
        let gpu_error = |e: wgpu::PollError| Error::Gpu {
            op,
            message: e.to_string(),
        };
        let (timeout, spin) = (self.inner.options.timeout, self.inner.options.spin);
        let spin = spin.min(timeout);
        if !spin.is_zero() {
            // Done once everything submitted so far is (so `submission` too; the queue's
            // pending buffer writes are submitted, as `wait_idle` does). Polled with
            // `PollType::Poll`: wgpu 30's non-blocking `Wait` asserts on a race with
            // another thread's poll (resource.rs, "If the queue is empty ..."), which the
            // eight-thread test in tests/reliability.rs hit.
            let done = Arc::new(AtomicBool::new(false));
            let flag = done.clone();
            self.queue()
                .on_submitted_work_done(move || flag.store(true, Ordering::Release));
            while start.elapsed() < spin {
                self.device()
                    .poll(wgpu::PollType::Poll)
                    .map_err(gpu_error)?;
                if done.load(Ordering::Acquire) {
                    return Ok(());
                }
                std::thread::yield_now();
            }
        }
        match self.device().poll(wgpu::PollType::Wait {
            submission_index: Some(submission),
            timeout: Some(timeout.saturating_sub(start.elapsed())),
        }) {
            Ok(_) => Ok(()),
            Err(wgpu::PollError::Timeout) => Err(Error::Timeout {
                op,
                millis: timeout.as_millis() as u64,
            }),
            Err(e) => Err(gpu_error(e)),
        }
    }

    /// Run `f` (allocations, uploads, encoding, submission) inside out-of-memory and
    /// validation error scopes, so that a failed allocation is an `Error::Gpu`, not an
    /// uncaptured error.
    pub(crate) fn guarded<T>(&self, op: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        use wgpu::ErrorFilter::{OutOfMemory, Validation};
        match super::scope::catching(self.device(), &[OutOfMemory, Validation], f) {
            (_, Some(e)) => Err(Error::Gpu {
                op,
                message: e.to_string(),
            }),
            (r, None) => r,
        }
    }

    /// A command encoder on this runtime's device.
    pub(crate) fn encoder(&self) -> wgpu::CommandEncoder {
        self.device()
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("deltatape"),
            })
    }
}

/// Elements of `E` from the front of a readback's bytes.
pub(crate) fn from_bytes<E: bytemuck::Pod>(bytes: &[u8], len: usize) -> Vec<E> {
    bytemuck::pod_collect_to_vec(&bytes[..len * std::mem::size_of::<E>()])
}
