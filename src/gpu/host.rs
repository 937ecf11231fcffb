//! The host-slices path of the wgpu backend: upload, encode with the resident path,
//! read back. Blocking calls wait with a bound; `*_async` calls return futures that
//! complete without the caller polling the device (a helper thread waits).

use super::encode::{RecordBuffers, RepeatBuffers, ReplayBuffers};
use super::kernel::GdnDtypes;
use super::GpuBackend;
use crate::dtype::Element;
use crate::error::{check_len, Error, Result};
use crate::ops::{check_record, check_repeat, check_replay, RecordInputs, Recorded, TapeRef};
use crate::shape::{GdnShape, GqaLayout, RepeatShape};
use futures_intrusive::channel::shared::{oneshot_channel, OneshotReceiver};
use wgpu::BufferUsages as U;

/// Outputs on their way back: staging buffers mapped once the submission is done.
struct Readback {
    backend: GpuBackend,
    op: &'static str,
    submission: wgpu::SubmissionIndex,
    /// (staging buffer, bytes to read)
    staging: Vec<(wgpu::Buffer, u64)>,
    mapped: Vec<OneshotReceiver<std::result::Result<(), wgpu::BufferAsyncError>>>,
    /// Device buffers to hand back to the pool once the GPU is done with them.
    used: Vec<wgpu::Buffer>,
}

impl Readback {
    fn wait_blocking(self) -> Result<Vec<Vec<u8>>> {
        let device = self.backend.device().clone();
        poll_until_done(
            &device,
            self.submission.clone(),
            self.backend.inner.timeout,
            self.op,
        )?;
        self.finish()
    }

    async fn wait_async(self) -> Result<Vec<Vec<u8>>> {
        let (tx, rx) = oneshot_channel();
        let device = self.backend.device().clone();
        let (submission, timeout, op) =
            (self.submission.clone(), self.backend.inner.timeout, self.op);
        std::thread::spawn(move || {
            tx.send(poll_until_done(&device, submission, timeout, op))
                .ok();
        });
        rx.receive().await.unwrap_or(Err(Error::Gpu {
            op,
            message: "the readback thread ended without an answer".into(),
        }))?;
        self.finish()
    }

    /// After the poll: check each map and copy the bytes out.
    fn finish(self) -> Result<Vec<Vec<u8>>> {
        let op = self.op;
        let mut out = Vec::with_capacity(self.staging.len());
        for ((buffer, bytes), mapped) in self.staging.iter().zip(self.mapped) {
            match pollster::block_on(mapped.receive()) {
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

fn poll_until_done(
    device: &wgpu::Device,
    submission: wgpu::SubmissionIndex,
    timeout: std::time::Duration,
    op: &'static str,
) -> Result<()> {
    match device.poll(wgpu::PollType::Wait {
        submission_index: Some(submission),
        timeout: Some(timeout),
    }) {
        Ok(_) => Ok(()),
        Err(wgpu::PollError::Timeout) => Err(Error::Timeout {
            op,
            millis: timeout.as_millis() as u64,
        }),
        Err(e) => Err(Error::Gpu {
            op,
            message: e.to_string(),
        }),
    }
}

fn from_bytes<E: Element>(bytes: &[u8], len: usize) -> Vec<E> {
    bytemuck::pod_collect_to_vec(&bytes[..len * std::mem::size_of::<E>()])
}

impl GpuBackend {
    /// A storage buffer holding `data` (padded to whole words).
    pub(crate) fn upload<E: bytemuck::Pod>(&self, data: &[E]) -> wgpu::Buffer {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let size = (bytes.len() as u64).div_ceil(4) * 4;
        let buffer = self
            .inner
            .pool
            .take(self.device(), size.max(16), U::STORAGE | U::COPY_DST);
        if bytes.len().is_multiple_of(4) {
            self.queue().write_buffer(&buffer, 0, bytes);
        } else {
            let mut padded = bytes.to_vec();
            padded.resize(size as usize, 0);
            self.queue().write_buffer(&buffer, 0, &padded);
        }
        buffer
    }

    /// An output storage buffer for `len` elements of `E`.
    fn output<E: Element>(&self, len: usize) -> wgpu::Buffer {
        let size = E::DTYPE.buffer_bytes(len).unwrap_or(0).max(16);
        self.inner
            .pool
            .take(self.device(), size, U::STORAGE | U::COPY_SRC)
    }

    /// Copy `outputs` to staging buffers, submit, and start mapping them.
    fn submit_and_map(
        &self,
        op: &'static str,
        mut encoder: wgpu::CommandEncoder,
        outputs: &[(&wgpu::Buffer, u64)],
        used: Vec<wgpu::Buffer>,
    ) -> Result<Readback> {
        let device = self.device();
        let mut staging = Vec::with_capacity(outputs.len());
        for (buffer, bytes) in outputs {
            let size = bytes.div_ceil(4) * 4;
            let s = self
                .inner
                .pool
                .take(device, size.max(16), U::MAP_READ | U::COPY_DST);
            if size > 0 {
                encoder.copy_buffer_to_buffer(buffer, 0, &s, 0, size);
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

    /// Read `len` elements of `E` from a buffer with `COPY_SRC` (blocking, bounded).
    pub(crate) fn read_buffer<E: Element>(
        &self,
        op: &'static str,
        buffer: &wgpu::Buffer,
        len: usize,
    ) -> Result<Vec<E>> {
        let bytes = (len * E::DTYPE.size_bytes()) as u64;
        let bytes = self
            .guarded(op, || {
                self.submit_and_map(op, self.encoder(), &[(buffer, bytes)], Vec::new())
            })?
            .wait_blocking()?;
        Ok(from_bytes(&bytes[0], len))
    }

    /// Wait (bounded) until the device has finished all submitted work.
    pub fn wait_idle(&self, op: &'static str) -> Result<()> {
        let submission = self.queue().submit([]);
        poll_until_done(self.device(), submission, self.inner.timeout, op)
    }

    /// Run `f` (allocations, uploads, encoding, submission) inside out-of-memory and
    /// validation error scopes, so that a failed allocation is an `Error::Gpu`, not an
    /// uncaptured error.
    pub(crate) fn guarded<T>(&self, op: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let device = self.device();
        let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let result = f();
        let v = pollster::block_on(validation.pop());
        let o = pollster::block_on(oom.pop());
        match (result, v.or(o)) {
            (_, Some(e)) => Err(Error::Gpu {
                op,
                message: e.to_string(),
            }),
            (r, None) => r,
        }
    }

    pub(crate) fn encoder(&self) -> wgpu::CommandEncoder {
        self.device()
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("deltatape"),
            })
    }

    fn start_record<A: Element, S: Element, P: Element>(
        &self,
        shape: &GdnShape,
        layout: GqaLayout,
        inputs: &RecordInputs<'_, A>,
        state_in: &[S],
    ) -> Result<Readback> {
        check_record(shape, inputs, state_in)?;
        let ins = [
            self.upload(inputs.q),
            self.upload(inputs.k),
            self.upload(inputs.v),
            self.upload(inputs.g),
            self.upload(inputs.beta),
            self.upload(state_in),
        ];
        let mask = inputs.mask.map(|m| self.upload(m));
        let (y, state_out, delta) = (
            self.output::<A>(shape.v_len()),
            self.output::<S>(shape.state_len()),
            self.output::<P>(shape.v_len()),
        );
        let dtypes = GdnDtypes {
            act: A::DTYPE,
            state: S::DTYPE,
            tape: P::DTYPE,
        };
        let mut encoder = self.encoder();
        self.encode_record(
            &mut encoder,
            shape,
            layout,
            dtypes,
            &RecordBuffers {
                q: &ins[0],
                k: &ins[1],
                v: &ins[2],
                g: &ins[3],
                beta: &ins[4],
                state_in: &ins[5],
                y: &y,
                state_out: &state_out,
                delta: &delta,
                mask: mask.as_ref(),
            },
        )?;
        let outputs = [
            (&y, (shape.v_len() * A::DTYPE.size_bytes()) as u64),
            (
                &state_out,
                (shape.state_len() * S::DTYPE.size_bytes()) as u64,
            ),
            (&delta, (shape.v_len() * P::DTYPE.size_bytes()) as u64),
        ];
        let readback = {
            let mut used: Vec<wgpu::Buffer> = ins.to_vec();
            used.extend(mask.clone());
            used.extend([y.clone(), state_out.clone(), delta.clone()]);
            self.submit_and_map("record", encoder, &outputs, used)?
        };
        Ok(readback)
    }

    /// record on the host path (blocking): the same call and result as the CPU backend.
    pub fn record<A: Element, S: Element, P: Element>(
        &self,
        shape: &GdnShape,
        layout: GqaLayout,
        inputs: &RecordInputs<'_, A>,
        state_in: &[S],
    ) -> Result<Recorded<A, S, P>> {
        let bytes = self
            .guarded("record", || {
                self.start_record::<A, S, P>(shape, layout, inputs, state_in)
            })?
            .wait_blocking()?;
        Ok(recorded_from(shape, &bytes))
    }

    /// record on the host path, as a future.
    pub async fn record_async<A: Element, S: Element, P: Element>(
        &self,
        shape: &GdnShape,
        layout: GqaLayout,
        inputs: &RecordInputs<'_, A>,
        state_in: &[S],
    ) -> Result<Recorded<A, S, P>> {
        let bytes = self
            .guarded("record", || {
                self.start_record::<A, S, P>(shape, layout, inputs, state_in)
            })?
            .wait_async()
            .await?;
        Ok(recorded_from(shape, &bytes))
    }

    fn start_replay<A: Element, S: Element, P: Element>(
        &self,
        shape: &GdnShape,
        tape: &TapeRef<'_, A, P>,
        snapshot: &[S],
        accepted: &[u32],
        mask: Option<&[u32]>,
    ) -> Result<Readback> {
        check_replay(shape, tape, snapshot, accepted, mask)?;
        let ins = [
            self.upload(tape.delta),
            self.upload(tape.k),
            self.upload(tape.g),
            self.upload(snapshot),
            self.upload(accepted),
        ];
        let mask = mask.map(|m| self.upload(m));
        let state_out = self.output::<S>(shape.state_len());
        let dtypes = GdnDtypes {
            act: A::DTYPE,
            state: S::DTYPE,
            tape: P::DTYPE,
        };
        let mut encoder = self.encoder();
        self.encode_replay(
            &mut encoder,
            shape,
            dtypes,
            &ReplayBuffers {
                tape_delta: &ins[0],
                tape_k: &ins[1],
                tape_g: &ins[2],
                snapshot: &ins[3],
                accepted: &ins[4],
                state_out: &state_out,
                mask: mask.as_ref(),
            },
        )?;
        let outputs = [(
            &state_out,
            (shape.state_len() * S::DTYPE.size_bytes()) as u64,
        )];
        let mut used: Vec<wgpu::Buffer> = ins.to_vec();
        used.extend(mask.clone());
        used.push(state_out.clone());
        self.submit_and_map("replay", encoder, &outputs, used)
    }

    /// replay on the host path (blocking).
    pub fn replay<A: Element, S: Element, P: Element>(
        &self,
        shape: &GdnShape,
        tape: &TapeRef<'_, A, P>,
        snapshot: &[S],
        accepted: &[u32],
        mask: Option<&[u32]>,
    ) -> Result<Vec<S>> {
        let bytes = self.replay_blocking(shape, tape, snapshot, accepted, mask)?;
        Ok(from_bytes(&bytes, shape.state_len()))
    }

    /// [`replay`](Self::replay) read back into the caller's `state_out`
    /// (`shape.state_len()` elements).
    pub fn replay_into<A: Element, S: Element, P: Element>(
        &self,
        shape: &GdnShape,
        tape: &TapeRef<'_, A, P>,
        snapshot: &[S],
        accepted: &[u32],
        mask: Option<&[u32]>,
        state_out: &mut [S],
    ) -> Result<()> {
        check_len("replay", "state_out", shape.state_len(), state_out.len())?;
        let bytes = self.replay_blocking(shape, tape, snapshot, accepted, mask)?;
        let out: &mut [u8] = bytemuck::cast_slice_mut(state_out);
        let n = out.len();
        out.copy_from_slice(&bytes[..n]);
        Ok(())
    }

    /// The committed state's bytes (padded to whole words), read back blocking.
    fn replay_blocking<A: Element, S: Element, P: Element>(
        &self,
        shape: &GdnShape,
        tape: &TapeRef<'_, A, P>,
        snapshot: &[S],
        accepted: &[u32],
        mask: Option<&[u32]>,
    ) -> Result<Vec<u8>> {
        let mut outputs = self
            .guarded("replay", || {
                self.start_replay(shape, tape, snapshot, accepted, mask)
            })?
            .wait_blocking()?;
        Ok(outputs.swap_remove(0))
    }

    /// replay on the host path, as a future.
    pub async fn replay_async<A: Element, S: Element, P: Element>(
        &self,
        shape: &GdnShape,
        tape: &TapeRef<'_, A, P>,
        snapshot: &[S],
        accepted: &[u32],
        mask: Option<&[u32]>,
    ) -> Result<Vec<S>> {
        let bytes = self
            .guarded("replay", || {
                self.start_replay(shape, tape, snapshot, accepted, mask)
            })?
            .wait_async()
            .await?;
        Ok(from_bytes(&bytes[0], shape.state_len()))
    }

    fn start_repeat<E: Element>(
        &self,
        shape: &RepeatShape,
        layout: GqaLayout,
        src: &[E],
    ) -> Result<Readback> {
        check_repeat(shape, src)?;
        let input = self.upload(src);
        let dst = self.output::<E>(shape.dst_len());
        let mut encoder = self.encoder();
        self.encode_repeat(
            &mut encoder,
            shape,
            layout,
            E::DTYPE,
            &RepeatBuffers {
                src: &input,
                dst: &dst,
            },
        )?;
        let outputs = [(&dst, (shape.dst_len() * E::DTYPE.size_bytes()) as u64)];
        self.submit_and_map("repeat", encoder, &outputs, vec![input, dst.clone()])
    }

    /// repeat on the host path (blocking).
    pub fn repeat<E: Element>(
        &self,
        shape: &RepeatShape,
        layout: GqaLayout,
        src: &[E],
    ) -> Result<Vec<E>> {
        let bytes = self
            .guarded("repeat", || self.start_repeat(shape, layout, src))?
            .wait_blocking()?;
        Ok(from_bytes(&bytes[0], shape.dst_len()))
    }

    /// repeat on the host path, as a future.
    pub async fn repeat_async<E: Element>(
        &self,
        shape: &RepeatShape,
        layout: GqaLayout,
        src: &[E],
    ) -> Result<Vec<E>> {
        let bytes = self
            .guarded("repeat", || self.start_repeat(shape, layout, src))?
            .wait_async()
            .await?;
        Ok(from_bytes(&bytes[0], shape.dst_len()))
    }
}

fn recorded_from<A: Element, S: Element, P: Element>(
    shape: &GdnShape,
    bytes: &[Vec<u8>],
) -> Recorded<A, S, P> {
    Recorded {
        y: from_bytes(&bytes[0], shape.v_len()),
        state: from_bytes(&bytes[1], shape.state_len()),
        delta: from_bytes(&bytes[2], shape.v_len()),
    }
}
